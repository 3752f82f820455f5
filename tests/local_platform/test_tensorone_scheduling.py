"""Slots, queueing, slow cancels and parent-death on the single-GPU server (``tensorone_cancel_wait_seconds=0``).

Runs after test_tensorone_api.py (file order), whose tests cancel their long jobs early."""

from __future__ import annotations

import os
import signal

import pytest

from tests.local_platform.helpers import JOBS, pid_alive, wait_dead

# timing checks on one shared pair of servers (slots, queueing, stop timings): the machine to themselves
pytestmark = pytest.mark.exclusive


def _states(record):
    return [h["state"] for h in record["state_history"]]


def test_second_job_is_queued_while_the_only_gpu_is_busy(single):
    q1, q2 = single.jobs["q1"], single.jobs["q2"]
    assert single.observed["q1"] in ("queued", "initializing")
    assert single.observed["q2"] == single.observed["slow_stop"] == single.observed["q3"] == "queued"

    assert single.wait_terminal(q1)["status"] == "completed"
    assert single.wait_terminal(q2)["status"] == "completed"
    rec1, rec2 = single.record(q1), single.record(q2)
    assert _states(rec2) == ["queued", "starting", "running", "succeeded"]
    started_q2 = next(h["at"] for h in rec2["state_history"] if h["state"] == "starting")
    assert started_q2 >= rec1["finished_at"]


def test_a_queued_job_is_cancelled_at_once_without_a_process(single):
    q3 = single.jobs["q3"]
    assert single.get(q3)["status"] == "queued"  # slow_stop holds the only GPU
    assert single.record(q3)["queue_position"] == 0
    resp = single.client.post(f"{JOBS}/{q3}/cancel", json={"reason": "not needed"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "cancelled"
    rec = single.record(q3)
    assert _states(rec) == ["queued", "cancelled"]
    assert rec["pid"] is None and rec["started_at"] is None and rec["cost"]["current_usd"] == 0
    assert rec["cancel_requests"][0]["state_at_request"] == "queued"


def test_cancel_answers_cancelling_when_the_trainer_is_still_stopping(single):
    job_id = single.jobs["slow_stop"]  # queued behind q1 and q2 since the start
    single.wait(job_id, lambda j: j["status"] == "running")
    resp = single.client.post(
        f"{JOBS}/{job_id}/cancel", json={"reason": "stop", "createFinalCheckpoint": True}
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "cancelling"
    assert body["cancellationDetails"]["finalCheckpointCreated"] is False
    assert body["cancellationDetails"]["finalCheckpointId"] is None
    assert body["cancellationDetails"]["resourcesReleased"] is False
    job = single.wait_terminal(job_id)
    assert job["status"] == "cancelled"
    assert job["message"] == "stop"
    assert job["cancellationDetails"]["finalCheckpointId"] == "ckpt_final"
    assert "stopping" in [h["state"] for h in single.record(job_id)["state_history"]]


def test_killing_the_server_kills_its_trainers(single):
    job_id = single.create(
        {"name": "orphan-candidate", "config": {"training": {"epochs": 200, "seconds_per_epoch": 2.0}}}
    )["jobId"]
    single.wait(job_id, lambda j: j["status"] == "running")  # initializing: its process may be coming up
    pid = single.record(job_id)["pid"]
    assert pid_alive(pid)
    os.kill(single.server.pid, signal.SIGKILL)  # no clean shutdown: PR_SET_PDEATHSIG must do it
    single.server.proc.wait(10)
    assert wait_dead([pid]) == []
