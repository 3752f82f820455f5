"""Operators: submit a training job (and wait for it), cancel one.

The submit operator's path: render + validate the spec → submit → job id and console URL to XCom →
one status check → wait (deferred in the triggerer, or polling on the worker) → the final job as
the return value, or a failure that says why. Whoever gives up on the task (worker ``on_kill``, the
deferral deadline) cancels through the hook's one ``cancel_and_confirm`` path.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowException

from airflow_training_provider.errors import TrainingPlatformError, TransientPlatformError
from airflow_training_provider.hooks.training import TrainingPlatformHook, complete_cancel_result
from airflow_training_provider.hooks.transport import RetryPolicy
from airflow_training_provider.models import CancelRequest, CancelResult, JobState, TrainingJob
from airflow_training_provider.progress import ProgressLog, describe
from airflow_training_provider.triggers.training_job import TrainingJobTrigger


class TrainingJobFailed(AirflowException):
    """The training job ended failed, or was cancelled by someone other than this task."""


class TrainingJobCancelledByAirflow(AirflowException):
    """This task gave up on the job (killed, timed out) and cancelled it."""


def job_outcome(job: TrainingJob, *, cancelled_by_task: bool = False) -> dict[str, Any]:
    """Map a terminal job to the task's outcome: the job as JSON on success, else raise.

    :raises TrainingJobFailed: job failed (with the platform's message) or was cancelled outside
        Airflow.
    """
    if job.state is JobState.SUCCEEDED:
        return job.model_dump(mode="json")
    if job.state is JobState.FAILED:
        raise TrainingJobFailed(f"Training job {job.id} failed: {job.message or job.raw_status}")
    if job.state is JobState.CANCELLED and not cancelled_by_task:
        why = f" ({job.message})" if job.message else ""
        raise TrainingJobFailed(f"Training job {job.id} was cancelled outside Airflow{why}")
    raise TrainingJobFailed(f"Training job {job.id} ended {job.state.value}")


class _TrainingJobWaitMixin:
    """Waiting, deferral and cancellation shared by the submit operator and the sensor."""

    conn_id: str
    poll_interval: float
    outage_budget: float
    cancel_on_kill: bool
    preserve_checkpoints: bool
    create_final_checkpoint: bool
    confirm_cancel_timeout: float

    def _init_wait_state(self) -> None:
        self.job_id: str | None = None
        self._stop = threading.Event()
        self._kill_result: CancelResult | None = None

    @cached_property
    def hook(self) -> TrainingPlatformHook:
        return TrainingPlatformHook(self.conn_id)

    def cancel_request(self, reason: str) -> CancelRequest:
        return CancelRequest(
            reason=reason,
            preserve_checkpoints=self.preserve_checkpoints,
            create_final_checkpoint=self.create_final_checkpoint,
        )

    def cancel_and_report(self, hook: TrainingPlatformHook, reason: str) -> CancelResult:
        """Cancel the job, wait (bounded) for the platform to confirm, log what was saved."""
        result, job = hook.cancel_and_confirm(
            self.job_id, self.cancel_request(reason), timeout=self.confirm_cancel_timeout
        )
        log_cancel(self.log, result, job)
        return result

    def wait_on_worker(self, job: TrainingJob) -> TrainingJob:
        """Poll until terminal, holding the worker slot; ``on_kill`` wakes it up to stop."""
        progress = ProgressLog(self.log)
        progress.update(job)
        while not job.is_terminal:
            if self._stop.wait(self.poll_interval):
                break
            try:
                job = self.hook.get_job(job.id, budget=self.outage_budget)
            except TransientPlatformError as exc:
                raise AirflowException(
                    f"Lost contact with the platform for more than {self.outage_budget:.0f} s while polling "
                    f"job {job.id}; the job was NOT cancelled and a retry re-attaches to it: {exc}"
                ) from exc
            progress.update(job)
        if self._stop.is_set():
            # The 3.3 SIGTERM handler only calls on_kill and returns: stop execute() here.
            if self._kill_result is not None and not self._kill_result.already_terminal:
                self._confirm_kill()
            raise TrainingJobCancelledByAirflow(f"Task was killed; training job {self.job_id} was cancelled")
        return job

    def _confirm_kill(self) -> None:
        """After ``on_kill`` asked for the cancel: wait (bounded) for the platform to finish it."""
        deadline = time.monotonic() + self.confirm_cancel_timeout
        job = self.hook.get_job(self.job_id)
        while not job.is_terminal and time.monotonic() < deadline:
            time.sleep(1.0)
            job = self.hook.get_job(self.job_id)
        log_cancel(self.log, complete_cancel_result(self._kill_result, job), job)

    def defer_on(self, job: TrainingJob, method_name: str = "execute_complete") -> None:
        self.defer(  # type: ignore[attr-defined]
            trigger=TrainingJobTrigger(
                conn_id=self.conn_id,
                job_id=job.id,
                poll_interval=self.poll_interval,
                outage_budget=self.outage_budget,
            ),
            method_name=method_name,
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after the trigger fired: map its event to the task's outcome."""
        status = event.get("status")
        self.job_id = event.get("job_id", self.job_id)
        if status == "terminal":
            job = TrainingJob.model_validate(event["job"])
            self.log.info("Training job %s", describe(job))
            return job_outcome(job)
        if status == "timeout":
            self.cancel_and_report(self.hook, reason="Airflow execution_timeout reached")
            raise TrainingJobCancelledByAirflow(f"Training job {self.job_id}: {event.get('message')}")
        raise AirflowException(event.get("message") or f"Training job trigger failed: {event}")

    def on_kill(self) -> None:
        """Worker-side kill (SIGTERM, ``execution_timeout``): cancel, then make ``execute()`` stop.

        Must return within a few seconds: on a server-initiated kill the supervisor SIGKILLs the
        task 5 s after SIGTERM. So: one cancel call with a short timeout here (a fresh hook, since
        the signal may interrupt a request of the main hook); confirmation happens in ``execute()``.
        """
        self._stop.set()
        if not (self.job_id and self.cancel_on_kill):
            return
        hook = TrainingPlatformHook(self.conn_id, RetryPolicy(call_timeout=4.0, max_attempts=1))
        try:
            self._kill_result = hook.cancel_job(self.job_id, self.cancel_request("Airflow task was killed"))
        except TrainingPlatformError as exc:
            self.log.error("Cancelling training job %s on kill failed: %s", self.job_id, exc)
            return
        r = self._kill_result
        self.log.warning(
            "Task killed: cancel of training job %s requested (state %s, final checkpoint %s)",
            self.job_id,
            r.state.value,
            r.final_checkpoint_id or "pending",
        )


def log_cancel(log: Any, result: CancelResult, job: TrainingJob) -> None:
    if result.already_terminal:
        log.info(
            "Training job %s had already ended (%s); nothing to cancel", result.job_id, result.state.value
        )
        return
    log.warning(
        "Training job %s cancelled: state %s, final checkpoint %s (%s), final metrics %s, cost $%s",
        result.job_id,
        job.state.value,
        result.final_checkpoint_id,
        result.final_checkpoint_path,
        result.final_metrics,
        result.cost.total_usd,
    )


class SubmitTrainingJobOperator(_TrainingJobWaitMixin, BaseOperator):
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
        contact" (the job is never cancelled for that).
    :param cancel_on_kill: cancel the job when the task is killed.
    :param preserve_checkpoints: on cancel, keep the job's checkpoints.
    :param create_final_checkpoint: on cancel, ask the job to save a final checkpoint (where the
        platform can).
    :param confirm_cancel_timeout: seconds to wait for the platform to confirm a cancel.

    XCom: ``job_id`` and ``console_url`` are pushed right after submit (before waiting). Return
    value: the final job (:class:`~airflow_training_provider.models.TrainingJob` as JSON: ``state``,
    ``metrics``, ``checkpoints``, ``cost``...).
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
        preserve_checkpoints: bool = True,
        create_final_checkpoint: bool = True,
        confirm_cancel_timeout: float = 60.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.conn_id = conn_id
        self.spec = spec
        self.wait_for_completion = wait_for_completion
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.outage_budget = outage_budget
        self.cancel_on_kill = cancel_on_kill
        self.preserve_checkpoints = preserve_checkpoints
        self.create_final_checkpoint = create_final_checkpoint
        self.confirm_cancel_timeout = confirm_cancel_timeout
        self._init_wait_state()

    def execute(self, context: Any) -> dict[str, Any]:
        hook = self.hook
        spec = hook.dialect.validate_spec(self.spec)
        job = hook.create_job(spec)
        self.job_id = job.id
        ti = context["ti"]
        ti.xcom_push(key="job_id", value=job.id)
        ti.xcom_push(key="console_url", value=job.console_url)
        self.log.info("Submitted training job %s on %s: %s", job.id, hook.dialect.name, job.console_url)
        if not self.wait_for_completion:
            return job.model_dump(mode="json")

        job = hook.get_job(job.id, budget=self.outage_budget)  # one check: no deferral for a job that ended
        if job.is_terminal:
            self.log.info("Training job %s", describe(job))
            return job_outcome(job)
        if self.deferrable:
            self.defer_on(job)
        job = self.wait_on_worker(job)
        return job_outcome(job)


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
