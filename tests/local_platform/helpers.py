"""Helpers for the local training platform tests (HTTP client wrapper, process checks)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.server import LocalPlatformServer

API_KEY = "tpo_test_local"
TERMINAL = {"completed", "failed", "cancelled"}
JOBS = "/v2/training/jobs"


@dataclass
class Platform:
    """A running server plus an authenticated client and the ids of the jobs submitted up front."""

    server: LocalPlatformServer
    client: httpx.Client
    jobs: dict[str, str] = field(default_factory=dict)
    observed: dict[str, str] = field(default_factory=dict)  # job statuses right after the up-front submits

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        resp = self.client.post(JOBS, json=body)
        assert resp.status_code == 201, resp.text
        return resp.json()

    def get(self, job_id: str, **params: Any) -> dict[str, Any]:
        resp = self.client.get(f"{JOBS}/{job_id}", params=params)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def record(self, job_id: str) -> dict[str, Any]:
        """The platform's own full record of the job (``/_local/jobs/{id}``)."""
        return LocalPlatformControl(self.server.url).job(job_id)

    def wait(
        self, job_id: str, until: Callable[[dict[str, Any]], bool], timeout: float = 60.0
    ) -> dict[str, Any]:
        """Poll GET job until ``until(job)``; fails the test after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if until(job):
                return job
            assert time.monotonic() < deadline, (
                f"timed out waiting on {job_id}: {job['status']} {job['progress']}"
            )
            time.sleep(0.2)

    def wait_terminal(self, job_id: str, timeout: float = 60.0) -> dict[str, Any]:
        return self.wait(job_id, lambda j: j["status"] in TERMINAL, timeout)


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a live (non-zombie) trainer process."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read()
    except OSError:
        return False
    return state != "Z" and b"airflow_training_platform.trainer" in cmdline


def wait_dead(pids: list[int], timeout: float = 10.0) -> list[int]:
    """Wait until none of ``pids`` is alive; returns those still alive after ``timeout``."""
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if pid_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if pid_alive(p)]
    return alive


def checkpoint_files(record: dict[str, Any]) -> list[str]:
    """Checkpoint files on disk in a job's directory."""
    ckpt_dir = os.path.join(record["job_dir"], "checkpoints")
    return sorted(f for f in os.listdir(ckpt_dir) if f.endswith(".joblib")) if os.path.isdir(ckpt_dir) else []
