"""Only the status read decides a wait. Every other read (events, checkpoints, the metric history,
the guards' start time) that is refused (403, 404 on its endpoint) or answered with a malformed
body is left out with one warning per job and kind, and the wait ends with the job's real outcome.
Driven with canned answers and a fake clock (``tests/unit/canned.py``); no socket."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from airflow_training_provider.cancellation import CancelPolicy
from airflow_training_provider.errors import (
    JobNotFoundError,
    PlatformAuthError,
    TransientPlatformError,
)
from airflow_training_provider.hooks.transport import decode_response
from airflow_training_provider.identity import earlier_jobs_since
from airflow_training_provider.lifecycle.guards import EarlyStopping, Guards
from airflow_training_provider.lifecycle.operations import JobOperations, NewEvents, _raw
from airflow_training_provider.lifecycle.waiting import JobFinished, PollFailed, Polling, wait_for_job
from airflow_training_provider.models import JobState
from airflow_training_provider.platforms.base import ApiRequest
from airflow_training_provider.platforms.pai import PaiDialect
from airflow_training_provider.platforms.tensorone import TensorOneDialect
from airflow_training_provider.platforms.together import TogetherDialect
from tests.unit.canned import Canned

POLLING = Polling(poll_interval=10, outage_budget=60, confirm_interval=1)
LOGGER = "airflow_training_provider.lifecycle.operations"
FT = "/v1/fine-tunes/ft-1"
T1 = "/v2/training/jobs/j1"


def refused() -> PlatformAuthError:
    """A 403 as the hook raises it: the platform's message, and the connection hint the hook adds."""
    exc = PlatformAuthError("Forbidden by policy", status=403, code="Forbidden.RAM")
    exc.hint = "the platform refused the credentials of connection 'c' (Together AI); check its password"
    return exc


FAILURES = {
    "403": lambda malformed: refused(),
    "404": lambda malformed: JobNotFoundError("no such route", status=404),
    "malformed": lambda malformed: malformed,
}


def together(status: str, **extra) -> dict:
    return {"id": "ft-1", "status": status, **extra}


def t1(status: str, **extra) -> dict:
    return {"jobId": "j1", "status": status, **extra}


# kind → (dialect, job id, canned script with the kind's read failing, the guards of the wait,
#         the path of the failing read, how many times the wait reads it)
def scenario(kind: str, failure: str):
    fail = FAILURES[failure]
    if kind == "events":
        script = {
            ("GET", FT): [together("running"), together("running"), together("completed")],
            ("GET", FT + "/events"): [fail({"data": "not a list"})],
            ("GET", FT + "/checkpoints"): [{"data": [{"step": 12, "checkpoint_type": "Final"}]}],
            ("GET", FT + "/metrics"): [{"metrics": []}],
        }
        return TogetherDialect(), "ft-1", script, None, FT + "/events", 3
    if kind == "checkpoints":
        script = {
            ("GET", FT): [together("running"), together("completed")],
            ("GET", FT + "/events"): [{"data": []}],
            ("GET", FT + "/checkpoints"): [fail({"data": [{"step": "ten"}]})],
            ("GET", FT + "/metrics"): [{"metrics": []}],
        }
        return TogetherDialect(), "ft-1", script, None, FT + "/checkpoints", 1
    if kind == "metric history":  # read by early stopping at each new epoch, and by the final view
        running = [together("running", n_epochs=4, epochs_completed=e) for e in (1, 2, 3)]
        script = {
            ("GET", FT): [*running, together("completed", n_epochs=4, epochs_completed=4)],
            ("GET", FT + "/events"): [{"data": []}],
            ("GET", FT + "/checkpoints"): [{"data": []}],
            ("GET", FT + "/metrics"): [fail({"metrics": "nope"})],
        }
        guards = Guards(early_stopping=EarlyStopping(metric="validation_loss", patience=1))
        return TogetherDialect(), "ft-1", script, guards, FT + "/metrics", 4
    if kind == "start time":  # max_runtime reads the full job once to learn when it started
        # the poll reads what it needs of the job; the full read (checkpoints too) is what fails
        script = {("GET", T1): [t1("running"), fail(t1("running", checkpoints="nope")), t1("completed")]}
        return TensorOneDialect(), "j1", script, Guards(max_runtime=3600), T1, 1
    raise AssertionError(kind)


SUBJECTS = {
    "events": "Events of job ft-1 are not readable",
    "checkpoints": "Checkpoints of job ft-1 are not readable",
    "metric history": "The metric history of job ft-1 is not readable",
    "start time": "The start time of job j1 is not readable",
}


@pytest.mark.parametrize("failure", list(FAILURES))
@pytest.mark.parametrize("kind", list(SUBJECTS))
def test_an_unreadable_auxiliary_read_is_warned_once_and_the_wait_ends_with_the_jobs_outcome(
    kind, failure, caplog
):
    dialect, job_id, script, guards, path, reads = scenario(kind, failure)
    canned = Canned(script)
    ops = JobOperations(dialect, "http://p", canned.clock)
    cursor = 0 if dialect.capabilities.events else None
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        outcome = canned.drive(
            wait_for_job(ops, job_id, POLLING, CancelPolicy(), None, cursor, guards=guards)
        )
    assert isinstance(outcome, JobFinished), outcome
    assert outcome.job.state is JobState.SUCCEEDED and outcome.job.id == job_id
    failed = [r for r in canned.requests if r.path == path and r.reader is _raw]  # as an auxiliary read
    assert len(failed) == reads, "asked again at each chance"
    warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    (warning,) = warnings
    assert warning.startswith(SUBJECTS[kind]) and warning.endswith("status polling goes on")
    assert "credentials" not in warning, "the status reads work: the credentials are fine"
    reason = {
        "403": "(403 Forbidden Forbidden.RAM on GET ",
        "404": "(404 Not Found on GET ",
        "malformed": "(malformed answer to GET ",
    }[failure]
    assert reason in warning


def test_the_warning_names_the_endpoint_and_what_the_task_loses(caplog):
    dialect, job_id, script, *_ = scenario("events", "403")
    canned = Canned(script)
    ops = JobOperations(dialect, "http://p", canned.clock)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        canned.drive(wait_for_job(ops, job_id, POLLING, CancelPolicy(), None, 0))
    (record,) = [r for r in caplog.records if r.name == LOGGER]
    assert record.getMessage() == (
        "Events of job ft-1 are not readable (403 Forbidden Forbidden.RAM on GET /v1/fine-tunes/ft-1/events: "
        "Forbidden by policy): the task log will not show platform events nor a failure's reason from "
        "them; status polling goes on"
    )
    assert not [r for r in canned.reports if isinstance(r, NewEvents)]


def test_a_failed_job_with_unreadable_events_still_fails_with_its_own_reason():
    canned = Canned(
        {
            ("GET", FT): [together("running"), together("error", message="CUDA out of memory")],
            ("GET", FT + "/events"): [refused()],
            ("GET", FT + "/checkpoints"): [{"data": []}],
            ("GET", FT + "/metrics"): [{"metrics": []}],
        }
    )
    ops = JobOperations(TogetherDialect(), "http://p", canned.clock)
    outcome = canned.drive(wait_for_job(ops, "ft-1", POLLING, CancelPolicy(), None, 0))
    assert isinstance(outcome, JobFinished) and outcome.job.state is JobState.FAILED
    assert outcome.job.message == "CUDA out of memory"
    assert len(canned.calls("GET", FT + "/events")) == 2, "each poll asked; the final view did not ask again"


def test_events_that_become_unreadable_mid_job_keep_the_cursor_and_resume_after_it(caplog):
    e = [
        {"type": t, "message": "", "level": "info"}
        for t in ("job_pending", "job_start", "epoch", "job_complete")
    ]
    canned = Canned(
        {
            ("GET", FT): [together("running")] * 4 + [together("completed")],
            ("GET", FT + "/events"): [
                {"data": e[:2]},
                refused(),
                JobNotFoundError("gone for a while", status=404),
                {"data": e[:3]},
                {"data": e},
            ],
            ("GET", FT + "/checkpoints"): [{"data": []}],
            ("GET", FT + "/metrics"): [{"metrics": []}],
        }
    )
    ops = JobOperations(TogetherDialect(), "http://p", canned.clock)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        outcome = canned.drive(wait_for_job(ops, "ft-1", POLLING, CancelPolicy(), None, 0))
    batches = [[ev.type for ev in r.events] for r in canned.reports if isinstance(r, NewEvents)]
    assert batches == [["job_pending", "job_start"], ["epoch"], ["job_complete"]], "none lost, none repeated"
    assert outcome.event_cursor == 4 and outcome.job.state is JobState.SUCCEEDED
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1, "once per job and kind"


def test_one_warning_per_job_and_kind_each_job_its_own(caplog):
    # one hook (one JobOperations) waits on two jobs, one of them twice (a worker's final view)
    script = {("GET", FT): [together("completed")], ("GET", "/v1/fine-tunes/ft-2"): [together("completed")]}
    for path in (FT, "/v1/fine-tunes/ft-2"):
        script |= {("GET", path + "/events"): [refused()], ("GET", path + "/checkpoints"): [{"data": []}]}
        script |= {("GET", path + "/metrics"): [{"metrics": []}]}
    canned = Canned(script)
    ops = JobOperations(TogetherDialect(), "http://p", canned.clock)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for job_id in ("ft-1", "ft-1", "ft-2"):
            canned.drive(wait_for_job(ops, job_id, POLLING, CancelPolicy(), None, 0))
    warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert [w.split(" are ")[0] for w in warnings] == ["Events of job ft-1", "Events of job ft-2"]
    assert len(canned.calls("GET", FT + "/events")) == 2, "asked again each time, warned once"


def test_an_auxiliary_read_that_keeps_failing_is_left_out_after_its_retries_not_lost_contact(caplog):
    canned = Canned(
        {
            ("GET", FT): [together("running"), together("completed")],
            ("GET", FT + "/events"): [TransientPlatformError("Service Unavailable", status=503)],
            ("GET", FT + "/checkpoints"): [{"data": []}],
            ("GET", FT + "/metrics"): [{"metrics": []}],
        }
    )
    ops = JobOperations(TogetherDialect(), "http://p", canned.clock)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        outcome = canned.drive(wait_for_job(ops, "ft-1", POLLING, CancelPolicy(), None, 0))
    assert isinstance(outcome, JobFinished) and outcome.job.state is JobState.SUCCEEDED
    (warning,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert "GET /v1/fine-tunes/ft-1/events kept failing: Service Unavailable" in warning
    assert all(r.budget is None for r in canned.calls("GET", FT + "/events")), "never holds up the polls"
    assert all(r.budget == 60 for r in canned.calls("GET", FT)), "the status read rides out outages"


def test_the_status_read_still_decides_a_refusal_of_its_own():
    canned = Canned({("GET", FT): [together("running"), refused()], ("GET", FT + "/events"): [{"data": []}]})
    ops = JobOperations(TogetherDialect(), "http://p", canned.clock)
    outcome = canned.drive(wait_for_job(ops, "ft-1", POLLING, CancelPolicy(), None, 0))
    assert isinstance(outcome, PollFailed)
    assert "refused the credentials of connection 'c'" in outcome.message, "its own auth error blames them"


def test_the_snapshot_leaves_out_what_it_cannot_read():
    canned = Canned(
        {
            ("GET", FT): [together("running", epochs_completed=1)],
            ("GET", FT + "/events"): [refused()],
            ("GET", FT + "/checkpoints"): [{"data": "nope"}],
            ("GET", FT + "/metrics"): [JobNotFoundError("no metrics yet", status=404)],
        }
    )
    ops = JobOperations(TogetherDialect(), "http://p", canned.clock)
    job = canned.drive(ops.snapshot("ft-1"))
    assert job.state is JobState.RUNNING and job.progress.epoch == 1
    assert job.events == [] and job.checkpoints == [] and job.metric_history == []


def test_the_explicit_reads_still_raise():
    canned = Canned({("GET", FT + "/events"): [refused()]})
    ops = JobOperations(TogetherDialect(), "http://p", canned.clock)
    with pytest.raises(PlatformAuthError):
        canned.drive(ops.list_events("ft-1"))


def test_an_auxiliary_reads_body_is_judged_by_the_read_not_retried_as_a_failed_call():
    # the transport hands the raw body over (no retry of a "malformed" 2xx); the read then leaves it out
    request = ApiRequest("GET", "/api/v1/trainingjobs/t1/events", reader=_raw)
    assert decode_response(PaiDialect(), request, 200, {}, b"<html>proxy</html>") == b"<html>proxy</html>"


def test_a_list_answer_that_is_not_a_list_is_a_malformed_call_not_a_crash():
    canned = Canned({("GET", "/v1/fine-tunes"): [{"data": "not a list"}]})
    ops = JobOperations(TogetherDialect(), "http://p", canned.clock)
    with pytest.raises(TransientPlatformError, match="malformed"):
        canned.drive(ops.list_jobs(["airflow-dag:d"]))


def test_an_earlier_try_is_looked_for_since_its_run_started_or_30_days_back_if_earlier():
    now = datetime(2025, 3, 31, tzinfo=UTC)
    run = SimpleNamespace(start_date=datetime(2025, 1, 1, tzinfo=UTC))
    assert earlier_jobs_since({"dag_run": run}, now) == run.start_date
    recent = SimpleNamespace(start_date=datetime(2025, 3, 30, tzinfo=UTC))  # a cleared run started again
    assert earlier_jobs_since({"dag_run": recent}, now) == now - timedelta(days=30)
    assert earlier_jobs_since({}, now) == now - timedelta(days=30)
