"""A client of the local platform's ``/_local`` endpoints: its own job records, fault rules, API
quotas and request counts.

The one way tests, the demo and the benchmark read what the platform saw (submits, cancel
requests with their arrival times, states, checkpoint files) and inject faults::

    control = LocalPlatformControl(server.url)
    job = control.wait_job(job_id, {"succeeded", "failed"})
    control.add_fault(method="GET", path_prefix=f"/v2/training/jobs/{job_id}", status=503, count=2)
    control.set_quotas({"tensorone": {"read": {"limit": 500, "window_seconds": 3600}}})
    control.requests()["tensorone"]["by_route"]["GET /v2/training/jobs/{job_id}"]
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

import requests


class LocalPlatformControl:
    """``/_local`` of the platform at ``url`` (``http://127.0.0.1:PORT``); ``timeout`` per call (s)."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = requests.request(method, f"{self.url}/_local{path}", timeout=self.timeout, **kwargs)
        response.raise_for_status()
        # the stdlib's json: a diverged job's NaN arrives as the bare token NaN, which the simplejson
        # that requests prefers when installed refuses (its allow_nan is off since 3.19)
        return json.loads(response.text) if response.content else None

    # -- jobs ------------------------------------------------------------------------------------
    def jobs(
        self, tags: Iterable[str] = (), platform: str | None = None, name: str | None = None
    ) -> list[dict]:
        """Full job records, oldest first, carrying every one of ``tags`` (and of ``platform``/``name``)."""
        params: dict[str, Any] = {"tag": list(tags)}
        if platform is not None:
            params["platform"] = platform
        found = self._call("GET", "/jobs", params=params)["jobs"]  # filtered by the server
        return [
            job for job in sorted(found, key=lambda j: j["created_at"]) if name is None or job["name"] == name
        ]

    def job(self, job_id: str) -> dict:
        """One job's full record. :raises requests.HTTPError: unknown job (404)."""
        return self._call("GET", f"/jobs/{job_id}")

    def wait_job(
        self,
        job_id: str,
        until: set[str] | Callable[[dict], bool],
        timeout: float = 90.0,
        interval: float = 0.2,
    ) -> dict:
        """Poll the record until its ``state`` is in ``until`` (or ``until(record)``); the record.

        :raises AssertionError: not reached within ``timeout`` seconds.
        """
        done = until if callable(until) else (lambda job: job["state"] in until)
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if done(job):
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} never reached {until}: it is {job['state']}")
            time.sleep(interval)

    def console_cancel(self, job_id: str, reason: str = "stopped from the console") -> dict:
        """Cancel a job as a person would from the platform's console: outside Airflow, any platform."""
        return self._call(
            "POST", f"/jobs/{job_id}/cancel", json={"reason": reason, "create_final_checkpoint": True}
        )

    def backdate(self, job_id: str, seconds: float) -> dict:
        """Move the job's creation time ``seconds`` into the past (a job "created 8 days ago"); its record."""
        return self._call("POST", f"/jobs/{job_id}/backdate", json={"seconds": seconds})

    @staticmethod
    def accepted_cancels(job: dict, initiator: str | None = "user") -> list[dict]:
        """The job's accepted cancel requests (from ``initiator``; ``None``: from anyone), oldest first."""
        return [
            r
            for r in job["cancel_requests"]
            if r.get("outcome") == "accepted"
            and (initiator is None or r.get("initiator", "user") == initiator)
        ]

    # -- faults and settings ------------------------------------------------------------------------
    def add_fault(self, **rule: Any) -> dict:
        """Add a fault rule (see :mod:`airflow_training_platform.faults`)."""
        return self._call("POST", "/faults", json=rule)

    def faults(self) -> list[dict]:
        return self._call("GET", "/faults")["faults"]

    def clear_faults(self, path_prefix: str | None = None, rule_id: str | None = None) -> None:
        """Remove every rule, or only the rules for exactly ``path_prefix``, or only rule ``rule_id``."""
        params = {"path_prefix": path_prefix} if path_prefix else {"id": rule_id} if rule_id else None
        self._call("DELETE", "/faults", params=params)

    def fault(self, rule_id: str) -> dict:
        """One rule as it stands now (``fired``: how often it fired)."""
        return next(r for r in self.faults() if r["id"] == rule_id)

    def settings(self) -> dict:
        return self._call("GET", "/settings")

    # -- quotas and request counts (see :mod:`airflow_training_platform.quotas`) ---------------------
    def quotas(self) -> dict:
        """``{platform: {class: {limit, window_seconds, used, remaining, reset_at}}}``."""
        return self._call("GET", "/quotas")["quotas"]

    def set_quotas(self, quotas: dict[str, Any]) -> dict:
        """Replace every quota (``{platform: {class: {limit, window_seconds}}}`` or a preset name such
        as ``{"tensorone": "documented"}``); new windows open. Returns :meth:`quotas`.

        :raises requests.HTTPError: an unreadable specification (400, its message says why)."""
        return self._call("PUT", "/quotas", json=quotas)["quotas"]

    def clear_quotas(self) -> None:
        """Remove every quota: nothing is throttled."""
        self._call("DELETE", "/quotas")

    def requests(self) -> dict[str, dict]:
        """Request counts per platform: ``{platform: {total, throttled, by_class, throttled_by_class,
        by_route, by_job}}`` (a platform that received nothing is absent)."""
        return self._call("GET", "/requests")["platforms"]

    def reset_requests(self) -> None:
        """Forget every request count."""
        self._call("DELETE", "/requests")
