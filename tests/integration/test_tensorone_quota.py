"""Twenty TensorOne jobs waiting within TensorOne's documented quota, enforced by the local platform,
over a run scaled to represent an hour (one hour = 36 s: the windows, the poll interval and the
declared rates scaled alike): no request is throttled, a create and a cancel issued meanwhile go
through at once, and the stretched interval is said once in the task log with its numbers.

The documented limits (``docs/platforms/tensorone.md``, "Errors and rate limits"): 500 reads,
10 creates and 50 other writes per hour and account. Polled on their own every 30 s, twenty jobs
would read 2,400 times an hour: the budget stretches each job's interval to fit (~3 min).
Coalesced, the twenty share one list read per round and fit at the asked interval.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid

import pytest

from airflow_training_devel.local_fixtures import LOCAL_FIXTURES
from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.server import LocalPlatformServer
from airflow_training_provider.hooks.training import TrainingPlatformHook
from airflow_training_provider.triggers.training_job import TrainingJobTrigger

pytestmark = pytest.mark.exclusive  # its timings are the point: alone, not beside other tests

SCALE = 100  # one hour in 36 s
HOUR = 3600 / SCALE
INTERVAL = 30 / SCALE
JOBS = 20
DOCUMENTED = {"read": 500, "create": 10, "write": 50}


@pytest.fixture(scope="module")
def platform(tmp_path_factory):
    with LocalPlatformServer(
        str(tmp_path_factory.mktemp("quota")), log_level="warning", gpus=1, seconds_per_epoch=5.0
    ) as server:
        yield server


def connect(platform, monkeypatch, budgeted: bool = True) -> str:
    """A TensorOne connection to the local platform declaring the documented rates, scaled (or,
    not ``budgeted``, none: the set-up's)."""
    conn_id = f"tensorone_quota_{uuid.uuid4().hex[:6]}"
    budget = {f"{kind}_per_hour": limit * SCALE for kind, limit in DOCUMENTED.items()}
    budget["window_seconds"] = HOUR
    extra = {"api_budget": budget} if budgeted else {}
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}", LOCAL_FIXTURES["tensorone"].connection_json(platform.url, **extra)
    )
    return conn_id


def spec() -> dict:
    return {
        "name": f"q-{uuid.uuid4().hex[:8]}",
        "datasetId": "digits",
        "config": {"training": {"epochs": 500}},
    }


@pytest.mark.parametrize("coalesce", [False, True], ids=["per-job", "coalesced"])
def test_twenty_waiting_jobs_stay_within_the_documented_quota_and_a_create_and_cancel_go_at_once(
    platform, monkeypatch, capfd, coalesce
):
    control = LocalPlatformControl(platform.url)
    conn_id = connect(platform, monkeypatch)
    setup = TrainingPlatformHook(connect(platform, monkeypatch, budgeted=False))
    jobs = [setup.create_job(spec()).id for _ in range(JOBS)]  # not measured, nor in the budget
    control.set_quotas(
        {"tensorone": {k: {"limit": v, "window_seconds": HOUR} for k, v in DOCUMENTED.items()}}
    )
    control.reset_requests()
    timings: dict[str, float] = {}

    async def wait_all() -> None:
        triggers = [
            TrainingJobTrigger(
                conn_id,
                job_id,
                poll_interval=INTERVAL,
                resume_settle=0.0,
                coalesce=coalesce,
                outage_budget=60,
            )
            for job_id in jobs
        ]
        tasks = [asyncio.create_task(anext(t.run())) for t in triggers]
        await asyncio.sleep(HOUR / 3)
        # meanwhile: another DAG submits a job and a user gives up on one of the twenty
        started = time.monotonic()
        await asyncio.to_thread(TrainingPlatformHook(conn_id).create_job, spec())
        timings["create"] = time.monotonic() - started
        started = time.monotonic()
        await asyncio.to_thread(TrainingPlatformHook(conn_id).cancel_job, jobs[-1])
        timings["cancel"] = time.monotonic() - started
        await asyncio.sleep(HOUR * 2 / 3 + 2)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    try:
        thread = threading.Thread(target=asyncio.run, args=(wait_all(),))
        thread.start()
        thread.join(HOUR * 3)
        assert not thread.is_alive()
        counts = control.requests()["tensorone"]
    finally:
        control.clear_quotas()
        for job_id in jobs:
            try:
                control.console_cancel(job_id)
            except Exception:  # noqa: BLE001 - the cancelled one has ended already
                pass

    print(  # the figures (pytest -s)
        f"{'coalesced' if coalesce else 'per-job'}: {counts['by_class']} in a scaled hour, "
        f"{counts['throttled']} throttled, create {timings['create']:.3f} s, cancel {timings['cancel']:.3f} s"
    )
    assert counts["throttled"] == 0, counts
    assert timings["create"] < 1.0 and timings["cancel"] < 1.0, timings
    reads = counts["by_class"]["read"]
    assert reads <= DOCUMENTED["read"] * (HOUR + 2) / HOUR + 5, counts  # within the hour's reads
    # the trigger's log (the task log in a triggerer) is structlog's, written to the process's output
    output = capfd.readouterr()
    notes = [line for line in (output.out + output.err).splitlines() if "API budget of" in line]
    if coalesce:
        # one list read per round serves all twenty: no stretch, far fewer reads than polls
        assert not notes, notes
        per_job = sum(
            n for route, n in counts["by_route"].items() if route.startswith("GET /v2/training/jobs/")
        )
        assert counts["by_route"].get("GET /v2/training/jobs", 0) >= HOUR / INTERVAL / 2, counts["by_route"]
        assert per_job < JOBS * 4, counts["by_route"]
    else:
        # twenty jobs every 0.3 s would read 240,000 times a scaled hour: stretched to fit
        assert reads > DOCUMENTED["read"] * 0.5, counts  # the budget is used, not starved
        assert len(notes) == JOBS, notes  # once per waiting job, in its own task log
        stretched = re.search(r"each job is polled every ([\d.,]+) s instead", notes[0])
        assert "20 pollers polled every 0.3 s would make 240,000 reads/h" in notes[0], notes[0]
        assert stretched and 1.5 < float(stretched.group(1).replace(",", "")) < 2.5, notes[0]
