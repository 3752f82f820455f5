"""Training guards: the pure decisions (early stopping, budget, run time), and the wait stopping a
job when one fires, driven with canned TensorOne answers and a fake clock. No socket, no Airflow."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_training_provider.cancellation import CancelPolicy
from airflow_training_provider.lifecycle.guards import (
    EarlyStopping,
    Guards,
    GuardWatch,
    early_stop,
    for_platform,
    over_budget,
    unsupported,
)
from airflow_training_provider.lifecycle.operations import JobOperations
from airflow_training_provider.lifecycle.waiting import (
    GuardStopped,
    JobFinished,
    Polling,
    parse_outcome,
    wait_for_job,
)
from airflow_training_provider.models import Cost, JobState, MetricPoint, Progress, TrainingJob
from airflow_training_provider.platforms.base import Capabilities
from airflow_training_provider.platforms.tensorone import TensorOneDialect
from tests.unit.canned import Canned, FakeClock

JOB = "/v2/training/jobs/j1"
CANCEL = "/v2/training/jobs/j1/cancel"
POLLING = Polling(poll_interval=10, outage_budget=60, confirm_interval=1)


def history(*values: float, metric: str = "validation_loss") -> list[MetricPoint]:
    return [
        MetricPoint(step=i * 10, kind="epoch", epoch=i, values={metric: v}) for i, v in enumerate(values, 1)
    ]


@pytest.mark.parametrize(
    ("values", "rule", "stops_at"),
    [
        ((1.0, 0.8, 0.7, 0.6), EarlyStopping(metric="validation_loss", patience=2), None),  # still improving
        ((1.0, 0.8, 0.81, 0.80), EarlyStopping(metric="validation_loss", patience=2), 4),  # 2 epochs without
        ((1.0, 0.8, 0.79, 0.78), EarlyStopping(metric="validation_loss", patience=2, min_delta=0.05), 4),
        ((0.5, 0.6, 0.7), EarlyStopping(metric="validation_loss", mode="max", patience=1), None),
        ((0.5, 0.6, 0.6), EarlyStopping(metric="validation_loss", mode="max", patience=1, min_delta=0.01), 3),
        ((), EarlyStopping(metric="validation_loss", patience=1), None),
    ],
)
def test_early_stopping_counts_epochs_without_an_improvement(values, rule, stops_at):
    stop = early_stop(rule, history(*values))
    assert (stop.epoch if stop else None) == stops_at
    if stop:
        assert stop.succeed and stop.guard == "early_stopping" and stop.metric == "validation_loss"
        assert stop.best_epoch == 2 and stop.best_value == values[1]
        assert "has not improved for 2 epochs" in stop.reason or "for 1 epochs" in stop.reason


def test_early_stopping_reads_the_last_value_of_each_epoch_and_skips_points_without_it():
    points = [
        MetricPoint(step=1, kind="train", epoch=1.0, values={"loss": 2.0}),
        MetricPoint(step=2, kind="eval", epoch=1.0, values={"validation_loss": 1.0}),
        MetricPoint(step=3, kind="eval", epoch=2.0, values={"validation_loss": 1.2}),
        MetricPoint(step=4, kind="eval", epoch=None, values={"validation_loss": 0.1}),  # no epoch: skipped
    ]
    stop = early_stop(EarlyStopping(metric="validation_loss", patience=1), points)
    assert stop is not None and (stop.best_epoch, stop.epoch, stop.metric_value) == (1.0, 2.0, 1.2)


def test_the_budget_stops_before_the_next_poll_and_the_stop_would_exceed_it():
    assert not over_budget(1.0, 0.5, None, 30)  # no rate yet: only a cost over the cap stops
    assert over_budget(1.0, 1.0, None, 30)
    assert not over_budget(1.0, 0.3, 0.01, 30)  # 0.3 + 0.3 (to the next poll) + 0.3 (the stop) = 0.9
    assert over_budget(1.0, 0.5, 0.01, 30)  # 0.5 + 0.3 + 0.3 = 1.1 > 1.0


def job(epoch=1, cost=0.1, state=JobState.RUNNING) -> TrainingJob:
    return TrainingJob(id="j", platform="t", state=state, raw_status=state.value,
                       progress=Progress(epoch=epoch), cost=Cost(total_usd=cost))  # fmt: skip


def test_the_watch_measures_the_spending_rate_between_polls_and_the_run_time_from_the_start():
    clock = FakeClock(1000.0)
    watch = GuardWatch(Guards(max_cost_usd=1.0, on_budget="succeed"), clock)
    assert watch.check(job(cost=0.40), 30, None) is None  # no rate yet
    clock.now += 30
    assert watch.check(job(cost=0.55), 30, None) is None  # 0.55 + 2 x 0.15 = 0.85
    clock.now += 30
    stop = watch.check(job(cost=0.85), 30, None)  # 0.85 + 2 x 0.30 > 1.0
    assert stop is not None and stop.guard == "max_cost_usd" and stop.succeed and stop.cost_usd == 0.85
    assert "$0.8500" in stop.reason and "$36.0000/h" in stop.reason

    timed = GuardWatch(Guards(max_runtime=timedelta(minutes=5)), clock)
    assert timed.needs_start(job()) and not timed.needs_start(job(state=JobState.QUEUED))
    timed.note_start(job().model_copy(update={"started_at": None}))  # no timestamp: from now
    assert timed.check(job(), 30, None) is None
    clock.now += 300
    stop = timed.check(job(), 30, None)
    assert stop.guard == "max_runtime" and not stop.succeed and stop.runtime_seconds == 300


def test_without_a_platform_cost_the_budget_counts_training_time_at_the_hourly_price():
    clock = FakeClock(1000.0)
    watch = GuardWatch(Guards(max_cost_usd=0.5, hourly_cost_usd=36.0), clock)  # $0.01 a second
    unpriced = job(cost=None).model_copy(update={"started_at": None})
    assert not watch.needs_start(job(cost=None, state=JobState.QUEUED))
    assert watch.needs_start(unpriced)
    watch.note_start(unpriced)  # no platform timestamp: from now
    assert watch.check(unpriced, 10, None) is None  # $0 now, $0.10 by the next poll, $0.20 stopped
    clock.now += 25
    assert watch.check(unpriced, 10, None) is None  # $0.25 + $0.10 + $0.10 = $0.45
    clock.now += 6
    stop = watch.check(unpriced, 10, None)  # $0.31 + $0.20 > $0.50: stop now to stay within it
    assert stop.guard == "max_cost_usd" and stop.cost_usd == pytest.approx(0.31)
    assert "31 s of training at hourly_cost_usd" in stop.reason and "$36.0000/h" in stop.reason


def test_a_priced_budget_fires_on_a_cost_reported_before_the_job_started_without_crashing():
    # a platform without cost_usd whose answer still carries a cost (the local platform's
    # x_local_cost_usd) before the job is running: no start time to count training seconds from
    watch = GuardWatch(Guards(max_cost_usd=0.001, hourly_cost_usd=36.0), FakeClock(1000.0))
    stop = watch.check(job(cost=0.0, state=JobState.QUEUED), 10, None)
    assert stop is not None and stop.guard == "max_cost_usd" and "s of training" not in stop.reason


def test_guards_are_checked_when_the_dag_is_parsed_and_against_the_platform_before_submit():
    with pytest.raises(ValueError, match="patience"):
        Guards(early_stopping={"metric": "validation_loss", "patience": 0})
    with pytest.raises(ValueError, match="on_budget"):
        Guards(max_cost_usd=1, on_budget="maybe")
    with pytest.raises(ValueError, match="max_runtime"):
        Guards(max_runtime=0)
    guards = Guards(early_stopping={"metric": "validation_loss"}, max_cost_usd=5)
    assert unsupported(guards, Capabilities(metric_history=True, cost_usd=True), "P") is None
    assert unsupported(guards, Capabilities(cost_usd=True), "P")[0] == "early_stopping"
    assert unsupported(guards, Capabilities(metric_history=True), "P") == (
        "max_cost_usd",
        "P reports no cost in USD while a job runs; give hourly_cost_usd (what the job's instances cost "
        "per hour) to count its training time, or use max_runtime",
    )
    priced = guards.model_copy(update={"hourly_cost_usd": 3.0})
    assert unsupported(priced, Capabilities(metric_history=True), "P") is None
    # where the platform reports its own cost, that is what the budget counts
    assert for_platform(priced, Capabilities(cost_usd=True)).hourly_cost_usd is None
    assert for_platform(priced, Capabilities()).hourly_cost_usd == 3.0
    assert unsupported(Guards(max_runtime=60), Capabilities(), "P") is None
    assert Guards.model_validate(guards.model_dump(mode="json")) == guards  # trigger kwargs round trip


def t1(status: str, epoch: int | None = None, checkpoints=(), cost=None) -> dict:
    body: dict = {"jobId": "j1", "status": status, "checkpoints": list(checkpoints)}
    if epoch is not None:
        body["progress"] = {"currentEpoch": epoch, "totalEpochs": 20}
    if cost is not None:
        body["costs"] = {"currentCost": cost}
    return body


def ckpt(epoch: int, loss: float, kind: str = "automatic") -> dict:
    return {"checkpointId": f"ckpt_epoch_{epoch}" if kind != "final" else "ckpt_final", "epoch": epoch,
            "type": kind, "path": f"/c/{epoch}{kind}", "metrics": {"validationLoss": loss}}  # fmt: skip


def test_the_wait_stops_a_job_that_plateaus_keeps_its_best_checkpoint_and_succeeds():
    saved = [ckpt(1, 1.0), ckpt(2, 0.5), ckpt(3, 0.52), ckpt(4, 0.55)]
    gets = [  # the polls, each new epoch's history read (the full job, with its checkpoints), the cancel's
        t1("running", 1, saved[:1]),  # check and the confirming poll
        t1("running", 1, saved[:1]),
        t1("running", 2, saved[:2]),
        t1("running", 2, saved[:2]),
        t1("running", 2, saved[:2]),  # no new epoch: no history read
        t1("running", 4, saved),
        t1("running", 4, saved),
        t1("running", 4, saved),  # the cancel checks the job is still running
        t1("cancelled", 4, [*saved, ckpt(4, 0.55, "final")]),
    ]
    canned = Canned(
        {("GET", JOB): gets, ("POST", CANCEL): [{"jobId": "j1", "status": "cancelling"}]}, FakeClock(0.0)
    )
    ops = JobOperations(TensorOneDialect(), "http://p", canned.clock)
    guards = Guards(early_stopping={"metric": "validation_loss", "patience": 2})
    outcome = canned.drive(wait_for_job(ops, "j1", POLLING, CancelPolicy(), guards=guards))
    assert isinstance(outcome, GuardStopped), outcome
    stop = outcome.stop
    assert (stop.guard, stop.succeed, stop.epoch, stop.best_epoch, stop.best_value) == (
        "early_stopping",
        True,
        4,
        2,
        0.5,
    )
    assert stop.best_checkpoint.id == "ckpt_epoch_2" and stop.best_checkpoint.path == "/c/2automatic"
    assert outcome.job.state is JobState.CANCELLED and outcome.cancel.final_checkpoint_id == "ckpt_final"
    (cancel,) = canned.calls("POST", CANCEL)
    assert cancel.body["reason"].startswith("Airflow guard: early stopping: validation_loss has not improved")
    assert cancel.body["createFinalCheckpoint"] is True and cancel.body["preserveCheckpoints"] is True
    assert len(canned.calls("GET", JOB)) == len(gets)  # one history read per new epoch, not per poll
    assert parse_outcome(outcome.model_dump(mode="json")) == outcome  # a trigger event round trip


def test_without_a_guard_firing_the_wait_ends_as_usual():
    canned = Canned(
        {("GET", JOB): [t1("running", 1, cost=0.1), t1("completed", 2, cost=0.2)]}, FakeClock(0.0)
    )
    ops = JobOperations(TensorOneDialect(), "http://p", canned.clock)
    outcome = canned.drive(wait_for_job(ops, "j1", POLLING, CancelPolicy(), guards=Guards(max_cost_usd=5)))
    assert isinstance(outcome, JobFinished) and outcome.job.state is JobState.SUCCEEDED


def test_a_budget_stop_fails_by_default_and_the_cancel_runs_even_with_cancel_on_kill_off():
    canned = Canned(
        {
            ("GET", JOB): [
                t1("running", 1, cost=0.5),
                t1("running", 1, cost=0.9),
                t1("cancelled", 1, cost=0.95),
            ],
            ("POST", CANCEL): [{"jobId": "j1", "status": "cancelling"}],
        },
        FakeClock(0.0),
    )
    ops = JobOperations(TensorOneDialect(), "http://p", canned.clock)
    policy = CancelPolicy(cancel_on_kill=False)
    outcome = canned.drive(wait_for_job(ops, "j1", POLLING, policy, guards=Guards(max_cost_usd=1.0)))
    assert isinstance(outcome, GuardStopped) and outcome.stop.guard == "max_cost_usd"
    assert not outcome.stop.succeed and outcome.stop.cost_usd == 0.9 and outcome.job.cost.total_usd == 0.95
