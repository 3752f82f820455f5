"""What the local platform's jobs cost, and spending budgets (an account balance) that cancel jobs
when they run out. Money is USD; a job costs ``usd_per_gpu_hour x gpu_count x`` the wall seconds its
trainer process lived (start → exit, or now) ``/ 3600``; pending, queued and finalizing time is free."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_training_platform.engine.records import JobRecord


def job_cost(
    job: JobRecord, usd_per_gpu_hour: float, remaining_seconds: float, now: float | None = None
) -> dict:
    """``{wall_seconds, gpu_seconds, current_usd, estimated_total_usd, usd_per_gpu_hour}`` of ``job``;
    the estimate adds ``remaining_seconds`` of run time."""
    now = time.time() if now is None else now
    end = job.exited_at or job.finished_at or now
    wall = (end - job.started_at) if job.started_at else 0.0
    usd_per_second = usd_per_gpu_hour * job.spec.gpu_count / 3600.0
    return {
        "wall_seconds": wall,
        "gpu_seconds": wall * job.spec.gpu_count,
        "current_usd": usd_per_second * wall,
        "estimated_total_usd": usd_per_second * (wall + remaining_seconds),
        "usd_per_gpu_hour": usd_per_gpu_hour,
    }


@dataclass
class Budget:
    """One platform's spending budget: ``limit_usd`` shared by its jobs; when spent, its unfinished
    jobs are cancelled with ``reason`` after recording ``events``, and new submits are refused."""

    platform: str
    limit_usd: float
    reason: str
    events: list[dict[str, Any]] = field(default_factory=list)
    exhausted_at: float | None = None


class Budgets:
    """The budgets of every platform that has one."""

    def __init__(self, usd_per_gpu_hour: float) -> None:
        self.usd_per_gpu_hour = usd_per_gpu_hour
        self._budgets: dict[str, Budget] = {}
        self._deleted_usd: dict[str, float] = {}  # per platform: what deleted jobs spent still counts

    def set(
        self, platform: str, limit_usd: float, reason: str, events: Iterable[dict[str, Any]] = ()
    ) -> None:
        self._budgets[platform] = Budget(platform, float(limit_usd), reason, [dict(e) for e in events])

    def exhausted(self, platform: str) -> Budget | None:
        """The platform's budget if it is used up, else ``None``."""
        budget = self._budgets.get(platform)
        return budget if budget is not None and budget.exhausted_at is not None else None

    def watched(self) -> set[str]:
        """Platforms whose budget still has money: their running jobs must be checked."""
        return {p for p, b in self._budgets.items() if b.exhausted_at is None}

    def forget(self, job: JobRecord, now: float) -> None:
        """``job`` (ended) is deleted: what it spent keeps counting against its platform's budget."""
        cost = job_cost(job, self.usd_per_gpu_hour, 0.0, now)["current_usd"]
        self._deleted_usd[job.spec.platform] = self._deleted_usd.get(job.spec.platform, 0.0) + cost

    def spent_usd(self, platform: str, jobs: Iterable[JobRecord], now: float) -> float:
        """USD ``platform``'s jobs (``jobs``, and those deleted) spent by ``now``."""
        return self._deleted_usd.get(platform, 0.0) + sum(
            job_cost(j, self.usd_per_gpu_hour, 0.0, now)["current_usd"]
            for j in jobs
            if j.spec.platform == platform
        )

    def left_usd(self, platform: str, jobs: Iterable[JobRecord], now: float) -> float | None:
        """USD left in ``platform``'s budget by ``now`` (never below 0), or ``None``: no budget."""
        budget = self._budgets.get(platform)
        if budget is None:
            return None
        return max(0.0, budget.limit_usd - self.spent_usd(platform, jobs, now))

    def run_out(self, jobs: Iterable[JobRecord], now: float) -> list[Budget]:
        """Budgets that ran out by ``now`` (marked exhausted here)."""
        jobs = list(jobs)
        out = []
        for budget in self._budgets.values():
            if budget.exhausted_at is not None:
                continue
            if self.spent_usd(budget.platform, jobs, now) >= budget.limit_usd:
                budget.exhausted_at = now
                out.append(budget)
        return out
