"""Only the status read decides the outcome, against the local platform and judged by its records:
an events endpoint refused for good never fails the task (deferred or on the worker)."""

from __future__ import annotations

import json
import logging
import uuid

import pytest

from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.testing.inprocess import (
    InMemoryAirflow,
    run_task,
    task_context,
)
from airflow_training_provider.testing.killpaths.flavors import FLAVORS

OPERATIONS = "airflow_training_provider.lifecycle.operations"
#: where each platform's job paths start (a fault rule on ``<prefix>…/events`` refuses every job's events)
JOB_PATHS = {"pai": "/api/v1/trainingjobs/", "modelarts": "/v2/", "together": "/v1/fine-tunes/"}


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
def test_events_refused_for_good_never_fail_the_task_and_are_warned_once(control, conn, deferrable, caplog):
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
    (warning,) = [w for w in warnings_of(caplog, OPERATIONS) if "not readable" in w]
    assert warning.startswith(f"Events of job {job['job_id']} are not readable (403 Forbidden")
    assert "/events" in warning and warning.endswith("status polling goes on")
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "refused the credentials" not in logged, "the status reads work: the credentials are fine"
    assert "Platform event" not in logged
    if conn == "together":  # what the job object does give is still there
        assert result["checkpoints"] and result["metric_history"]
