"""The sync and async hooks against a running local training platform over real HTTP."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from airflow_training_provider.errors import JobNotFoundError, JobStateConflictError, PlatformAuthError
from airflow_training_provider.hooks.training import TrainingPlatformHook
from airflow_training_provider.hooks.training_async import AsyncTrainingPlatformHook
from airflow_training_provider.models import CancelRequest, JobState

CONN_ID = "tensorone_it"


@pytest.fixture(autouse=True)
def _connection(monkeypatch, conn_uri_env):
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", conn_uri_env)


def spec(**training) -> dict:
    params = {"epochs": 3, "seconds_per_epoch": 0.3} | training
    return {"name": f"it-{uuid.uuid4().hex[:6]}", "datasetId": "digits", "config": {"training": params}}


def wait_for(hook: TrainingPlatformHook, job_id: str, states: set[JobState], timeout: float = 60) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = hook.get_job(job_id)
        if job.state in states:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} never reached {states}; last {job.state}")


def test_create_get_until_completed():
    hook = TrainingPlatformHook(CONN_ID)
    created = hook.create_job(spec(epochs=5, seconds_per_epoch=0.1))
    assert created.id and created.state in {JobState.QUEUED, JobState.STARTING, JobState.RUNNING}
    assert created.console_url and created.id in created.console_url
    job = wait_for(hook, created.id, {JobState.SUCCEEDED, JobState.FAILED})
    assert job.state is JobState.SUCCEEDED, job.message
    assert job.metrics["validation_accuracy"] >= 0.85
    assert job.progress.epoch == 5
    assert len([c for c in job.checkpoints if c.kind != "final"]) == 5
    assert all(Path(c.path).is_file() for c in job.checkpoints)
    assert job.cost.total_usd > 0


def test_cancel_with_final_checkpoint_writes_it_and_409_afterwards():
    hook = TrainingPlatformHook(CONN_ID)
    job = hook.create_job(spec(epochs=50, seconds_per_epoch=0.5))
    wait_for(hook, job.id, {JobState.RUNNING})
    result, final = hook.cancel_and_confirm(
        job.id, CancelRequest(reason="it test", create_final_checkpoint=True)
    )
    assert final.state is JobState.CANCELLED
    assert result.state is JobState.CANCELLED and not result.already_terminal
    assert result.final_checkpoint_id, result
    assert Path(result.final_checkpoint_path).is_file()
    assert result.cost.total_usd is not None and result.cost.total_usd > 0

    # The platform refuses a second cancel with 409 STATE_CONFLICT; the hook reports it as a no-op.
    with pytest.raises(JobStateConflictError) as err:
        hook.call(hook.dialect.cancel_request(job.id, CancelRequest()))
    assert err.value.status == 409 and err.value.code == "STATE_CONFLICT"
    again = hook.cancel_job(job.id)
    assert again.already_terminal and again.state is JobState.CANCELLED


def test_cancel_without_preserving_checkpoints_leaves_none():
    hook = TrainingPlatformHook(CONN_ID)
    job = hook.create_job(spec(epochs=50, seconds_per_epoch=0.3))
    running = wait_for(hook, job.id, {JobState.RUNNING})
    deadline = time.monotonic() + 20
    while not running.checkpoints and time.monotonic() < deadline:  # let it write at least one
        time.sleep(0.2)
        running = hook.get_job(job.id)
    paths = [Path(c.path) for c in running.checkpoints]
    assert paths and all(p.is_file() for p in paths)
    _, final = hook.cancel_and_confirm(
        job.id, CancelRequest(preserve_checkpoints=False, create_final_checkpoint=False)
    )
    assert final.state is JobState.CANCELLED
    assert final.checkpoints == []
    assert not any(p.exists() for p in paths)
    assert hook.list_checkpoints(job.id) == []


def test_unknown_job_and_bad_key():
    hook = TrainingPlatformHook(CONN_ID)
    with pytest.raises(JobNotFoundError):
        hook.get_job("job_train_doesnotexist")


def test_wrong_api_key_is_refused(monkeypatch, platform):
    import json

    monkeypatch.setenv(
        "AIRFLOW_CONN_TENSORONE_BADKEY",
        json.dumps({"conn_type": "tensorone", "host": platform.url, "password": "nope"}),
    )
    with pytest.raises(PlatformAuthError) as err:
        TrainingPlatformHook("tensorone_badkey").get_job("job_train_x")
    assert "connection 'tensorone_badkey'" in str(err.value) and "password" in str(err.value)
    assert "nope" not in str(err.value)


def test_list_jobs_by_tag():
    hook = TrainingPlatformHook(CONN_ID)
    tag = f"it-run:{uuid.uuid4().hex[:8]}"
    job = hook.create_job(hook.dialect.with_tags(spec(epochs=1, seconds_per_epoch=0.1), [tag]))
    listed = hook.list_jobs([tag])
    assert [j.id for j in listed] == [job.id]
    assert tag in listed[0].tags


def test_async_client_get_and_cancel_over_one_session():
    sync = TrainingPlatformHook(CONN_ID)
    job = sync.create_job(spec(epochs=50, seconds_per_epoch=0.5))
    wait_for(sync, job.id, {JobState.RUNNING})

    async def scenario():
        async with AsyncTrainingPlatformHook(CONN_ID).client() as client:
            session = client.session
            seen = await client.get_job(job.id)
            result = await client.cancel_job(job.id, CancelRequest(create_final_checkpoint=True))
            assert client.session is session
            return seen, result

    seen, result = asyncio.run(scenario())
    assert seen.state is JobState.RUNNING
    assert result.state in {JobState.STOPPING, JobState.CANCELLED}
    final = wait_for(sync, job.id, {JobState.CANCELLED})
    assert final.final_checkpoint is not None and final.final_checkpoint.kind == "final"
    assert Path(final.final_checkpoint.path).is_file()
