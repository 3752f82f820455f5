"""Waiting for a job and giving up on it: shared by the submit operator and the sensor.

Three ways a task waits and is given up on, one cancel path (``hook.cancel_and_confirm``):

* deferred: the trigger polls; ``execute_complete`` maps its event; a ``timeout`` event (the
  ``execution_timeout`` deadline carried by the trigger) cancels; ``resume_execution`` on
  ``__fail__`` (trigger timeout or crash) cancels;
* on the worker: :meth:`wait_on_worker` polls; ``on_kill`` (SIGTERM, ``execution_timeout``) cancels
  and wakes it up so ``execute()`` stops — the 3.3 SIGTERM handler only calls ``on_kill`` and returns;
* lost contact (polls failing past the outage budget): the task fails, the job is NOT cancelled.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from functools import cached_property
from typing import Any

from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR
from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout

from airflow_training_provider.errors import TrainingPlatformError, TransientPlatformError
from airflow_training_provider.events import EventLog
from airflow_training_provider.hooks.training import TrainingPlatformHook, complete_cancel_result
from airflow_training_provider.hooks.transport import RetryPolicy
from airflow_training_provider.identity import TaskIdentity
from airflow_training_provider.models import CancelRequest, CancelResult, JobEvent, JobState, TrainingJob
from airflow_training_provider.progress import ProgressLog
from airflow_training_provider.task_instance_lookup import EVENT_CURSOR_XCOM_KEY, current_job_id
from airflow_training_provider.triggers.training_job import TrainingJobTrigger

#: task_state_store key holding ``{"job_id", "try_number", "platform"}`` across tries.
STATE_STORE_KEY = "training_job"
#: seconds the deferral's own timeout (a backstop) runs past the trigger's deadline.
DEFER_TIMEOUT_SLACK = 120.0


class TrainingJobFailed(AirflowException):
    """The training job ended failed, or was cancelled by someone other than this task."""


class TrainingJobCancelledByAirflow(AirflowException):
    """This task gave up on the job (killed) and cancelled it."""


class LostContactWithPlatform(AirflowException):
    """Polls failed for longer than the outage budget; the job was left running."""


def job_outcome(job: TrainingJob) -> dict[str, Any]:
    """Map a terminal job to the task's outcome: the job as JSON on success, else raise.

    :raises TrainingJobFailed: job failed (with the platform's message) or was cancelled outside
        Airflow (this task's own cancels raise before reaching here).
    """
    if job.state is JobState.SUCCEEDED:
        return job.model_dump(mode="json")
    if job.state is JobState.FAILED:
        raise TrainingJobFailed(f"Training job {job.id} failed: {job.message or job.raw_status}")
    if job.state is JobState.CANCELLED:
        why = f" ({job.message})" if job.message else ""
        raise TrainingJobFailed(f"Training job {job.id} was cancelled outside Airflow{why}")
    raise TrainingJobFailed(f"Training job {job.id} ended {job.state.value}")


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


class TrainingJobWaitMixin:
    """Waiting, deferral and cancellation for an operator that owns ``self.job_id``."""

    conn_id: str
    poll_interval: float
    outage_budget: float
    cancel_on_kill: bool
    cancel_on_mark_success: bool
    reattach_on_clear: bool
    preserve_checkpoints: bool
    create_final_checkpoint: bool
    confirm_cancel_timeout: float
    execution_timeout: timedelta | None
    defer_timeout: float | None = None

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

    def cancel_and_report(self, job_id: str, reason: str, context: Any = None) -> CancelResult:
        """Cancel ``job_id``, wait (bounded) for the platform to confirm, log and publish the result."""
        result, job = self.hook.cancel_and_confirm(
            job_id, self.cancel_request(reason), timeout=self.confirm_cancel_timeout
        )
        log_cancel(self.log, result, job)
        if context is not None:
            context["ti"].xcom_push(key="cancel_result", value=result.model_dump(mode="json"))
        return result

    # -- waiting on the worker -------------------------------------------------------------------
    def wait_on_worker(self, job: TrainingJob, context: Any = None) -> TrainingJob:
        """Poll until terminal, holding the worker slot; ``on_kill`` wakes it up to stop."""
        progress = ProgressLog(self.log)
        progress.update(job)
        events = EventLog(self.log)
        seen: list[JobEvent] = []
        while not job.is_terminal:
            if self._stop.wait(self.poll_interval):
                break
            try:
                job = self.hook.get_job(job.id, budget=self.outage_budget)
                if self.hook.dialect.capabilities.events:
                    seen = self.hook.list_events(job.id, budget=self.outage_budget)
                    events.write(events.new_events(seen), len(seen))
                if job.is_terminal:
                    job = self.hook.final_view(job, seen)
            except TransientPlatformError as exc:
                raise LostContactWithPlatform(self._lost_contact_message(exc)) from exc
            progress.update(job)
        if self._stop.is_set():
            if self._kill_result is not None and not self._kill_result.already_terminal:
                self._confirm_kill(context)
            raise TrainingJobCancelledByAirflow(f"Task was killed; training job {self.job_id} was cancelled")
        return job

    def _lost_contact_message(self, exc: Exception) -> str:
        return (
            f"Lost contact with the platform for more than {self.outage_budget:.0f} s while polling job "
            f"{self.job_id}; the job was NOT cancelled and a retry of this task re-attaches to it. Last error: {exc}"
        )

    def _confirm_kill(self, context: Any) -> None:
        """After ``on_kill`` asked for the cancel: wait (bounded) for the platform to finish it."""
        job = self.hook.wait_until(self.job_id, lambda j: j.is_terminal, self.confirm_cancel_timeout, 0.5)
        result = complete_cancel_result(self._kill_result, job)
        log_cancel(self.log, result, job)
        if context is not None:
            context["ti"].xcom_push(key="cancel_result", value=result.model_dump(mode="json"))

    def on_kill(self) -> None:
        """Worker-side kill (SIGTERM, ``execution_timeout``): cancel, then make ``execute()`` stop.

        Returns within a few seconds: on a server-initiated kill the supervisor SIGKILLs the task
        5 s after SIGTERM. So one cancel call with a short timeout here (a fresh hook: the signal may
        have interrupted a request of the main hook); confirmation happens back in ``execute()``.
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

    # -- deferral --------------------------------------------------------------------------------
    def deadline_from_now(self) -> float | None:
        """Absolute UNIX time when ``execution_timeout`` runs out for this try, if one is set."""
        if self.execution_timeout is None:
            return None
        return time.time() + self.execution_timeout.total_seconds()

    def defer_on(self, job: TrainingJob, context: Any, deadline: float | None) -> None:
        """Defer to :class:`TrainingJobTrigger`; its ``deadline`` enforces ``execution_timeout``
        (3.3.2 does not while deferred) and the deferral timeout is only a backstop."""
        trigger = TrainingJobTrigger(
            conn_id=self.conn_id,
            job_id=job.id,
            poll_interval=self.poll_interval,
            deadline=deadline,
            outage_budget=self.outage_budget,
            identity=TaskIdentity.from_context(context).__dict__,
            cancel={
                "cancel_on_kill": self.cancel_on_kill,
                "cancel_on_mark_success": self.cancel_on_mark_success,
                "reattach_on_clear": self.reattach_on_clear,
                "preserve_checkpoints": self.preserve_checkpoints,
                "create_final_checkpoint": self.create_final_checkpoint,
                "confirm_timeout": self.confirm_cancel_timeout,
            },
        )
        if self.hook.dialect.capabilities.events:
            # The trigger keeps its event cursor here; an existing key spares it a "not found" on start.
            context["ti"].xcom_push(key=EVENT_CURSOR_XCOM_KEY, value=0)
        limits = [self.defer_timeout] if self.defer_timeout else []
        if deadline is not None:  # a backstop only: the trigger's own deadline comes first
            limits.append(max(1.0, deadline - time.time()) + DEFER_TIMEOUT_SLACK)
        timeout = min(limits) if limits else None
        self.defer(trigger=trigger, method_name="execute_complete", timeout=timeout)  # type: ignore[attr-defined]

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after the trigger fired: map its event to the task's outcome."""
        status = event.get("status")
        self.job_id = event.get("job_id", self.job_id)
        if status == "terminal":  # the trigger already logged the final state
            return job_outcome(TrainingJob.model_validate(event["job"]))
        if status == "timeout":
            self.cancel_and_report(self.job_id, "Airflow execution_timeout reached", context)
            raise AirflowTaskTimeout(f"execution_timeout reached; training job {self.job_id} was cancelled")
        if status == "lost_contact":
            raise LostContactWithPlatform(event.get("message"))
        raise AirflowException(event.get("message") or f"Training job trigger failed: {event}")

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any):
        """On ``__fail__`` (deferral timed out, trigger crashed) cancel the job before failing.

        The job id comes from XCom: ``next_kwargs`` are replaced by the error on this path.
        """
        if next_method == TRIGGER_FAIL_REPR and self.cancel_on_kill:
            job_id = current_job_id(TaskIdentity.from_context(context))
            if job_id:
                self.job_id = job_id
                self.log.warning(
                    "Deferral failed (%s): cancelling training job %s",
                    (next_kwargs or {}).get("error"),
                    job_id,
                )
                self.cancel_and_report(
                    job_id, "Airflow gave up waiting (trigger timeout or failure)", context
                )
        return super().resume_execution(next_method, next_kwargs, context)  # type: ignore[misc]
