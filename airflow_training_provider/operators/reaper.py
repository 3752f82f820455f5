"""Orphan reaper: cancels jobs whose Airflow task instance has given up on them.

It covers the paths where no provider code runs at all: a user marks a task failed while the
owning triggerer is dead, a worker is SIGKILLed and the task is not retried, an ``on_kill`` cut
short by a triggerer exit (``docs/airflow-kill-paths.md``, "Reconciliation").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_training_provider.cancellation import CancelPolicy, reaper_decision
from airflow_training_provider.errors import JobNotFoundError, TrainingPlatformError
from airflow_training_provider.hooks.training import TrainingPlatformHook
from airflow_training_provider.identity import TaskIdentity, deployment_name
from airflow_training_provider.job_task import CONFIRM_TIMEOUT_PARAMETER, log_cancel, parameters
from airflow_training_provider.models import TrainingJob
from airflow_training_provider.task_instance_lookup import current_job_id, task_instance_state
from airflow_training_provider.timestamps import parse_timestamp

if TYPE_CHECKING:
    from airflow.sdk import Context

#: how far back the reaper looks by default on platforms that list only recent jobs unless told (PAI)
DEFAULT_LOOKBACK = timedelta(days=30)


class OrphanedJobsNotReaped(AirflowException):
    """The reaper could not handle some jobs (it handled all the others first).

    :ivar report: the reaper's report, one row per job (decision ``error`` for the failed ones).
    """

    def __init__(self, message: str, report: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.report = report


class ReapOrphanedTrainingJobsOperator(BaseOperator):
    """List the running jobs this deployment tagged; cancel (with a final checkpoint) those whose
    task instance is no longer queued, running, deferred or up for retry on them.

    Each job is handled on its own: a job that is gone from the platform by the time it is cancelled
    is nothing to do (decision ``gone``); a job the platform refuses to cancel, or whose task
    instance Airflow cannot tell, is reported (decision ``error``, with the reason) and the others
    are still handled. The task then fails, naming those jobs, so that Airflow retries or alerts.

    :param conn_id: platform connection (the platform must be able to list jobs by tag).
    :param deployment: deployment tag to reap (default: env ``AIRFLOW_TRAINING_DEPLOYMENT`` or
        ``default``) — never touches jobs of another Airflow.
    :param min_age: seconds; younger jobs are left alone (a submit may not have published its id yet).
    :param lookback: seconds (or a ``timedelta``, default 30 days): the oldest job looked at on a
        platform whose job list covers only recent jobs unless told (PAI lists the last 7 days);
        other platforms list every job whatever this says.
    :param dry_run: only report.
    :param preserve_checkpoints: a cancel keeps the job's checkpoints.
    :param create_final_checkpoint: a cancel asks for a final checkpoint (where the platform can).
    :param confirm_cancel_timeout: seconds to wait for the platform to confirm each cancel.

    Returns a list of ``{"job_id", "task", "decision", "reason"}`` dicts, one per running job seen;
    ``decision`` is ``keep``, ``cancel``, ``gone`` or ``error``.

    :raises OrphanedJobsNotReaped: after handling every job, when some could not be handled.
    """

    template_fields: Sequence[str] = ("conn_id", "deployment")
    # the parameter shadows BaseOperator.dry_run(), a method nothing in Airflow 3 calls
    dry_run: bool  # type: ignore[assignment]

    def __init__(
        self,
        *,
        conn_id: str,
        deployment: str | None = None,
        min_age: float | timedelta = 60.0,
        lookback: float | timedelta = DEFAULT_LOOKBACK,
        dry_run: bool = False,
        preserve_checkpoints: bool = True,
        create_final_checkpoint: bool = True,
        confirm_cancel_timeout: float | timedelta = 60.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.conn_id = conn_id
        self.deployment = deployment
        self.min_age = min_age.total_seconds() if isinstance(min_age, timedelta) else float(min_age)
        self.lookback = lookback.total_seconds() if isinstance(lookback, timedelta) else float(lookback)
        if self.lookback <= 0:
            raise ValueError(f"{type(self).__name__}({self.task_id}): lookback must be more than 0 seconds")
        self.dry_run = dry_run
        self.cancel_policy = parameters(
            CancelPolicy,
            f"{type(self).__name__}({self.task_id})",
            CONFIRM_TIMEOUT_PARAMETER,
            preserve_checkpoints=preserve_checkpoints,
            create_final_checkpoint=create_final_checkpoint,
            confirm_timeout=confirm_cancel_timeout,
        )

    def execute(self, context: Context) -> list[dict[str, Any]]:
        hook = TrainingPlatformHook(self.conn_id)
        deployment = self.deployment or deployment_name()
        now = datetime.now(UTC)
        since = now - timedelta(seconds=self.lookback)
        jobs = [j for j in hook.list_jobs([f"airflow-deployment:{deployment}"], since) if not j.is_terminal]
        report = []
        for job in jobs:
            identity = TaskIdentity.from_tags(job.tags)
            if identity is None:
                continue
            task = f"{identity.dag_id}/{identity.run_id}/{identity.task_id}[{identity.map_index}] try {identity.try_number}"
            created = parse_timestamp(job.created_at) if job.created_at else None  # aware UTC, as now
            if created is not None and (now - created).total_seconds() < self.min_age:
                report.append({"job_id": job.id, "task": task, "decision": "keep", "reason": "too young"})
                continue
            decision, reason = self._reap(hook, job, identity, task)
            report.append({"job_id": job.id, "task": task, "decision": decision, "reason": reason})
        failed = [row for row in report if row["decision"] == "error"]
        if failed:
            raise OrphanedJobsNotReaped(
                f"{len(failed)} of {len(report)} training jobs could not be handled (the others were): "
                + "; ".join(f"{row['job_id']} ({row['task']}): {row['reason']}" for row in failed),
                report,
            )
        return report

    def _reap(
        self, hook: TrainingPlatformHook, job: TrainingJob, identity: TaskIdentity, task: str
    ) -> tuple[str, str]:
        """Decide about one job and act: ``(decision, reason)``. Never raises: a failure is the
        decision ``error`` (logged), so the other jobs are still handled."""
        try:
            decision = reaper_decision(task_instance_state(identity), current_job_id(identity), job.id)
        except Exception as exc:  # noqa: BLE001 - Airflow's API may fail for one task instance
            reason = f"could not ask Airflow about its task instance: {exc}"
            self.log.error("Job %s (%s): %s", job.id, task, reason)
            return "error", reason
        self.log.info(
            "Job %s (%s): %s → %s", job.id, task, decision.reason, "cancel" if decision.cancel else "keep"
        )
        if not decision.cancel:
            return "keep", decision.reason
        if self.dry_run:
            return "cancel", decision.reason
        policy = self.cancel_policy
        try:
            result, final = hook.cancel_and_confirm(
                job.id, policy.request(f"orphaned: {decision.reason}"), timeout=policy.confirm_timeout
            )
        except JobNotFoundError as exc:
            self.log.info("Job %s (%s) is gone from the platform: nothing to cancel (%s)", job.id, task, exc)
            return "gone", f"{decision.reason}; the job is gone from the platform"
        except TrainingPlatformError as exc:
            reason = f"{decision.reason}; cancelling it failed: {exc}"
            self.log.error("Job %s (%s): %s", job.id, task, reason)
            return "error", reason
        log_cancel(self.log, result, final)
        return "cancel", decision.reason
