"""The call path of both drivers: the happy call is one send with no retry machinery built; a
transient failure hands over to the retry policy (Retry-After, attempts, never a second create);
triggers of one endpoint and credential set share one HTTP session (pure logic, no network)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from airflow_training_provider.errors import TransientPlatformError
from airflow_training_provider.hooks import training, training_async
from airflow_training_provider.hooks.training_async import AsyncTrainingPlatformClient, shared_session
from airflow_training_provider.hooks.transport import RetryPolicy
from airflow_training_provider.lifecycle.waiting import poll_phase_delay
from airflow_training_provider.platforms.base import ApiRequest

GET = ApiRequest("GET", "/v2/training/jobs/j")
CREATE = ApiRequest("POST", "/v2/training/jobs", body={}, idempotent=False)
FAST = RetryPolicy(initial_backoff=0.01, max_backoff=0.02, max_attempts=3)


def scripted(*answers):
    """A ``_send`` that gives ``answers`` in turn (an exception is raised), counting its calls."""
    calls = []

    def send(request):
        calls.append(request)
        answer = answers[len(calls) - 1]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return send, calls


def async_client(send) -> AsyncTrainingPlatformClient:
    connection = SimpleNamespace(dialect=None, base_url="http://x", explain_auth_error=lambda e: e)
    client = AsyncTrainingPlatformClient.__new__(AsyncTrainingPlatformClient)
    client.connection, client.retry_policy = connection, FAST

    async def _send(request):
        return send(request)

    client._send = _send
    return client


def sync_hook(send) -> training.TrainingPlatformHook:
    hook = training.TrainingPlatformHook.__new__(training.TrainingPlatformHook)
    hook.retry_policy = FAST
    hook._send = send
    return hook


def no_retrying(*args, **kwargs):
    raise AssertionError("retry machinery built for a call that succeeded")


def test_a_successful_call_is_one_send_and_builds_no_retry_machinery(monkeypatch):
    monkeypatch.setattr(training_async, "AsyncRetrying", no_retrying)
    monkeypatch.setattr(training, "Retrying", no_retrying)
    send, calls = scripted({"ok": 1}, {"ok": 2})
    assert asyncio.run(async_client(send).call(GET)) == {"ok": 1}
    assert sync_hook(send).call(GET) == {"ok": 2} and len(calls) == 2


@pytest.mark.parametrize("driver", ["async", "sync"])
def test_a_transient_failure_is_retried_after_its_retry_after(driver):
    send, calls = scripted(TransientPlatformError("429", retry_after=0.3), {"ok": True})
    started = time.monotonic()
    if driver == "async":
        result = asyncio.run(async_client(send).call(GET))
    else:
        result = sync_hook(send).call(GET)
    assert result == {"ok": True} and len(calls) == 2 and time.monotonic() - started >= 0.3


@pytest.mark.parametrize("driver", ["async", "sync"])
def test_attempts_are_counted_from_the_first_failure_and_a_sent_create_is_never_resent(driver):
    def run(request, *answers):
        send, calls = scripted(*answers)
        with pytest.raises(TransientPlatformError):
            if driver == "async":
                asyncio.run(async_client(send).call(request))
            else:
                sync_hook(send).call(request)
        return len(calls)

    assert run(GET, *[TransientPlatformError("503")] * 3) == FAST.max_attempts
    assert run(CREATE, TransientPlatformError("timeout", sent=True)) == 1


def test_one_session_per_endpoint_and_credentials_closed_after_its_last_user():
    made = []

    class FakeSession:
        closed = False

        async def close(self):
            self.closed = True

    def make():
        made.append(FakeSession())
        return made[-1]

    async def scenario():
        async with shared_session(("a", "key1"), make) as one, shared_session(("a", "key1"), make) as two:
            assert one is two
            async with shared_session(("a", "key2"), make) as other:
                assert other is not one
            assert other.closed and not one.closed
        assert one.closed
        async with shared_session(("a", "key1"), make) as again:
            assert again is not one  # a new one after the last user left

    asyncio.run(scenario())
    assert len(made) == 3


def test_first_polls_are_spread_over_the_interval_at_a_phase_each_job_keeps():
    interval, now = 30.0, 1_800_000_000.0
    slots = [(now + poll_phase_delay(f"job_{i}", interval, now)) % interval for i in range(1000)]
    assert all(0 <= poll_phase_delay(f"job_{i}", interval, now) < interval for i in range(1000))
    # spread: every tenth of the interval holds roughly a tenth of the jobs
    buckets = [sum(1 for s in slots if k * 3 <= s < (k + 1) * 3) for k in range(10)]
    assert min(buckets) > 60, buckets
    # a restarted triggerer (any later time) polls each job at the same point of the interval
    later = now + 12_345.678
    assert (later + poll_phase_delay("job_7", interval, later)) % interval == pytest.approx(slots[7])
