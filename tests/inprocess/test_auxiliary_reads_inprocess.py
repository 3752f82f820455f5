"""Only the status read decides the outcome, against the local platform and judged by its records:
an events endpoint refused for good never fails the task (deferred or on the worker); a malformed
row in a job list breaks neither the first submit, the re-attach nor the reaper; the reaper handles
each job on its own; PAI's 7-day list window is covered by ``StartTime``."""

from __future__ import annotations

import json
import logging
import uuid

import pytest
from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType
from airflow.sdk.execution_time.comms import ErrorResponse

from airflow_training_devel.killpaths.flavors import FLAVORS
from airflow_training_provider.hooks.training import TrainingPlatformHook
from airflow_training_provider.identity import DEPLOYMENT_ENV
from airflow_training_provider.job_task import STATE_STORE_KEY
from airflow_training_provider.operators.reaper import OrphanedJobsNotReaped, ReapOrphanedTrainingJobsOperator
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.testing.inprocess import (
    InMemoryAirflow,
    TaskInstanceRecord,
    run_task,
    task_context,
)
from airflow_training_provider.triggers.training_job import TrainingJobTrigger

OPERATIONS = "airflow_training_provider.lifecycle.operations"
DIALECTS = "airflow_training_provider.platforms.base"
#: where each platform's job paths start (a fault rule on ``<prefix>…/events`` refuses every job's events)
JOB_PATHS = {"pai": "/api/v1/trainingjobs/", "modelarts": "/v2/", "together": "/v1/fine-tunes/"}
EIGHT_DAYS = 8 * 24 * 3600


def spec(conn: str, epochs: int = 2, seconds_per_epoch: float = 0.2) -> dict:
    """The kill-path flavor's spec, its checkpoint location this job's own (rendered by no template
    here, it would be shared: a later job would resume from an earlier one's final checkpoint)."""
    raw = json.dumps(FLAVORS[conn].spec(epochs=epochs, seconds_per_epoch=seconds_per_epoch))
    return json.loads(raw.replace("{{ dag.dag_id }}/{{ run_id | replace(':', '-') }}", uuid.uuid4().hex))


def submit(conn: str, spec: dict, task_id: str = "train", **kwargs) -> SubmitTrainingJobOperator:
    kwargs.setdefault("poll_interval", 0.5)
    return SubmitTrainingJobOperator(task_id=task_id, conn_id=f"{conn}_local", spec=spec, **kwargs)


def warnings_of(caplog, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno == logging.WARNING]


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferred", "worker"])
@pytest.mark.parametrize("conn", ["pai", "modelarts", "together"])
def test_events_refused_for_good_never_fail_the_task_and_are_warned_once(
    control, conn, deferrable, caplog, capfd
):
    rule = control.add_fault(
        method="GET", path_prefix=JOB_PATHS[conn], path_suffix="/events", status=403, count=-1,
        message="You are not authorized to read the events of this job",
    )  # fmt: skip
    op = submit(conn, spec(conn, epochs=5, seconds_per_epoch=0.3), deferrable=deferrable)  # a few polls
    ctx = task_context(op, run_id=f"events-refused-{conn}-{deferrable}")
    try:
        # Airflow keeps the trigger's event cursor (else the trigger retries reading it for seconds)
        with caplog.at_level(logging.WARNING), InMemoryAirflow().installed():
            result = run_task(op, ctx)
        fired = control.fault(rule["id"])["fired"]
    finally:
        control.clear_faults(rule_id=rule["id"])
    job = control.job(result["id"])
    assert job["state"] == "succeeded" and result["state"] == "succeeded", "the job's own outcome"
    assert fired >= 3, "asked at every poll"
    if deferrable:  # the trigger's own (structlog) logger: the one the triggerer writes into the task log
        trigger_logger = TrainingJobTrigger(conn_id=op.conn_id, job_id="j").log.name
        printed = [line for line in capfd.readouterr().out.splitlines() if "not readable" in line]
        assert len(printed) == 1 and f"[{trigger_logger}]" in printed[0], printed
        warning = printed[0].split("] ", 1)[1].rsplit(" [", 1)[0]
    else:
        (warning,) = [w for w in warnings_of(caplog, OPERATIONS) if "not readable" in w]
    assert warning.startswith(f"Events of job {job['job_id']} are not readable (403 Forbidden")
    assert "/events" in warning and warning.endswith("status polling goes on")
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "refused the credentials" not in logged, "the status reads work: the credentials are fine"
    assert "Platform event" not in logged
    if conn == "together":  # what the job object does give is still there
        assert result["checkpoints"] and result["metric_history"]


def test_a_malformed_row_in_the_together_list_breaks_neither_the_submit_nor_the_re_attach(control, caplog):
    # an earlier job of this task instance, ended; its list row has a wrongly typed field
    other = submit("together", spec("together", epochs=1), wait_for_completion=False)
    other_id = run_task(other, task_context(other, run_id="bad-row"))["id"]
    control.wait_job(other_id, {"succeeded"})
    rule = control.add_fault(
        method="GET", path_prefix="/v1/fine-tunes", set_fields={f"data[id={other_id}].created_at": "yesterday"},
        count=-1,
    )  # fmt: skip
    try:
        with caplog.at_level(logging.WARNING), InMemoryAirflow().installed():  # (the trigger's event cursor)
            # try 1 lists (for an earlier try's job), submits, and dies before the state store write
            first_op = submit("together", spec("together", epochs=2), wait_for_completion=False, retries=1)
            first = task_context(first_op, run_id="bad-row")
            job_id = run_task(first_op, first)["id"]
            first["task_state_store"].delete(STATE_STORE_KEY)
            # try 2 finds it by its tags in the same list and re-attaches
            op = submit("together", first_op.spec, deferrable=True, retries=1)
            result = run_task(op, task_context(op, try_number=2, run_id="bad-row", state=first))
        fired = control.fault(rule["id"])["fired"]
    finally:
        control.clear_faults(rule_id=rule["id"])
    assert fired >= 2
    assert result["id"] == job_id and result["state"] == "succeeded"
    listed = [j["job_id"] for j in control.jobs(tags=["airflow-run:bad-row"], platform="together")]
    assert listed == [other_id, job_id], "no second submit"
    left_out = [w for w in warnings_of(caplog, DIALECTS) if other_id in w]
    assert len(left_out) == 2, "each list call (try 1, try 2) left the row out and said so"
    assert all("field 'created_at'" in w and "is left out" in w for w in left_out)


def test_the_reaper_handles_each_job_on_its_own_and_fails_after_naming_the_ones_it_could_not(
    control, monkeypatch
):
    deployment = f"reap-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(DEPLOYMENT_ENV, deployment)
    run_id = "reap"
    jobs = {}
    for task in ("a", "b", "c", "d", "e", "f", "g"):  # created in this order: the list is oldest first
        op = submit("together", spec("together", epochs=300, seconds_per_epoch=0.5), task_id=task,
                    wait_for_completion=False)  # fmt: skip
        jobs[task] = run_task(op, task_context(op, run_id=run_id, dag_id="reaped"))["id"]
    monkeypatch.delenv(DEPLOYMENT_ENV)
    airflow = InMemoryAirflow(
        {
            ("reaped", run_id, "a", -1): TaskInstanceRecord("failed"),  # → cancel
            ("reaped", run_id, "b", -1): TaskInstanceRecord("failed"),  # gone by the cancel → gone
            ("reaped", run_id, "c", -1): TaskInstanceRecord("failed"),  # the cancel is refused → error
            ("reaped", run_id, "d", -1): AirflowRuntimeError(  # Airflow cannot tell → error
                ErrorResponse(error=ErrorType.API_SERVER_ERROR, detail={"status_code": 500})
            ),
            ("reaped", run_id, "e", -1): TaskInstanceRecord("running", jobs["e"]),  # alive on it → keep
            ("reaped", run_id, "f", -1): TaskInstanceRecord(None),  # Airflow does not know it → cancel
            ("reaped", run_id, "g", -1): TaskInstanceRecord("failed"),  # its list row is malformed
        }
    )
    rules = [
        control.add_fault(
            path_prefix=f"/v1/fine-tunes/{jobs['b']}", status=404, count=-1, message="not found"
        ),
        control.add_fault(
            method="POST",
            path_prefix=f"/v1/fine-tunes/{jobs['c']}/cancel",
            status=400,
            count=-1,
            message="cancel refused",
        ),  # fmt: skip
        control.add_fault(
            method="GET",
            path_prefix="/v1/fine-tunes",
            count=-1,
            set_fields={f"data[id={jobs['g']}].created_at": "yesterday"},
        ),  # fmt: skip
    ]
    reaper = ReapOrphanedTrainingJobsOperator(
        task_id="reap", conn_id="together_local", deployment=deployment, min_age=0, confirm_cancel_timeout=30
    )
    try:
        with airflow.installed(), pytest.raises(OrphanedJobsNotReaped) as failure:
            run_task(reaper, task_context(reaper, run_id="reaper"))
    finally:
        for rule in rules:
            control.clear_faults(rule_id=rule["id"])
    report = {row["job_id"]: row for row in failure.value.report}
    decisions = {task: report[job_id]["decision"] for task, job_id in jobs.items() if job_id in report}
    assert decisions == {"a": "cancel", "b": "gone", "c": "error", "d": "error", "e": "keep", "f": "cancel"}
    assert "cancel refused" in report[jobs["c"]]["reason"]
    assert "could not ask Airflow" in report[jobs["d"]]["reason"]
    message = str(failure.value)
    assert message.startswith("2 of 6 training jobs could not be handled")
    assert jobs["c"] in message and jobs["d"] in message
    assert jobs["a"] not in message and jobs["f"] not in message
    for task in ("a", "f"):  # after the failures, the orphans were still cancelled
        assert control.wait_job(jobs[task], {"cancelled"}, timeout=30)["state"] == "cancelled"
    for task in ("b", "c", "d", "e", "g"):
        assert control.job(jobs[task])["state"] in {"pending", "queued", "starting", "running"}, task
        control.console_cancel(jobs[task])


def test_pai_re_attach_and_the_reaper_find_a_job_created_8_days_ago(control, monkeypatch):
    deployment = f"pai8d-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(DEPLOYMENT_ENV, deployment)
    first_op = submit(
        "pai", spec("pai", epochs=300, seconds_per_epoch=0.5), wait_for_completion=False, retries=1
    )
    first = task_context(first_op, run_id="eight-days", dag_id="old")
    job_id = run_task(first_op, first)["id"]
    control.backdate(job_id, EIGHT_DAYS)
    # PAI's own window: a list without StartTime does not show the job any more
    assert TrainingPlatformHook("pai_local").list_jobs([f"airflow-deployment:{deployment}"]) == []
    # the worker died before the state store write: the retry finds the job by its labels
    first["task_state_store"].delete(STATE_STORE_KEY)
    op = submit("pai", first_op.spec, wait_for_completion=False, retries=1)
    result = run_task(op, task_context(op, try_number=2, run_id="eight-days", dag_id="old", state=first))
    assert result["id"] == job_id, "re-attached, no second submit"
    assert [j["job_id"] for j in control.jobs(tags=[f"airflow-deployment:{deployment}"])] == [job_id]
    monkeypatch.delenv(DEPLOYMENT_ENV)
    # the task instance has given up on it: the reaper finds it too
    reaper = ReapOrphanedTrainingJobsOperator(
        task_id="reap", conn_id="pai_local", deployment=deployment, min_age=0, confirm_cancel_timeout=30
    )
    with InMemoryAirflow({("old", "eight-days", "train", -1): TaskInstanceRecord("failed")}).installed():
        report = run_task(reaper, task_context(reaper, run_id="reaper"))
    assert [(row["job_id"], row["decision"]) for row in report] == [(job_id, "cancel")]
    assert control.wait_job(job_id, {"cancelled"}, timeout=30)["state"] == "cancelled"
