"""The job lifecycle as sans-IO operations, driven with canned platform answers and a fake clock:
the wait and every outcome it ends in (= every trigger event kind), the deadline, the outage
budget, events, and cancel with its 409 / already-ended / stopping readings. No socket, no Airflow."""

from __future__ import annotations

import pytest

from airflow_training_provider.cancellation import CancelPolicy, GiveUp
from airflow_training_provider.errors import (
    JobNotFoundError,
    JobStateConflictError,
    TrainingPlatformError,
    TransientPlatformError,
)
from airflow_training_provider.lifecycle.operations import JobOperations, NewEvents, Progress
from airflow_training_provider.lifecycle.waiting import (
    DeadlineReached,
    JobFinished,
    LostContact,
    PollFailed,
    Polling,
    parse_outcome,
    wait_for_job,
)
from airflow_training_provider.models import CancelRequest, JobState
from airflow_training_provider.platforms.tensorone import TensorOneDialect
from airflow_training_provider.platforms.together import TogetherDialect
from tests.unit.canned import Canned, FakeClock

JOB = "/v2/training/jobs/j1"
CANCEL = "/v2/training/jobs/j1/cancel"
POLLING = Polling(poll_interval=10, outage_budget=60, confirm_interval=1)


def t1(status: str, **extra) -> dict:
    """A TensorOne job object."""
    return {"jobId": "j1", "status": status, **extra}


FINAL_CKPT = {"checkpointId": "ckpt_final", "epoch": 2, "type": "final", "path": "/c/final"}
CANCELLED = t1("cancelled", checkpoints=[FINAL_CKPT], metrics={"loss": 0.3}, costs={"currentCost": 1.5})
CANCEL_ANSWER = {
    "jobId": "j1",
    "status": "cancelling",
    "cancellationDetails": {"finalCheckpointCreated": False},
}


def tensorone(script, clock=None) -> tuple[Canned, JobOperations]:
    canned = Canned(script, clock)
    return canned, JobOperations(TensorOneDialect(), "http://p", canned.clock)


DEFAULT_POLICY = CancelPolicy()


def wait(ops, canned, policy=DEFAULT_POLICY, deadline=None, cursor=None):
    return canned.drive(wait_for_job(ops, "j1", POLLING, policy, deadline, cursor))


# -- waiting: every outcome ------------------------------------------------------------------------
def test_wait_polls_until_terminal_and_reports_each_poll():
    canned, ops = tensorone(
        {("GET", JOB): [t1("queued"), t1("running"), t1("completed", metrics={"loss": 0.1})]}
    )
    outcome = wait(ops, canned)
    assert isinstance(outcome, JobFinished) and outcome.job.state is JobState.SUCCEEDED
    assert outcome.job.console_url == "http://p/v2/training/jobs/j1"
    assert canned.sleeps == [10, 10]
    assert [r.job.raw_status for r in canned.reports if isinstance(r, Progress)] == [
        "queued",
        "running",
        "completed",
    ]
    assert all(r.budget == 60 for r in canned.requests), "every poll rides out outages for the budget"


def test_a_job_that_ends_just_before_the_deadline_is_not_a_timeout():
    clock = FakeClock(0.0)
    canned, ops = tensorone({("GET", JOB): [t1("running"), t1("completed")]}, clock)
    outcome = wait(ops, canned, deadline=5.0)
    assert isinstance(outcome, JobFinished) and outcome.job.state is JobState.SUCCEEDED
    assert canned.sleeps == [5.0], "the last sleep is cut to the deadline"
    assert canned.calls("POST", CANCEL) == []


def test_deadline_with_a_running_job_cancels_it_there_and_says_so():
    clock = FakeClock(0.0)
    canned, ops = tensorone(
        {("GET", JOB): [t1("running"), t1("running"), t1("running")], ("POST", CANCEL): [CANCEL_ANSWER]},
        clock,
    )
    outcome = wait(ops, canned, deadline=15.0)
    assert isinstance(outcome, DeadlineReached)
    assert outcome.cancel is not None and outcome.cancel.state is JobState.STOPPING
    (cancel,) = canned.calls("POST", CANCEL)
    assert cancel.body["reason"] == GiveUp.EXECUTION_TIMEOUT.value
    assert cancel.body["preserveCheckpoints"] is True and cancel.body["createFinalCheckpoint"] is True


def test_deadline_without_cancel_on_kill_never_cancels():
    canned, ops = tensorone({("GET", JOB): [t1("running")]}, FakeClock(0.0))
    outcome = wait(ops, canned, policy=CancelPolicy(cancel_on_kill=False), deadline=1.0)
    assert isinstance(outcome, DeadlineReached) and outcome.cancel is None and outcome.cancel_error is None
    assert "cancel_on_kill is off" in outcome.message
    assert canned.calls("POST", CANCEL) == []


def test_a_failed_deadline_cancel_is_reported_for_the_worker_to_retry():
    canned, ops = tensorone(
        {("GET", JOB): [t1("running")], ("POST", CANCEL): [TransientPlatformError("503", status=503)]},
        FakeClock(0.0),
    )
    outcome = wait(ops, canned, deadline=1.0)
    assert isinstance(outcome, DeadlineReached) and outcome.cancel is None and "503" in outcome.cancel_error


def test_outage_beyond_the_budget_is_lost_contact_and_no_cancel():
    canned, ops = tensorone({("GET", JOB): [t1("running"), TransientPlatformError("down", status=503)]})
    outcome = wait(ops, canned)
    assert isinstance(outcome, LostContact) and "NOT cancelled" in outcome.message
    assert canned.calls("POST", CANCEL) == []


def test_a_refused_poll_ends_the_wait():
    canned, ops = tensorone({("GET", JOB): [JobNotFoundError("gone", status=404)]})
    outcome = wait(ops, canned)
    assert isinstance(outcome, PollFailed) and "gone" in outcome.message


def test_unknown_status_keeps_polling():
    canned, ops = tensorone({("GET", JOB): [t1("warming_up"), t1("COMPLETED")]})
    outcome = wait(ops, canned)
    assert isinstance(outcome, JobFinished) and outcome.job.state is JobState.SUCCEEDED
    assert canned.sleeps == [10]


@pytest.mark.parametrize(
    "outcome",
    [
        JobFinished(job_id="j1", job=TensorOneDialect().parse_job(t1("completed")), event_cursor=3),
        DeadlineReached(job_id="j1", message="m", job=TensorOneDialect().parse_job(t1("running"))),
        LostContact(job_id="j1", message="m"),
        PollFailed(job_id="j1", message="m"),
    ],
)
def test_every_outcome_round_trips_as_a_json_trigger_event(outcome):
    import json

    payload = json.loads(json.dumps(outcome.model_dump(mode="json")))
    assert parse_outcome(payload) == outcome


# -- events -----------------------------------------------------------------------------------------
TOGETHER_JOB = "/v1/fine-tunes/ft-1"


def together_job(status: str) -> dict:
    return {"id": "ft-1", "status": status}


def event(kind: str, message: str = "", level: str = "info") -> dict:
    return {"type": kind, "message": message, "level": level}


def test_events_are_reported_once_in_order_from_the_cursor():
    canned = Canned(
        {
            ("GET", TOGETHER_JOB): [
                together_job("running"),
                together_job("running"),
                together_job("completed"),
            ],
            ("GET", TOGETHER_JOB + "/events"): [
                {"data": [event("job_pending"), event("job_start")]},
                {"data": [event("job_pending"), event("job_start")]},
                {"data": [event("job_pending"), event("job_start"), event("job_complete")]},
            ],
            ("GET", TOGETHER_JOB + "/checkpoints"): [{"data": [{"step": 10, "checkpoint_type": "Final"}]}],
            ("GET", TOGETHER_JOB + "/metrics"): [{"metrics": []}],
        }
    )
    ops = JobOperations(TogetherDialect(), "http://p", canned.clock)
    outcome = canned.drive(wait_for_job(ops, "ft-1", POLLING, CancelPolicy(), None, 1))
    batches = [[e.type for e in r.events] for r in canned.reports if isinstance(r, NewEvents)]
    assert batches == [["job_start"], ["job_complete"]], "job_pending was written before (cursor 1)"
    assert outcome.event_cursor == 3
    assert [c.kind for c in outcome.job.checkpoints] == ["final"], "final view asks the checkpoints endpoint"


def test_a_platform_cancel_is_explained_by_its_event():
    canned = Canned(
        {
            ("GET", TOGETHER_JOB): [together_job("cancelled")],
            ("GET", TOGETHER_JOB + "/events"): [
                {
                    "data": [
                        event("wandb_init", "W&B login failed", "error"),
                        event("cancel_requested", "auto"),
                    ]
                }
            ],
            ("GET", TOGETHER_JOB + "/checkpoints"): [{"data": []}],
            ("GET", TOGETHER_JOB + "/metrics"): [{"metrics": []}],
        }
    )
    ops = JobOperations(TogetherDialect(), "http://p", canned.clock)
    outcome = canned.drive(wait_for_job(ops, "ft-1", POLLING, CancelPolicy(), None, 0))
    assert "W&B login failed" in outcome.job.message


def test_the_final_view_reads_the_metric_history_and_fills_the_latest_metrics():
    rows = [
        {"train/loss": 2.0, "train/learning_rate": 0.01, "train/global_step": 1, "train/epoch": 1},
        {"train/loss": 1.5, "train/learning_rate": 0.01, "train/global_step": 12, "train/epoch": 1},
        {"eval/loss": 1.7, "eval/accuracy": 0.6, "train/global_step": 12, "train/epoch": 1},
        {"train/loss": 1.1, "train/global_step": 24, "train/epoch": 2, "note": "not a number"},
    ]
    canned = Canned(
        {
            ("GET", TOGETHER_JOB): [together_job("completed")],
            ("GET", TOGETHER_JOB + "/events"): [{"data": []}],
            ("GET", TOGETHER_JOB + "/checkpoints"): [{"data": []}],
            ("GET", TOGETHER_JOB + "/metrics"): [{"metrics": rows}],
        }
    )
    ops = JobOperations(TogetherDialect(), "http://p", canned.clock)
    job = canned.drive(wait_for_job(ops, "ft-1", POLLING, CancelPolicy(), None, 0)).job
    assert [(p.step, p.kind) for p in job.metric_history] == [
        (1, "train"),
        (12, "train"),
        (12, "eval"),
        (24, "train"),
    ]
    assert job.metric_history[2].values == {"validation_loss": 1.7, "validation_accuracy": 0.6}
    assert job.metrics == {
        "loss": 1.1,
        "learning_rate": 0.01,
        "validation_loss": 1.7,
        "validation_accuracy": 0.6,
    }
    [metrics_call] = canned.calls("GET", TOGETHER_JOB + "/metrics")
    assert metrics_call.params == {"resolution": 100}


def test_a_metric_history_that_cannot_be_read_does_not_fail_a_finished_job():
    canned = Canned(
        {
            ("GET", TOGETHER_JOB): [together_job("completed")],
            ("GET", TOGETHER_JOB + "/events"): [{"data": []}],
            ("GET", TOGETHER_JOB + "/checkpoints"): [{"data": []}],
            ("GET", TOGETHER_JOB + "/metrics"): [TrainingPlatformError("no such route", status=404)],
        }
    )
    ops = JobOperations(TogetherDialect(), "http://p", canned.clock)
    outcome = canned.drive(wait_for_job(ops, "ft-1", POLLING, CancelPolicy(), None, 0))
    assert isinstance(outcome, JobFinished) and outcome.job.state is JobState.SUCCEEDED
    assert outcome.job.metric_history == []


# -- cancel -------------------------------------------------------------------------------------------
def test_cancel_and_confirm_reports_the_final_checkpoint_metrics_and_cost():
    canned, ops = tensorone(
        {("GET", JOB): [t1("running"), t1("cancelling"), CANCELLED], ("POST", CANCEL): [CANCEL_ANSWER]}
    )
    result, job = canned.drive(
        ops.cancel_and_confirm("j1", CancelRequest(reason="r"), timeout=30, interval=1)
    )
    assert job.state is JobState.CANCELLED and result.state is JobState.CANCELLED
    assert (result.final_checkpoint_id, result.final_checkpoint_path) == ("ckpt_final", "/c/final")
    assert result.final_metrics == {"loss": 0.3} and result.cost.total_usd == 1.5
    assert canned.sleeps == [1]


@pytest.mark.parametrize(("status", "terminal"), [("completed", True), ("cancelling", False)])
def test_no_cancel_is_sent_to_a_job_that_ended_or_is_already_stopping(status, terminal):
    canned, ops = tensorone({("GET", JOB): [t1(status)]})
    result = canned.drive(ops.cancel_job("j1", CancelRequest()))
    assert canned.calls("POST", CANCEL) == [] and result.already_terminal is terminal


def test_a_409_for_a_job_that_ended_meanwhile_is_not_an_error():
    canned, ops = tensorone(
        {
            ("GET", JOB): [t1("running"), t1("completed")],
            ("POST", CANCEL): [JobStateConflictError("done", status=409)],
        }
    )
    assert canned.drive(ops.cancel_job("j1", CancelRequest())).already_terminal


def test_a_409_for_a_running_job_is_raised():
    canned, ops = tensorone(
        {("GET", JOB): [t1("running")], ("POST", CANCEL): [JobStateConflictError("locked", status=409)]}
    )
    with pytest.raises(JobStateConflictError):
        canned.drive(ops.cancel_job("j1", CancelRequest()))


def test_force_skips_the_check_and_cancel_flags_follow_the_capabilities():
    canned = Canned({("POST", "/v1/fine-tunes/ft-1/cancel"): [together_job("cancel_requested")]})
    ops = JobOperations(TogetherDialect(), "http://p", canned.clock)
    canned.drive(ops.cancel_job("ft-1", CancelRequest(force=True)))
    assert [r.path for r in canned.requests] == ["/v1/fine-tunes/ft-1/cancel"]


def test_wait_until_stops_at_its_timeout():
    canned, ops = tensorone({("GET", JOB): [t1("running")]}, FakeClock(0.0))
    job = canned.drive(ops.wait_until("j1", lambda j: j.is_terminal, timeout=3.0, interval=1.0))
    assert job.state is JobState.RUNNING and canned.sleeps == [1.0, 1.0, 1.0]


# -- the account budget's part: a cancel is never held back by its reads ----------------------------
def test_a_throttled_state_check_does_not_hold_the_cancel_back():
    throttled = TransientPlatformError("Too many requests", status=429, retry_after=3000.0, sent=False)
    canned, ops = tensorone({("GET", JOB): [throttled], ("POST", CANCEL): [CANCEL_ANSWER]})
    result = canned.drive(ops.cancel_job("j1", CancelRequest(reason="x")))
    assert result.state is JobState.STOPPING
    (check,) = canned.calls("GET", JOB)
    assert check.urgent and check.budget == 0.0, "one urgent attempt, never a wait for Retry-After"
    (cancel,) = canned.calls("POST", CANCEL)
    assert cancel.kind == "write"


def test_the_cancels_confirm_polls_are_urgent_and_never_stretched():
    canned, ops = tensorone(
        {("GET", JOB): [t1("running"), t1("cancelling"), CANCELLED], ("POST", CANCEL): [CANCEL_ANSWER]}
    )
    canned.drive(ops.cancel_and_confirm("j1", CancelRequest(reason="x"), 60, 1))
    assert all(r.urgent for r in canned.calls("GET", JOB))
    assert canned.sleeps == [1]


def test_coalesced_polls_mark_their_status_reads_and_read_events_on_a_change_only():
    from airflow_training_provider.lifecycle.operations import is_terminal

    events_path = "/v1/fine-tunes/ft-1/events"
    running = {"id": "ft-1", "status": "running"}
    canned = Canned(
        {
            ("GET", "/v1/fine-tunes/ft-1"): [
                running,
                running,
                running,
                {"id": "ft-1", "status": "completed"},
            ],
            ("GET", events_path): [{"data": []}],
            ("GET", "/v1/fine-tunes/ft-1/checkpoints"): [{"data": []}],
            ("GET", "/v1/fine-tunes/ft-1/metrics"): [{"data": []}],
        }
    )
    ops = JobOperations(TogetherDialect(), "http://p", canned.clock)
    canned.drive(ops.poll("ft-1", is_terminal, 10, cursor=0, coalesce=True, events_every=1800))
    assert all(r.status_of == "ft-1" for r in canned.calls("GET", "/v1/fine-tunes/ft-1"))
    # the first poll, then unchanged twice (no read), then the end
    assert len(canned.calls("GET", events_path)) == 2
    assert canned.sleeps == [10, 10, 10]
