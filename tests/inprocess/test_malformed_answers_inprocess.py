"""A poll answered with a body the dialect cannot read is a failed poll, whatever the parser raises:
retried within the outage budget, then "lost contact" — never a crashed wait. Against the local
platform, whose fault rule answers the job's Get with a body lacking its status, and both drivers
(the worker's sync hook, the trigger's async client)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from airflow_training_provider.cancellation import CancelPolicy
from airflow_training_provider.hooks.training import TrainingPlatformHook
from airflow_training_provider.hooks.training_async import AsyncTrainingPlatformHook
from airflow_training_provider.hooks.transport import RetryPolicy
from airflow_training_provider.lifecycle.waiting import JobFinished, LostContact, Polling, wait_for_job
from airflow_training_provider.models import JobState, TrainingJob
from airflow_training_provider.platforms.tensorone import TensorOneDialect

CONN = "tensorone_local"
FAST_RETRIES = RetryPolicy(call_timeout=10.0, initial_backoff=0.05, max_backoff=0.1)


class HandReadTensorOne(TensorOneDialect):
    """TensorOne's dialect with its poll read by hand, as a dialect without wire models would read
    it: a missing field is a ``KeyError`` (not pydantic's ``ValidationError``, a ``ValueError``)."""

    def read_poll(self, raw: bytes | str) -> TrainingJob:
        body = json.loads(raw)
        status = body["status"]
        return TrainingJob(
            id=body["jobId"], platform=self.name, state=self.map_status(status), raw_status=status
        )


def wait(driver: str, job_id: str, polling: Polling):
    """``wait_for_job`` of ``job_id`` driven by the sync hook or the async client, reading polls
    with :class:`HandReadTensorOne`."""
    if driver == "sync":
        hook = TrainingPlatformHook(CONN, FAST_RETRIES)
        hook.ops.dialect = HandReadTensorOne()
        return hook.drive(wait_for_job(hook.ops, job_id, polling, CancelPolicy()))

    async def run():
        async with AsyncTrainingPlatformHook(CONN, FAST_RETRIES).client() as client:
            client.ops.dialect = HandReadTensorOne()
            return await client.drive(wait_for_job(client.ops, job_id, polling, CancelPolicy()))

    return asyncio.run(run())


def start_job(epochs: int) -> str:
    spec = {
        "name": f"malformed-{uuid.uuid4().hex[:6]}",
        "datasetId": "digits",
        "config": {"training": {"epochs": epochs, "seconds_per_epoch": 0.2}},
    }
    return TrainingPlatformHook(CONN).create_job(spec).id


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_key_error_on_a_malformed_poll_counts_a_failed_poll_not_a_crashed_wait(control, driver):
    job_id = start_job(epochs=3)
    no_status = json.dumps({"jobId": job_id})  # a 200 whose job lacks its status
    rule = control.add_fault(
        method="GET", path_prefix="/v2/training/jobs/", path_suffix=f"/{job_id}", body=no_status, count=2
    )
    try:
        outcome = wait(driver, job_id, Polling(poll_interval=0.2, outage_budget=30))
        fired = control.fault(rule["id"])["fired"]
    finally:
        control.clear_faults(rule_id=rule["id"])
    assert fired == 2, "both malformed answers were read"
    assert isinstance(outcome, JobFinished), outcome
    assert outcome.job.state is JobState.SUCCEEDED and control.job(job_id)["state"] == "succeeded"


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_polls_malformed_for_longer_than_the_outage_budget_lose_contact_and_leave_the_job(control, driver):
    job_id = start_job(epochs=5)
    rule = control.add_fault(
        method="GET",
        path_prefix="/v2/training/jobs/",
        path_suffix=f"/{job_id}",
        body=json.dumps({"jobId": job_id}),
        count=-1,
    )
    try:
        outcome = wait(driver, job_id, Polling(poll_interval=0.2, outage_budget=0.5))
    finally:
        control.clear_faults(rule_id=rule["id"])
    assert isinstance(outcome, LostContact), outcome
    assert f"malformed answer to GET /v2/training/jobs/{job_id}: field 'status' is missing" in outcome.message
    assert control.job(job_id)["state"] in {"running", "starting", "queued", "succeeded"}, "not cancelled"
