"""Correctness cases from user reports against other integrations, run in-process against the local
platform and judged by its records: a job ending just before the deadline, a failure between submit
and waiting, sensor parity (timeout, soft_fail, cancel_on_kill) deferred and poking, an optional
endpoint refused, typed specs, and every connection form through both drivers."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from datetime import timedelta

import pytest
from airflow.sdk.exceptions import (
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    AirflowTaskTimeout,
)

from airflow_training_provider.cancellation import GiveUp
from airflow_training_provider.hooks.training import TrainingPlatformHook
from airflow_training_provider.hooks.training_async import AsyncTrainingPlatformHook
from airflow_training_provider.hooks.transport import prepare_request
from airflow_training_provider.job_task import TrainingJobFailed
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.sensors.training_job import TrainingJobSensor
from airflow_training_provider.testing.inprocess import first_event, run_task, task_context
from airflow_training_provider.triggers.training_job import TrainingJobTrigger
from tests.conftest import API_KEY
from tests.inprocess.test_operators_inprocess import control_cancel, submit, tensorone_spec


def long_job(control, run_id: str) -> str:
    owner = submit("tensorone", tensorone_spec(epochs=300), wait_for_completion=False)
    job_id = run_task(owner, task_context(owner, run_id=run_id))["id"]
    control.wait_job(job_id, {"running"})
    return job_id


@pytest.fixture(scope="module")
def watched(control):
    """A long job the sensor tests watch (none of them may cancel it); cancelled at the end."""
    job_id = long_job(control, "watched")
    yield job_id
    assert control.job(job_id)["cancel_requests"] == [], "a sensor cancelled the job it watches"
    control_cancel(control, job_id)


@pytest.fixture(scope="module")
def cancelled_outside(control):
    """A job a person cancelled from the platform's console."""
    job_id = long_job(control, "cancelled-outside")
    control.console_cancel(job_id)
    control.wait_job(job_id, {"cancelled"})
    return job_id


@pytest.mark.slow
def test_a_job_that_ends_just_before_the_deadline_succeeds(control):
    # the deadline falls between two polls (poll_interval 30 s): it is read at the deadline, not cancelled
    op = submit("tensorone", tensorone_spec(epochs=1), deferrable=True, poll_interval=30,
                execution_timeout=timedelta(seconds=10))  # fmt: skip
    ctx = task_context(op, run_id="ends-before-deadline")
    started = time.monotonic()
    result = run_task(op, ctx)  # a 1-epoch job ends in ~2 s (a loaded 2-core machine: up to ~8 s)
    assert result["state"] == "succeeded" and 9 <= time.monotonic() - started < 20
    assert control.job(result["id"])["cancel_requests"] == []


class FailsBeforeWaiting(SubmitTrainingJobOperator):
    """Submits, then fails while building the deferral (as a bad trigger argument would)."""

    def defer_on(self, job, context, deadline, deadline_kind="execution_timeout"):
        raise TypeError("float() argument must be a string or a real number, not 'datetime.timedelta'")


def test_a_failure_between_submit_and_waiting_cancels_the_job(control):
    op = FailsBeforeWaiting(
        task_id="train", conn_id="tensorone_local", spec=tensorone_spec(epochs=300), deferrable=True
    )
    ctx = task_context(op, run_id="gap-cancel")
    with pytest.raises(TypeError):
        run_task(op, ctx)
    job = control.wait_job(ctx["ti"].xcoms["job_id"], {"cancelled"})
    assert [c["reason"] for c in control.accepted_cancels(job)] == [GiveUp.START_FAILED.value]


def test_without_cancel_on_kill_the_retry_re_attaches_after_such_a_failure(control):
    spec = tensorone_spec(epochs=4)
    op = FailsBeforeWaiting(
        task_id="train",
        conn_id="tensorone_local",
        spec=spec,
        deferrable=True,
        cancel_on_kill=False,
        retries=1,
    )
    first = task_context(op, run_id="gap-leave")
    with pytest.raises(TypeError):
        run_task(op, first)
    job_id = first["ti"].xcoms["job_id"]
    assert control.job(job_id)["cancel_requests"] == []
    retry_op = submit("tensorone", spec, deferrable=True, cancel_on_kill=False, retries=1)
    result = run_task(retry_op, task_context(retry_op, try_number=2, run_id="gap-leave", state=first))
    assert result["id"] == job_id and result["state"] == "succeeded"


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferred", "poke"])
def test_a_sensor_times_out_the_same_way_deferred_or_poking_and_leaves_the_job(control, watched, deferrable):
    sensor = TrainingJobSensor(task_id="watch", conn_id="tensorone_local", job_id=watched,
                               deferrable=deferrable, poll_interval=0.5, timeout=2)  # fmt: skip
    started = time.monotonic()
    with pytest.raises(AirflowSensorTimeout):
        run_task(sensor, task_context(sensor, run_id=f"watch-{deferrable}"))
    assert 1.5 <= time.monotonic() - started < 10
    job = control.job(watched)
    assert job["state"] == "running" and job["cancel_requests"] == []


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferred", "poke"])
def test_soft_fail_skips_only_a_timeout_never_a_job_cancelled_by_someone(
    control, watched, cancelled_outside, deferrable
):
    sensor = TrainingJobSensor(task_id="watch", conn_id="tensorone_local", job_id=cancelled_outside,
                               deferrable=deferrable, poll_interval=0.5, soft_fail=True)  # fmt: skip
    with pytest.raises(TrainingJobFailed, match="cancelled outside Airflow"):
        run_task(sensor, task_context(sensor, run_id=f"soft-{deferrable}"))
    sensor = TrainingJobSensor(task_id="watch", conn_id="tensorone_local", job_id=watched,
                               deferrable=deferrable, poll_interval=0.5, timeout=1, soft_fail=True)  # fmt: skip
    with pytest.raises(AirflowSkipException):
        run_task(sensor, task_context(sensor, run_id=f"soft-timeout-{deferrable}"))


def test_the_trigger_fires_no_sooner_than_the_resume_settle_after_the_deferral(cancelled_outside):
    """Airflow 3.3's scheduler fails a task whose trigger fires before it has seen the worker
    exit from defer(): an already-ended job's event is held until ``resume_settle`` has passed."""

    def seconds_to_event(deferred_at: float) -> float:
        trigger = TrainingJobTrigger(
            conn_id="tensorone_local",
            job_id=cancelled_outside,
            deferred_at=deferred_at,
            resume_settle=2,
            spread_polls=False,
        )
        started = time.monotonic()
        event = asyncio.run(first_event(trigger))
        assert event.payload["job"]["state"] == "cancelled"
        return time.monotonic() - started

    assert 1.5 <= seconds_to_event(time.time()) < 4
    assert seconds_to_event(time.time() - 60) < 1.5  # a trigger resumed long after (a restart)


def test_cancel_on_kill_off_is_honoured_at_a_deferred_execution_timeout(control):
    op = submit("tensorone", tensorone_spec(epochs=300), deferrable=True, cancel_on_kill=False,
                execution_timeout=timedelta(seconds=3))  # fmt: skip
    ctx = task_context(op, run_id="no-cancel-deadline")
    with pytest.raises(AirflowTaskTimeout, match="cancel_on_kill is off"):
        run_task(op, ctx)
    job_id = ctx["ti"].xcoms["job_id"]
    assert control.job(job_id)["cancel_requests"] == []
    control_cancel(control, job_id)


def test_an_optional_list_endpoint_that_is_refused_never_fails_the_first_try(control, monkeypatch):
    # only the list call: GET /v2/training/jobs?tag=... (a job's own path goes on)
    rule = control.add_fault(
        method="GET", path_prefix="/v2/training/jobs", header="x-list", header_value="1", status=405, count=-1
    )
    op = submit("tensorone", tensorone_spec(epochs=1), wait_for_completion=False)
    original = op.hook.dialect.list_request  # one dialect per process: patched for this test only
    monkeypatch.setattr(op.hook.dialect, "list_request", lambda *args: _marked(original(*args)))
    try:
        result = run_task(op, task_context(op, run_id="list-refused"))
        fired = control.fault(rule["id"])["fired"]
    finally:
        control.clear_faults(rule_id=rule["id"])
    assert fired == 1, "the lookup was refused"
    assert control.job(result["id"])["state"] in {"queued", "starting", "running", "succeeded"}


def test_a_poll_answered_200_with_a_body_that_is_not_a_job_is_retried_not_a_broken_wait(control):
    # valid JSON, but no status: a proxy's or a half-deployed API's answer; the wait goes on
    rule = control.add_fault(method="GET", path_prefix="/v2/training/jobs/", body='{"jobId": "x"}', count=2)
    op = submit("tensorone", tensorone_spec(epochs=1), deferrable=True, poll_interval=1)
    try:
        result = run_task(op, task_context(op, run_id="not-a-job"))
        fired = control.fault(rule["id"])["fired"]
    finally:
        control.clear_faults(rule_id=rule["id"])
    assert fired == 2
    assert result["state"] == "succeeded" and result["checkpoints"]


def _marked(request):
    """The list request with a header the fault rule matches (so only it is refused)."""
    from dataclasses import replace

    return replace(request, headers={**request.headers, "x-list": "1"})


def test_a_spec_error_fails_without_retries_and_submits_nothing(control):
    name = f"typo-{uuid.uuid4().hex[:6]}"
    op = submit(
        "tensorone", {"name": name, "datasetId": "digits", "config": {"training": {"epoch": 3}}}, retries=3
    )
    with pytest.raises(AirflowFailException, match=r"config\.training\.epoch.*did you mean 'epochs'"):
        run_task(op, task_context(op, run_id="typo"))
    assert control.jobs(name=name) == []


def test_templated_numbers_reach_the_platform_as_numbers(control):
    spec = tensorone_spec(epochs=1)
    spec["config"]["training"]["epochs"] = "2"  # what "{{ params.epochs }}" renders without native rendering
    op = submit("tensorone", spec, wait_for_completion=False)
    result = run_task(op, task_context(op, run_id="templated-number"))
    record = control.job(result["id"])
    assert record["request"]["config"]["training"]["epochs"] == 2 and record["progress"]["total_epochs"] == 2
    control_cancel(control, result["id"])


def _forms(url: str) -> dict[str, dict]:
    host_port = url.removeprefix("http://")
    host, port = host_port.split(":")
    return {
        "scheme-and-trailing-slash": {"host": url + "/"},
        "bare-host-port-field": {"host": host, "port": int(port)},
        "bare-host-with-port": {"host": host_port},
        "schema-field": {"host": host_port, "schema": "http"},
        "uri": {"uri": f"tensorone://:{API_KEY}@{host_port}"},
        "extras-as-headers": {"host": url, "extra": {"X-Team": "ml"}},
    }


def test_every_connection_form_builds_the_same_requests_on_both_sides(control, platform):
    job_id = run_task(op := submit("tensorone", tensorone_spec(epochs=1), wait_for_completion=False),
                      task_context(op, run_id="forms"))["id"]  # fmt: skip
    for name, form in _forms(platform.url).items():
        conn_id = f"form_{name.replace('-', '_')}"
        if "uri" in form:
            os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = form["uri"]
        else:
            os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(
                {"conn_type": "tensorone", "password": API_KEY, **form}
            )
        sync = TrainingPlatformHook(conn_id)
        assert sync.get_job(job_id).id == job_id, name

        async def both(conn_id=conn_id):
            async with AsyncTrainingPlatformHook(conn_id).client() as client:
                job = await client.get_job(job_id)
                return job, client.connection

        job, async_conn = asyncio.run(both())
        assert job.id == job_id, name
        request = sync.dialect.get_request(job_id)
        urls = {
            prepare_request(c.dialect, c.base_url, request, c.credentials).url
            for c in (sync.platform_connection, async_conn)
        }
        assert urls == {f"{platform.url}/v2/training/jobs/{job_id}?includeMetrics=true"}, (name, urls)
