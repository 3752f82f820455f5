"""The job API both drivers offer, written once.

Each method runs one lifecycle operation (:mod:`airflow_training_provider.lifecycle.operations`)
through the host's ``drive``: on the sync hook a method returns its result, on the async client it
returns an awaitable of it. The operations hold the logic; this is only their public face.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_training_provider.lifecycle.operations import (
    LOG_PAGES_AT_END,
    JobOperations,
    LogFollow,
    NewLogLines,
    Operation,
)
from airflow_training_provider.models import CancelRequest, JobEvent, TrainingJob


class JobApi:
    """Mixin: ``ops`` (the platform's :class:`JobOperations`) and ``drive(operation)`` come from the host.

    Errors: :class:`~airflow_training_provider.errors.TrainingPlatformError` and subclasses
    (``TransientPlatformError`` once retries or the budget are spent, ``JobNotFoundError``,
    ``JobStateConflictError``, ``PlatformAuthError``).
    """

    if TYPE_CHECKING:  # the host's: an attribute or a cached property

        @property
        def ops(self) -> JobOperations: ...

    def drive(self, operation: Operation[Any], report: Callable[[Any], Any] | None = None) -> Any:
        raise NotImplementedError

    def create_job(self, spec: dict[str, Any], tags: list[str] | None = None):
        """Submit a job. ``spec`` must already be validated (``Dialect.validate_spec``) and tagged
        with ``tags`` (``Dialect.with_tags``). Returns the new :class:`TrainingJob` (or, on platforms
        where the client names jobs, this try's job if an earlier send of the create landed)."""
        return self.drive(self.ops.create_job(spec, tags))

    def get_job(self, job_id: str, budget: float | None = None):
        """Job ``job_id`` now (:class:`TrainingJob`); ``budget``: seconds to ride out transient errors.

        :raises JobNotFoundError: the platform does not know the job.
        """
        return self.drive(self.ops.get_job(job_id, budget))

    def list_events(self, job_id: str, budget: float | None = None):
        """The job's platform events (:class:`JobEvent` list), oldest first; ``[]`` without events."""
        return self.drive(self.ops.list_events(job_id, budget))

    def list_checkpoints(self, job_id: str):
        """The job's checkpoints (:class:`Checkpoint` list), oldest first."""
        return self.drive(self.ops.list_checkpoints(job_id))

    def final_view(self, job: TrainingJob, events: list[JobEvent] | None = None):
        """A terminal job completed with its checkpoints and the failure reason from its events."""
        return self.drive(self.ops.final_view(job, events))

    def snapshot(self, job_id: str, budget: float | None = None):
        """Job ``job_id`` now with its checkpoints, metric history and events (:class:`TrainingJob`),
        running or not — what the UI's "Training job" view shows. Up to four calls."""
        return self.drive(self.ops.snapshot(job_id, budget))

    def list_jobs(self, tags: list[str], created_after: datetime | None = None):
        """Jobs carrying every one of ``tags`` (platforms with ``capabilities.list_jobs``), oldest
        first; ``created_after`` (UTC) where the platform's list covers only a recent window unless
        told (PAI). A listed row that does not read as a job is left out (logged)."""
        return self.drive(self.ops.list_jobs(tags, created_after))

    def cancel_job(self, job_id: str, cancel: CancelRequest | None = None):
        """Ask for a cancel (:class:`CancelResult`); a job already ended or stopping is not cancelled again."""
        return self.drive(self.ops.cancel_job(job_id, cancel or CancelRequest()))

    def cancel_and_confirm(
        self, job_id: str, cancel: CancelRequest | None = None, timeout: float = 120.0, interval: float = 1.0
    ):
        """Cancel, then poll every ``interval`` s until the platform reports a terminal state (at most
        ``timeout`` s). Returns ``(CancelResult, TrainingJob)``: the result completed with the final
        checkpoint, metrics and cost, and the last job seen."""
        return self.drive(self.ops.cancel_and_confirm(job_id, cancel or CancelRequest(), timeout, interval))

    def wait_until(
        self,
        job_id: str,
        until: Callable[[TrainingJob], bool],
        timeout: float,
        interval: float = 1.0,
        budget: float | None = None,
    ):
        """Poll every ``interval`` s until ``until(job)`` or ``timeout`` s passed; the last job seen."""
        return self.drive(self.ops.wait_until(job_id, until, timeout, interval, budget))

    def program_log(self, job: TrainingJob, pages: int = LOG_PAGES_AT_END) -> list[str]:
        """The lines ``job``'s training program printed, from the start, up to ``pages`` pages of
        the platform's log API (``[]`` where the dialect serves no program logs; an auxiliary read:
        a page that fails ends it with what was read)."""
        lines: list[str] = []

        def keep(step: Any) -> None:
            if isinstance(step, NewLogLines):
                lines.extend(step.lines)

        self.drive(self.ops.follow_log(job, LogFollow(), pages), keep)
        return lines
