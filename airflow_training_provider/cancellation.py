"""Who may cancel a job, and when: one :class:`CancelPolicy` value and pure decisions.

Every "should I cancel?" in the provider asks the policy: the worker's ``on_kill``, the trigger at
the ``execution_timeout`` deadline, ``execute_complete`` after that deadline, ``resume_execution``
after a failed deferral, the trigger's verified ``on_kill``, a new try that finds an earlier try's
job, and the orphan reaper. The policy also builds every :class:`CancelRequest`.

Inputs are what Airflow says about the task instance now (its state, the job id its current try
published in XCom) and what the caller knows. The Airflow behaviour behind these rules is in
``docs/airflow-kill-paths.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from airflow_training_provider.models import CancelRequest, JobState, TrainingJob


def to_seconds(value: Any) -> Any:
    """A ``timedelta`` as float seconds; numbers pass through (pydantic checks the rest)."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool):
        raise ValueError("expected seconds (a number or a timedelta), got a boolean")
    return value


Seconds = Annotated[float, BeforeValidator(to_seconds), Field(ge=0)]
"""A duration in seconds; a ``datetime.timedelta`` is accepted and converted."""

#: TI states of a task instance cleared while its try ran (``restarting``) or after it (a new try
#: being scheduled).
CLEARED_STATES = frozenset({"restarting", "scheduled", "queued", "none"})
#: TI states in which a try is alive (or about to be) and may own a job.
LIVE_STATES = frozenset(
    {"scheduled", "queued", "running", "deferred", "up_for_retry", "up_for_reschedule", "restarting"}
)


class GiveUp(StrEnum):
    """Why Airflow gives up on a job; the value is the reason recorded on the platform's cancel."""

    WORKER_KILLED = "Airflow task was killed"
    EXECUTION_TIMEOUT = "Airflow execution_timeout reached"
    DEFER_TIMEOUT = "Airflow defer_timeout reached"
    DEFERRAL_FAILED = "Airflow gave up waiting (trigger timeout or failure)"
    TASK_KILLED = "Airflow task was killed (marked failed, cleared or its DAG run ended)"
    CLEARED = "Airflow task was cleared; a new try starts"
    START_FAILED = "Airflow task failed before it could wait for the job"

    @classmethod
    def at_deadline(cls, kind: str) -> GiveUp:
        """The give-up of a task deadline that passed with the job running: ``defer_timeout`` →
        :attr:`DEFER_TIMEOUT`, ``execution_timeout`` → :attr:`EXECUTION_TIMEOUT`.

        :raises ValueError: any other kind (a sensor's own ``timeout`` never gives up on a job).
        """
        if kind == "defer_timeout":
            return cls.DEFER_TIMEOUT
        if kind == "execution_timeout":
            return cls.EXECUTION_TIMEOUT
        raise ValueError(
            f"deadline {kind!r} gives up on no job (expected execution_timeout or defer_timeout)"
        )


@dataclass(frozen=True)
class Decision:
    """``cancel`` or not, and why (for the log); ``interrupted``: the job is kept because the
    try was merely interrupted (its worker stopped), not because of a choice about a give-up."""

    cancel: bool
    reason: str
    interrupted: bool = False


class EarlierJob(StrEnum):
    """What a starting try does with the job an earlier try of the same task instance submitted."""

    REATTACH = "re-attach"  # wait on it instead of submitting
    ADOPT = "adopt"  # it already succeeded: its result is this try's
    SUBMIT = "submit"  # it ended (or is someone else's to stop): submit a new job
    CANCEL_THEN_SUBMIT = "cancel, then submit"  # the task was cleared: stop the old job first
    LEAVE_THEN_SUBMIT = "leave running, then submit"  # cleared, but cancel_on_kill is off
    AWAIT_STOP = "wait for its stop to end, then decide again"  # it is stopping: never adopt a dying job
    STILL_STOPPING = "still stopping: neither adopt it nor submit beside it"  # after the wait, still stopping


class TryStart(StrEnum):
    """How the try that finds an earlier job of its task instance started (:func:`try_start`)."""

    FIRST = "first try"  # try 1: a job found is this same try's, run again (an executor re-queue)
    RETRY = "automatic retry"  # an earlier try failed (or its worker died) and Airflow retries
    CLEARED = "first try after a clear"  # a user cleared the task instance: a fresh run is wanted


@dataclass(frozen=True)
class EarlierTry:
    """What a starting try decided about the job an earlier try of its task instance submitted.

    :ivar action: what to do (:meth:`CancelPolicy.earlier_job`).
    :ivar job: the earlier job as last seen.
    :ivar waited: seconds spent waiting for it to stop before deciding.
    :ivar resume: the new job starts from its last checkpoint (:func:`resumes_from_earlier_job`).
    """

    action: EarlierJob
    job: TrainingJob
    waited: float = 0.0
    resume: bool = False


class OnWorkerShutdown(StrEnum):
    """What a try on the worker does with its job when its process is stopped while the task
    instance is still ``running`` (a deploy, a pod eviction, a spot reclaim, an autoscaler: nobody
    gave up on the task). The value is the operator parameter ``on_worker_shutdown``."""

    KEEP_FOR_RETRY = "keep_for_retry"  # keep it for the retry to re-attach; on the last try, cancel
    CANCEL = "cancel"  # always cancel, as if Airflow had given up
    KEEP = "keep"  # never cancel: the last try leaves it to a clear (reattach_on_clear) or the reaper


class CancelPolicy(BaseModel):
    """How a task treats its job when Airflow gives up on it. Flat and JSON-only: it travels in
    trigger kwargs unchanged.

    :ivar cancel_on_kill: cancel the job when Airflow gives up on the task (kill, timeout, failed
        deferral, mark failed, clear, DAG run ended). Sensors default to ``False``: they do not own
        the job they watch.
    :ivar cancel_on_mark_success: also cancel when a user marks the deferred task success.
    :ivar reattach_on_clear: a try started by a clear re-attaches to the earlier try's running job
        instead of cancelling it and submitting a new one.
    :ivar preserve_checkpoints: a cancel keeps the job's checkpoints.
    :ivar create_final_checkpoint: a cancel asks the job to save a final checkpoint (where the
        platform can).
    :ivar confirm_timeout: seconds to wait for the platform to confirm a cancel.
    :ivar verify_timeout: seconds the trigger's ``on_kill`` may spend asking Airflow what happened.
    :ivar cancel_if_unverified: cancel even if that question got no answer in time (the trigger's
        ``on_kill``, and the worker's when its process is stopped).
    :ivar on_worker_shutdown: what a try on the worker does with its job when its process is
        stopped while the task instance is still running (:class:`OnWorkerShutdown`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    cancel_on_kill: bool = True
    cancel_on_mark_success: bool = False
    reattach_on_clear: bool = False
    preserve_checkpoints: bool = True
    create_final_checkpoint: bool = True
    confirm_timeout: Seconds = 60.0
    verify_timeout: Seconds = 60.0
    cancel_if_unverified: bool = False
    on_worker_shutdown: OnWorkerShutdown = OnWorkerShutdown.KEEP_FOR_RETRY

    def request(self, reason: str, *, force: bool = False) -> CancelRequest:
        """The platform cancel this policy asks for, recording ``reason``."""
        return CancelRequest(
            reason=reason,
            preserve_checkpoints=self.preserve_checkpoints,
            create_final_checkpoint=self.create_final_checkpoint,
            force=force,
        )

    def decide(self, why: GiveUp) -> Decision:
        """Whether to cancel when the task itself gives up: killed on the worker, past its
        ``execution_timeout``, or its deferral failed."""
        if not self.cancel_on_kill:
            return Decision(False, f"{why.value}, but cancel_on_kill is off: the job keeps running")
        return Decision(True, why.value)

    def after_trigger_kill(self, ti_state: str | None, current_job_id: str | None, job_id: str) -> Decision:
        """Decide in the trigger's ``on_kill`` whether the user gave up on ``job_id``.

        ``on_kill`` fires on mark failed/success, clear, DAG run failed/timeout — and, wrongly, when the
        trigger moved to another triggerer (Airflow 3.3.2). Only the last leaves the TI deferred on
        this same job.

        :param ti_state: the task instance's state now (``None`` after a clear, before rescheduling).
        :param current_job_id: the job id the TI's current try pushed to XCom (``None`` if none yet).
        :param job_id: the job this trigger waits on.
        """
        if not self.cancel_on_kill:
            return Decision(False, "cancel_on_kill is off")
        if ti_state == "deferred" and current_job_id == job_id:
            return Decision(
                False, "task is still deferred on this job (trigger reassigned to another triggerer)"
            )
        if ti_state == "success" and not self.cancel_on_mark_success:
            return Decision(False, "task was marked success and cancel_on_mark_success is off")
        if self.reattach_on_clear and (ti_state is None or ti_state in LIVE_STATES):
            return Decision(False, "task was cleared and reattach_on_clear is on: its next try re-attaches")
        if ti_state is None or ti_state in LIVE_STATES:
            return Decision(True, f"task was cleared (now {ti_state or 'none'}, running another job or none)")
        return Decision(True, f"task is {ti_state}")

    def after_worker_kill(
        self, ti_state: str | None, *, verified: bool, timed_out: bool, retry_left: bool
    ) -> Decision:
        """Decide in the worker's ``on_kill`` whether Airflow gave up on the task or the worker's
        process is merely being stopped by its infrastructure.

        Airflow calls ``on_kill`` in both cases: when it gives up (a user marked the task failed or
        cleared it, its DAG run failed: the supervisor learns it from its heartbeat and sends
        SIGTERM) and when the worker itself is stopped (a deploy, a pod eviction, a spot reclaim: the
        supervisor forwards the SIGTERM it got). Only the task instance's state tells them apart:
        still ``running`` means nobody gave up.

        :param ti_state: the task instance's state as the API server sees it now.
        :param verified: the state was read (``False``: no answer in time; ``ti_state`` is ignored).
        :param timed_out: the try's ``execution_timeout`` ran out (Airflow gave up).
        :param retry_left: a retry of the task instance follows when this try fails.
        """
        if not self.cancel_on_kill:
            return Decision(
                False, f"{GiveUp.WORKER_KILLED.value}, but cancel_on_kill is off: the job keeps running"
            )
        if timed_out:
            return Decision(True, GiveUp.EXECUTION_TIMEOUT.value)
        if verified and ti_state == "success":
            if self.cancel_on_mark_success:
                return Decision(True, "task was marked success and cancel_on_mark_success is on")
            return Decision(False, "task was marked success and cancel_on_mark_success is off")
        if verified and self.reattach_on_clear and (ti_state is None or ti_state in CLEARED_STATES):
            return Decision(False, "task was cleared and reattach_on_clear is on: its next try re-attaches")
        if verified and ti_state == "up_for_retry":  # Airflow itself retries (missed heartbeats)
            return Decision(
                False, "Airflow is retrying the task (up_for_retry): the retry re-attaches", interrupted=True
            )
        if verified and ti_state != "running":
            return Decision(True, f"{GiveUp.WORKER_KILLED.value} (task instance now {ti_state or 'gone'})")
        if not verified and self.cancel_if_unverified:
            return Decision(
                True, f"{GiveUp.WORKER_KILLED.value} (state not verified; cancel_if_unverified is on)"
            )
        why = "the task instance is still running" if verified else "its state could not be verified in time"
        interrupted = f"the worker stopped this try while {why}: an interruption, not a give-up"
        if self.on_worker_shutdown is OnWorkerShutdown.CANCEL:
            return Decision(True, f"{interrupted}, and on_worker_shutdown is 'cancel'")
        if retry_left:
            return Decision(
                False,
                f"{interrupted}; the job keeps running and the retry re-attaches to it",
                interrupted=True,
            )
        if self.on_worker_shutdown is OnWorkerShutdown.KEEP:
            return Decision(
                False,
                f"{interrupted}; no retry remains and on_worker_shutdown is 'keep': the job keeps running "
                "(a clear with reattach_on_clear re-attaches; otherwise the orphan reaper cancels it)",
                interrupted=True,
            )
        return Decision(True, f"{interrupted}, but no retry remains to re-attach: cancelling")

    def earlier_job(self, state: JobState, start: TryStart, *, stop_awaited: bool = False) -> EarlierJob:
        """What a starting try does with the job (now in ``state``) an earlier try of its task
        instance submitted. A pure function of the state, how the try started and the policy:

        * a job that is stopping (a give-up's cancel in progress, on any platform) is never adopted:
          wait for its stop to end, then decide again (``stop_awaited=True``); still stopping after
          that wait → :attr:`EarlierJob.STILL_STOPPING`;
        * an automatic retry or a re-run first try: live → re-attach; succeeded → adopt;
          failed/cancelled → submit a new job (resuming from its checkpoint if asked);
        * the first try after a clear: with ``reattach_on_clear`` a live job is re-attached;
          otherwise a live job is cancelled first (left running if ``cancel_on_kill`` is off), and
          an ended one, even a success, is followed by a new job: a clear asks for a new run.
        """
        if state is JobState.STOPPING:
            return EarlierJob.STILL_STOPPING if stop_awaited else EarlierJob.AWAIT_STOP
        if start is not TryStart.CLEARED or self.reattach_on_clear:
            if not state.is_terminal:
                return EarlierJob.REATTACH
            if state is JobState.SUCCEEDED and start is not TryStart.CLEARED:
                return EarlierJob.ADOPT
            return EarlierJob.SUBMIT
        if state.is_terminal:
            return EarlierJob.SUBMIT
        return EarlierJob.CANCEL_THEN_SUBMIT if self.cancel_on_kill else EarlierJob.LEAVE_THEN_SUBMIT


def resumes_from_earlier_job(
    action: EarlierJob, start: TryStart, state: JobState, resume_from_checkpoint: bool
) -> bool:
    """Whether the job a retry submits starts from the earlier job's last checkpoint: only an
    automatic retry (a clear asks for a fresh run), only after a job that failed or was cancelled
    (a success is adopted, a live job re-attached), and only with ``resume_from_checkpoint``."""
    return (
        resume_from_checkpoint
        and action is EarlierJob.SUBMIT
        and start is TryStart.RETRY
        and state in (JobState.FAILED, JobState.CANCELLED)
    )


def reaper_decision(ti_state: str | None, current_job_id: str | None, job_id: str) -> Decision:
    """Decide whether a running job tagged by this deployment is an orphan.

    A job is kept while its task instance is alive on it: in a live state and either publishing this
    job id, or publishing none yet (a try that is starting may still re-attach to it).

    :param ti_state: state of the TI named by the job's tags; ``None`` if Airflow does not know it.
    :param current_job_id: job id in that TI's XCom (current try), if any.
    """
    if ti_state in LIVE_STATES:
        if current_job_id in (None, job_id):
            return Decision(False, f"task instance is {ti_state} on this job")
        return Decision(True, f"task instance is {ti_state} on another job ({current_job_id})")
    return Decision(True, f"task instance is {ti_state or 'gone'}")


def try_start(try_number: int, max_tries: int, retries: int) -> TryStart:
    """How this try started: the first try, an automatic retry, or the first try after a clear
    (:func:`is_retry`)."""
    if try_number <= 1:
        return TryStart.FIRST
    return TryStart.RETRY if is_retry(try_number, max_tries, retries) else TryStart.CLEARED


def is_retry(try_number: int, max_tries: int, retries: int) -> bool:
    """Whether this try is an automatic retry (vs. a first try or the first try after a clear).

    Airflow sets ``max_tries = try_number + retries`` when a task is cleared, so the first try of
    each cycle is ``max_tries - retries + 1`` (the same rule as ``get_first_reschedule_date``).
    """
    return try_number > max_tries - retries + 1
