"""Scheduling on simulated GPUs: a strict FIFO queue of jobs waiting for enough free GPU slots,
and the wait estimate a queued job reports. No threads or locks here (the engine's launcher thread
and lock drive it)."""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_training_platform.engine.records import JobRecord


class GpuQueue:
    """``gpus`` slots; a job holds ``spec.gpu_count`` of them while its trainer lives."""

    def __init__(self, gpus: int) -> None:
        self.gpus = gpus
        self.in_use = 0
        self._queue: collections.deque[str] = collections.deque()

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._queue

    def __iter__(self):
        return iter(list(self._queue))

    def enqueue(self, job_id: str) -> None:
        self._queue.append(job_id)

    def remove(self, job_id: str) -> None:
        if job_id in self._queue:
            self._queue.remove(job_id)

    def clear(self) -> None:
        self._queue.clear()

    def position(self, job_id: str) -> int | None:
        return self._queue.index(job_id) if job_id in self._queue else None

    def next_startable(self, jobs: dict[str, JobRecord]) -> JobRecord | None:
        """Pop the head of the queue if enough GPUs are free for it (strict FIFO: the head waits)."""
        if not self._queue:
            return None
        job = jobs[self._queue[0]]
        if self.in_use + job.spec.gpu_count > self.gpus:
            return None
        self._queue.popleft()
        return job

    def take(self, gpu_count: int) -> None:
        self.in_use += gpu_count

    def release(self, gpu_count: int) -> None:
        self.in_use -= gpu_count

    def estimated_wait(self, job: JobRecord, live: Iterable[JobRecord], startup_estimate: float) -> float:
        """Seconds until a queued job should start (rough: when enough live jobs ahead have finished)."""
        position = self.position(job.job_id) or 0
        if position == 0 and self.gpus - self.in_use >= job.spec.gpu_count:
            return 0.0
        remaining = sorted(j.remaining_seconds(startup_estimate) for j in live)
        return remaining[min(position, len(remaining) - 1)] if remaining else 0.0
