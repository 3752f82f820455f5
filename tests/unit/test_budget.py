"""The account budget (pure logic, a fake clock): reads paced so that no platform window gets more
than the rate, writes and creates never behind reads, a throttle pauses the reads, the poll
interval stretches to fit, the rates read from a connection."""

from __future__ import annotations

import uuid
from collections import deque

import pytest
from airflow.sdk.definitions.connection import Connection

from airflow_training_provider.budget import (
    PLANNED_READ_SHARE,
    AccountBudget,
    ApiRates,
    RequestPacer,
    WindowLimiter,
    account_budget,
    is_throttle,
)
from airflow_training_provider.errors import TrainingPlatformError, TransientPlatformError
from airflow_training_provider.hooks.connection import PlatformConnection


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def most_in_a_window(times: list[float], window: float) -> int:
    """The most send times in any window of ``window`` seconds (sliding: every alignment)."""
    inside: deque[float] = deque()
    most = 0
    for t in times:
        inside.append(t)
        while inside[0] <= t - window:
            inside.popleft()
        most = max(most, len(inside))
    return most


@pytest.mark.parametrize(
    ("per_hour", "window", "limit"),
    [(500, 3600, 500), (10, 3600, 10), (50_000, 36, 500), (1000, 36, 10)],
)
def test_requests_sent_as_fast_as_the_pacer_allows_never_exceed_the_limit_in_any_window(
    per_hour, window, limit
):
    clock = FakeClock()
    pacer = RequestPacer(per_hour, window, clock)
    sent = []
    for _ in range(limit * 4):  # four windows' worth, each sent the moment its slot comes
        clock.now += pacer.reserve()
        sent.append(clock.now)
    assert most_in_a_window(sent, window) <= limit
    # and the rate is used, not wasted: after the burst, one request per slot of the rate, which
    # keeps a burst's worth a window for urgent reads
    assert sent[-1] - sent[0] == pytest.approx((4 * limit - pacer.burst) * window / (limit - 2 * pacer.burst))


def test_the_first_requests_go_at_once_up_to_the_burst_then_one_per_interval():
    clock = FakeClock()
    pacer = RequestPacer(500, 3600, clock)
    assert pacer.burst == 10
    waits = [pacer.reserve() for _ in range(12)]  # booked now, none sent yet
    assert waits[:10] == [0.0] * 10
    assert waits[10] == pytest.approx(pacer.interval)
    assert pacer.interval == pytest.approx(3600 / 480)  # 500 less the burst, less as many for urgent reads


@pytest.mark.parametrize(("per_hour", "window", "limit"), [(50, 3600, 50), (10, 3600, 10), (1000, 36, 10)])
def test_writes_and_creates_go_at_once_up_to_the_windows_limit_and_never_over_it(per_hour, window, limit):
    clock = FakeClock()
    limiter = WindowLimiter(per_hour, window, clock)
    assert [limiter.reserve() for _ in range(limit)] == [0.0] * limit  # a DAG run's cancels, at once
    sent = [clock.now] * limit
    for _ in range(limit * 3):
        clock.now += limiter.reserve()
        sent.append(clock.now)
    assert most_in_a_window(sent, window) <= limit


def test_cancels_and_creates_never_queue_behind_a_backlog_of_reads():
    budget = AccountBudget(ApiRates(read_per_hour=500, write_per_hour=50, create_per_hour=10))
    backlog = [budget.delay("read") for _ in range(200)]
    assert backlog[-1] > 1000  # two hundred reads booked: the last one waits a quarter of an hour
    assert budget.delay("write") == 0.0
    assert budget.delay("create") == 0.0
    # a cancel's own reads (its state check, its confirm polls) go at once, and are counted
    assert budget.delay("read", urgent=True) == 0.0
    assert budget.delay("read") > backlog[-1] + 2 * budget._pacers["read"].interval - 0.1


def test_urgent_reads_past_a_backlog_stay_within_the_window():
    clock = FakeClock()
    pacer = RequestPacer(500, 3600, clock)
    sent = []
    for i in range(2000):  # a backlog of reads, sent as their slots come, and an urgent one now and then
        if i % 50 == 0:
            pacer.take_now()
            sent.append(clock.now)
        clock.now += pacer.reserve()
        sent.append(clock.now)
    assert most_in_a_window(sent, 3600) <= 500


def test_a_throttled_write_pauses_no_read():
    budget = AccountBudget(ApiRates())
    budget.answered(TransientPlatformError("slow", status=429, retry_after=60.0, sent=False), "write")
    assert budget.delay("read") == 0.0
    assert budget.throttled_answers == 1


def test_a_throttle_pauses_the_reads_for_its_retry_after_but_not_the_writes():
    budget = AccountBudget(ApiRates())  # no rate declared: only the throttles pace it
    assert budget.delay("read") == 0.0
    budget.answered(TransientPlatformError("slow down", status=429, retry_after=5.0, sent=False))
    assert 4.5 < budget.delay("read") <= 5.0
    assert budget.delay("read", urgent=True) == 0.0
    assert budget.delay("write") == 0.0
    assert budget.delay("create") == 0.0
    assert budget.throttled_answers == 1


def test_throttles_without_retry_after_back_off_doubling_and_a_success_resets_it():
    budget = AccountBudget(ApiRates())
    throttle = TransientPlatformError("Rate exceeded", status=400, code="ThrottlingException", sent=False)
    pauses = []
    for _ in range(4):
        budget.answered(throttle)
        pauses.append(round(budget.delay("read")))
    assert pauses == [1, 2, 4, 8]
    budget.answered(None)
    budget._paused_until = 0.0
    budget.answered(throttle)
    assert round(budget.delay("read")) == 1


@pytest.mark.parametrize(
    ("status", "code", "throttle"),
    [
        (429, "RATE_LIMIT_EXCEEDED", True),  # TensorOne
        (400, "ThrottlingException", True),  # SageMaker, CloudWatch Logs
        (400, "Throttling.User", True),  # PAI
        (429, "ModelArts.2799", True),  # ModelArts
        (400, "APIGW.0308", True),  # Huawei's gateway
        (429, "dynamic_request_limited", True),  # Together
        (503, "ServiceUnavailable", False),
        (500, None, False),
    ],
)
def test_each_platforms_throttle_answer_is_a_throttle_and_other_transients_are_not(status, code, throttle):
    assert is_throttle(TransientPlatformError("x", status=status, code=code)) is throttle


def test_a_definite_refusal_is_not_a_throttle():
    assert not is_throttle(TrainingPlatformError("no", status=429, code="RATE_LIMIT_EXCEEDED"))


def test_the_interval_stretches_by_demand_over_the_planned_reads_and_the_note_has_the_numbers():
    budget = AccountBudget(ApiRates(read_per_hour=500), name="connection 't1' (TensorOne)")
    handles = [budget.register(1 / 30) for _ in range(20)]  # twenty jobs polled every 30 s
    rate = budget.read_rate * 3600
    assert rate == pytest.approx(480)
    factor = budget.stretch()
    assert factor == pytest.approx(2400 / (480 * PLANNED_READ_SHARE))
    note = budget.stretch_note(30)
    assert "20 pollers polled every 30 s would make 2,400 reads/h" in note
    assert "this process may make 480 reads/h" in note
    assert f"polled every {30 * factor:,.1f} s instead" in note
    for h in handles[:17]:
        budget.unregister(h)
    assert budget.stretch() == 1.0  # three jobs: 360 reads/h fit


def test_no_declared_rate_never_stretches():
    budget = AccountBudget(ApiRates())
    budget.register(1000.0)
    assert budget.stretch() == 1.0


def tensorone(host: str | None, extra: str | None = None) -> PlatformConnection:
    return PlatformConnection.resolve(
        Connection(conn_id="t", conn_type="tensorone", host=host, password="x", extra=extra)
    )


def test_tensorones_documented_rates_apply_to_its_own_endpoint_only():
    documented = ApiRates(read_per_hour=500, write_per_hour=50, create_per_hour=10)
    assert tensorone(None).api_rates == documented
    assert tensorone("https://api.tensorone.ai").api_rates == documented
    assert tensorone("http://127.0.0.1:8765").api_rates == ApiRates()  # the local platform: none


def test_the_api_budget_extra_overrides_and_is_never_sent_as_a_header():
    conn = tensorone(
        "http://127.0.0.1:8765",
        '{"api_budget": {"read_per_hour": 50000, "window_seconds": 36}, "proxy": "http://p:1"}',
    )
    assert conn.api_rates == ApiRates(read_per_hour=50000, window_seconds=36)
    assert conn.transport_extra == {"proxy": "http://p:1"}
    off = tensorone(None, '{"api_budget": {"read_per_hour": null}}')
    assert off.api_rates.read_per_hour is None and off.api_rates.create_per_hour == 10


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            '{"api_budget": {"read_per_hour": -1}}',
            "api_budget': read_per_hour: Input should be greater than 0",
        ),
        ('{"api_budget": {"reads": 5}}', "api_budget': reads: Extra inputs are not permitted"),
        ('{"api_budget": 500}', "'api_budget' must be a JSON object, got 500"),
    ],
)
def test_a_malformed_api_budget_names_the_connection_and_the_field(extra, expected):
    with pytest.raises(ValueError, match="Connection 't'") as err:
        tensorone(None, extra)
    assert expected in str(err.value)


def test_a_process_takes_its_configured_share_of_the_rates(monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING_PROVIDER__API_BUDGET_SHARE", "0.25")
    budget = account_budget((f"https://{uuid.uuid4().hex}", "fp"), ApiRates(read_per_hour=400), "c")
    assert budget.rates.read_per_hour == 100
    assert budget.read_rate * 3600 == pytest.approx(100 - 2 * 5)  # burst 5 taken out, twice
    monkeypatch.setenv("AIRFLOW__TRAINING_PROVIDER__API_BUDGET_SHARE", "1.5")
    with pytest.raises(ValueError, match=r"api_budget_share must be in \(0, 1\], got 1.5"):
        account_budget((f"https://{uuid.uuid4().hex}", "fp"), ApiRates(read_per_hour=400), "c")
