"""Operators: submit a training job (and wait for it), cancel one.

The submit operator's path: render + validate the spec → find an earlier try's job (re-attach,
adopt, or cancel it after a clear) or submit one tagged with the task instance → job id to XCom and
the task state store → one status check → wait (deferred, or on the worker) → the final job as the
return value, or a failure that says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.configuration import conf

from airflow_training_provider.errors import JobNotFoundError
from airflow_training_provider.hooks.training import TrainingPlatformHook
from airflow_training_provider.identity import TaskIdentity
from airflow_training_provider.kill_decisions import is_retry
from airflow_training_provider.models import CancelRequest, JobState, TrainingJob
from airflow_training_provider.operators._waiting import (
    STATE_STORE_KEY,
    LostContactWithPlatform,
    TrainingJobCancelledByAirflow,
    TrainingJobFailed,
    TrainingJobWaitMixin,
    job_outcome,
    log_cancel,
)
from airflow_training_provider.progress import describe
from airflow_training_provider.task_instance_lookup import JOB_ID_XCOM_KEY

#: seconds a try started by a clear waits for the old trigger's on_kill to cancel the old job.
CLEAR_GRACE_SECONDS = 10.0

__all__ = [
    "CancelTrainingJobOperator",
    "LostContactWithPlatform",
    "SubmitTrainingJobOperator",
    "TrainingJobCancelledByAirflow",
    "TrainingJobFailed",
    "job_outcome",
]


class SubmitTrainingJobOperator(TrainingJobWaitMixin, BaseOperator):
    """Submit a training job and (by default) wait for it to end.

    :param conn_id: connection of the platform; its type (``tensorone``...) picks the wire format.
    :param spec: the platform's create-job body (templated). TensorOne: ``name``, ``datasetId``,
        ``config`` ... (platforms.md §1.3). Validated before submit; a bad field fails the task with
        :class:`~airflow_training_provider.errors.InvalidJobSpecError` naming it.
    :param wait_for_completion: wait for a terminal state; if ``False`` return right after submit.
    :param deferrable: wait in the triggerer, freeing the worker slot (default
        ``[operators] default_deferrable``).
    :param poll_interval: seconds between status polls.
    :param outage_budget: seconds of failed polls tolerated before the task fails with "lost
        contact" (the job is never cancelled for that; the retry re-attaches).
    :param cancel_on_kill: cancel the job when Airflow gives up on the task.
    :param cancel_on_mark_success: also cancel when a user marks the deferred task success.
    :param reattach_on_clear: after a clear, re-attach to an earlier try's running job instead of
        cancelling it and submitting a new one.
    :param preserve_checkpoints: on cancel, keep the job's checkpoints.
    :param create_final_checkpoint: on cancel, ask the job to save a final checkpoint (where the
        platform can).
    :param confirm_cancel_timeout: seconds to wait for the platform to confirm a cancel.
    :param resume_from_checkpoint: a retry of this task instance whose earlier job failed or was
        cancelled starts from that job's last saved checkpoint (platforms that can resume); a new
        DAG run never does.
    :param defer_timeout: seconds the task may stay deferred (Airflow's trigger timeout); when it
        runs out the job is cancelled and the task fails. ``execution_timeout`` is enforced too,
        deferred or not.

    XCom: ``job_id`` and ``console_url`` right after submit (before waiting); ``cancel_result``
    when this task cancelled the job. Return value: the final job
    (:class:`~airflow_training_provider.models.TrainingJob` as JSON). The job id is also kept in
    the task state store (key ``training_job``) for the next try.
    """

    template_fields: Sequence[str] = ("spec", "conn_id")
    template_fields_renderers = {"spec": "json"}
    ui_color = "#fde2c8"

    def __init__(
        self,
        *,
        conn_id: str = TrainingPlatformHook.default_conn_name,
        spec: dict[str, Any],
        wait_for_completion: bool = True,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 30.0,
        outage_budget: float = 600.0,
        cancel_on_kill: bool = True,
        cancel_on_mark_success: bool = False,
        reattach_on_clear: bool = False,
        preserve_checkpoints: bool = True,
        create_final_checkpoint: bool = True,
        confirm_cancel_timeout: float = 60.0,
        defer_timeout: float | None = None,
        resume_from_checkpoint: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.conn_id = conn_id
        self.spec = spec
        self.defer_timeout = defer_timeout
        self.resume_from_checkpoint = resume_from_checkpoint
        self._resume_from: tuple[str, Any] | None = None
        self.wait_for_completion = wait_for_completion
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.outage_budget = outage_budget
        self.cancel_on_kill = cancel_on_kill
        self.cancel_on_mark_success = cancel_on_mark_success
        self.reattach_on_clear = reattach_on_clear
        self.preserve_checkpoints = preserve_checkpoints
        self.create_final_checkpoint = create_final_checkpoint
        self.confirm_cancel_timeout = confirm_cancel_timeout
        self._init_wait_state()

    def execute(self, context: Any) -> dict[str, Any]:
        deadline = self.deadline_from_now()
        hook = self.hook
        spec = hook.dialect.validate_spec(self.spec)
        identity = TaskIdentity.from_context(context)
        job = self.previous_job_to_resume(context, identity)
        if job is None:
            if self._resume_from is not None:
                spec = hook.dialect.resume_spec(spec, *self._resume_from) or spec
            job = hook.create_job(hook.dialect.with_tags(spec, identity.tags()))
            self.log.info("Submitted training job %s on %s: %s", job.id, hook.dialect.name, job.console_url)
        self.remember(context, identity, job)
        if not self.wait_for_completion:
            return job.model_dump(mode="json")

        job = hook.get_job(job.id, budget=self.outage_budget)  # one check: no deferral for a job that ended
        if job.is_terminal:
            job = hook.final_view(job)
            self.log.info("Training job %s", describe(job))
            return job_outcome(job)
        if self.deferrable:
            self.defer_on(job, context, deadline)
        return job_outcome(self.wait_on_worker(job, context))

    def remember(self, context: Any, identity: TaskIdentity, job: TrainingJob) -> None:
        """Publish the job before waiting: XCom (this try) and the task state store (next tries)."""
        self.job_id = job.id
        ti = context["ti"]
        ti.xcom_push(key=JOB_ID_XCOM_KEY, value=job.id)
        ti.xcom_push(key="console_url", value=job.console_url)
        store = context.get("task_state_store")
        if store is not None:
            store.set(
                STATE_STORE_KEY,
                {"job_id": job.id, "try_number": identity.try_number, "platform": self.hook.dialect.name},
            )

    def previous_job_to_resume(self, context: Any, identity: TaskIdentity) -> TrainingJob | None:
        """What to do with an earlier try's job, if one exists.

        * retry (or worker crash): running → re-attach; succeeded → adopt its result;
          failed / cancelled / unknown → ``None`` (submit afresh);
        * first try after a clear: running → cancel it (confirmed) and submit afresh, unless
          ``reattach_on_clear`` — then re-attach to it.
        """
        previous_id = self._previous_job_id(context, identity)
        if previous_id is None:
            return None
        try:
            job = self.hook.get_job(previous_id, budget=self.outage_budget)
        except JobNotFoundError:
            return None
        ti = context["ti"]
        retry = is_retry(ti.try_number, ti.max_tries, self.retries or 0)
        if retry or self.reattach_on_clear:
            if not job.is_terminal:
                self.log.info(
                    "Re-attaching to training job %s of an earlier try (%s)", job.id, job.state.value
                )
                return job
            if job.state is JobState.SUCCEEDED and retry:
                self.log.info("Training job %s of an earlier try already succeeded: adopting it", job.id)
                return job
            if retry and self.resume_from_checkpoint:
                self._remember_resume_point(job)
            return None
        if not job.is_terminal:
            job = self._await_cancel_by_old_trigger(job)
        if not job.is_terminal:
            self.log.warning("Task was cleared: cancelling training job %s of an earlier try first", job.id)
            self.cancel_and_report(job.id, "Airflow task was cleared; a new try starts")
        return None

    def _await_cancel_by_old_trigger(self, job: TrainingJob) -> TrainingJob:
        """After a clear the old try's trigger cancels its job a few seconds later (its ``on_kill``).
        Give it that time, so the job is cancelled once; the caller cancels if nobody did."""
        hook, budget = self.hook, self.outage_budget
        job = hook.wait_until(
            job.id, lambda j: j.state is JobState.STOPPING or j.is_terminal, CLEAR_GRACE_SECONDS, 1.0, budget
        )
        if job.state is JobState.STOPPING:
            job = hook.wait_until(job.id, lambda j: j.is_terminal, self.confirm_cancel_timeout, 1.0, budget)
        if job.is_terminal:
            self.log.info("Training job %s of the earlier try ended %s", job.id, job.state.value)
        return job

    def _remember_resume_point(self, job: TrainingJob) -> None:
        """A retry after a failed/cancelled job starts from that job's last saved checkpoint."""
        checkpoints = job.checkpoints or self.hook.list_checkpoints(job.id)
        if checkpoints:
            self._resume_from = (job.id, checkpoints[-1])
            self.log.info("The retry resumes from checkpoint %s of job %s", checkpoints[-1].id, job.id)

    def _previous_job_id(self, context: Any, identity: TaskIdentity) -> str | None:
        store = context.get("task_state_store")
        record = store.get(STATE_STORE_KEY) if store is not None else None
        if isinstance(record, dict) and record.get("job_id"):
            return str(record["job_id"])
        if not self.hook.dialect.capabilities.list_jobs:
            return None
        # The worker may have died between submit and the store write: find the job by its tags.
        jobs = [j for j in self.hook.list_jobs(identity.task_tags()) if not j.is_terminal]
        return jobs[-1].id if jobs else None


class CancelTrainingJobOperator(BaseOperator):
    """Cancel a training job and wait (bounded) until the platform confirms it stopped.

    :param conn_id: platform connection.
    :param job_id: the job to cancel (templated, e.g. ``{{ ti.xcom_pull('train', key='job_id') }}``).
    :param reason: text recorded on the platform.
    :param preserve_checkpoints: keep checkpoints (platforms with that flag).
    :param create_final_checkpoint: save a final checkpoint first (platforms that can).
    :param force: stop at once; may lose data.
    :param confirm_timeout: seconds to wait for a terminal state.

    Returns the :class:`~airflow_training_provider.models.CancelResult` as JSON. Cancelling a job
    that already ended is not an error (``already_terminal: true``).
    """

    template_fields: Sequence[str] = ("job_id", "conn_id", "reason")

    def __init__(
        self,
        *,
        job_id: str,
        conn_id: str = TrainingPlatformHook.default_conn_name,
        reason: str = "cancelled by Airflow",
        preserve_checkpoints: bool = True,
        create_final_checkpoint: bool = True,
        force: bool = False,
        confirm_timeout: float = 120.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_id = job_id
        self.conn_id = conn_id
        self.reason = reason
        self.preserve_checkpoints = preserve_checkpoints
        self.create_final_checkpoint = create_final_checkpoint
        self.force = force
        self.confirm_timeout = confirm_timeout

    def execute(self, context: Any) -> dict[str, Any]:
        hook = TrainingPlatformHook(self.conn_id)
        request = CancelRequest(
            reason=self.reason,
            preserve_checkpoints=self.preserve_checkpoints,
            create_final_checkpoint=self.create_final_checkpoint,
            force=self.force,
        )
        result, job = hook.cancel_and_confirm(self.job_id, request, timeout=self.confirm_timeout)
        log_cancel(self.log, result, job)
        return result.model_dump(mode="json")
