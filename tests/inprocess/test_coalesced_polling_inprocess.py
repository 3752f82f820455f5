"""Coalesced polling on the local platform: the waiting jobs of one connection in one event loop
(a triggerer) share one poller that reads their status with the platform's batch read, and each
job's own reads are made only when that read says so (``hooks/coalescing.py``). Judged by the
platform's own request counts (``GET /_local/requests``), per job and per route."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest

from airflow_training_devel.killpaths.flavors import FLAVORS
from airflow_training_provider.hooks.training import TrainingPlatformHook
from airflow_training_provider.testing.inprocess import first_event
from airflow_training_provider.triggers.training_job import TrainingJobTrigger

#: conn → (the engine's platform name, its Get route, its batch route) as the local platform counts them
ROUTES = {
    "aws": ("sagemaker", "DescribeTrainingJob", "Search"),
    "pai": ("pai", "GET /api/v1/trainingjobs/{job_id}", "GET /api/v1/trainingjobs"),
    "modelarts": (
        "modelarts",
        "GET /v2/{project_id}/training-jobs/{job_id}",
        "POST /v2/{project_id}/training-job-searches",
    ),
    "together": ("together", "GET /v1/fine-tunes/{job_id}", "GET /v1/fine-tunes"),
    "tensorone": ("tensorone", "GET /v2/training/jobs/{job_id}", "GET /v2/training/jobs"),
}
COALESCED, ON_THEIR_OWN = 6, 3
EPOCHS, SECONDS_PER_EPOCH = 4, 1.0


def spec(conn: str) -> dict:
    """The kill-path flavor's spec with a checkpoint location of its own."""
    raw = json.dumps(FLAVORS[conn].spec(epochs=EPOCHS, seconds_per_epoch=SECONDS_PER_EPOCH))
    return json.loads(raw.replace("{{ dag.dag_id }}/{{ run_id | replace(':', '-') }}", uuid.uuid4().hex))


def create_jobs(conn: str, count: int) -> list[str]:
    """``count`` jobs, each a mapped task instance's (its tags name the job where the client does)."""
    hook = TrainingPlatformHook(f"{conn}_local")
    run = uuid.uuid4().hex[:8]
    ids = []
    for index in range(count):
        tags = [
            "airflow-deployment:coalesced",
            "airflow-dag:coalesced",
            f"airflow-run:{run}",
            "airflow-task:t",
            f"airflow-map:{index}",
        ]
        defaults = hook.dialect.spec_defaults(hook.platform_connection.credentials)  # PAI's workspace
        tagged = hook.dialect.with_tags(hook.dialect.validate_spec({**defaults, **spec(conn)}), tags)
        ids.append(hook.drive(hook.ops.create_job(tagged, tags)).id)
    return ids


def wait_all(conn: str, job_ids: list[str], coalesce: bool) -> list[Any]:
    """Each job's trigger, all at once in one event loop, polling every second."""

    async def run() -> list[Any]:
        triggers = [
            TrainingJobTrigger(
                conn_id=f"{conn}_local",
                job_id=job_id,
                poll_interval=1,
                event_cursor=0,
                resume_settle=0,
                coalesce=coalesce,
            )
            for job_id in job_ids
        ]
        return await asyncio.gather(*(first_event(t) for t in triggers))

    return asyncio.run(run())


def counted(control, platform: str, before: dict) -> tuple[dict[str, int], dict[str, int]]:
    """The requests per job and per route since ``before`` (``control.requests()``)."""
    now = control.requests().get(platform, {})
    then = before.get(platform, {})
    by = {}
    for key in ("by_job", "by_route"):
        old = then.get(key, {})
        by[key] = {k: v - old.get(k, 0) for k, v in now.get(key, {}).items()}
    return by["by_job"], by["by_route"]


@pytest.mark.slow  # ~20 s a platform: `make test` runs it, not the fast tier
@pytest.mark.exclusive  # counts against each job's run time: the machine to itself
@pytest.mark.parametrize("conn", list(ROUTES))
def test_waiting_jobs_share_one_batch_read_and_read_their_own_only_when_needed(control, conn):
    platform, get_route, batch_route = ROUTES[conn]

    # coalesced: one poller, one batch read a round for every job
    jobs = create_jobs(conn, COALESCED)
    before = control.requests()
    started = time.monotonic()
    events = wait_all(conn, jobs, coalesce=True)
    coalesced_seconds = time.monotonic() - started
    by_job, by_route = counted(control, platform, before)
    for job_id, event in zip(jobs, events, strict=True):
        assert event.payload["status"] == "terminal", event.payload
        assert event.payload["job"]["id"] == job_id and event.payload["job"]["state"] == "succeeded"
        assert control.job(job_id)["state"] == "succeeded"
    own = {job_id: by_job.get(job_id, 0) for job_id in jobs}  # every call naming the job
    polls = sum(lifetime(control, job_id) for job_id in jobs)  # one a second each while it lived

    # the contrast: each job polled on its own
    alone = create_jobs(conn, ON_THEIR_OWN)
    before = control.requests()
    events = wait_all(conn, alone, coalesce=False)
    alone_by_job, alone_by_route = counted(control, platform, before)
    for job_id, event in zip(alone, events, strict=True):
        assert event.payload["status"] == "terminal", event.payload
        assert event.payload["job"]["id"] == job_id and event.payload["job"]["state"] == "succeeded"
    alone_polls = {job_id: lifetime(control, job_id) for job_id in alone}
    print(
        f"\n{conn}: coalesced {coalesced_seconds:.1f} s, {polls} polls, calls per job {sorted(own.values())}, "
        f"{get_route} {by_route.get(get_route)}, {batch_route} {by_route.get(batch_route)}; on their own: "
        f"{sum(alone_polls.values())} polls, calls per job {sorted(alone_by_job.get(j, 0) for j in alone)}, "
        f"{get_route} {alone_by_route.get(get_route)}"
    )
    # coalesced: a batch read a round, and the Gets (others' traffic only adds to the route's count)
    # the first read, a state change on partial rows, the final view: far fewer than the polls
    assert by_route.get(batch_route, 0) >= coalesced_seconds / 2, "about one batch read a round"
    # (partial rows also read a job on its own at each state change: short jobs here change often)
    complete = _dialect(conn).batch_rows_complete
    assert by_route.get(get_route, 0) <= polls * (0.5 if complete else 0.75)
    assert max(own.values()) <= 12
    # on their own: one Get per poll per job at least (no other test touches these jobs)
    for job_id in alone:
        assert alone_by_job.get(job_id, 0) >= alone_polls[job_id]
    assert alone_by_route.get(get_route, 0) >= sum(alone_polls.values())


def _dialect(conn: str):
    return TrainingPlatformHook(f"{conn}_local").dialect


def lifetime(control, job_id: str) -> int:
    """Whole seconds from the job's creation to its end on the platform."""
    job = control.job(job_id)
    return int(job["finished_at"] - job["created_at"])
