"""Waiting for a job: its settings, the wait itself (one sans-IO operation, for worker and trigger
alike) and the outcomes it ends in, which are also the trigger's events.

The outcome is what the trigger yields (``outcome.model_dump(mode="json")``) and what
``execute_complete`` parses back (:func:`parse_outcome`); a task waiting on the worker gets the same
value from the same operation, so both ways of waiting end the task the same way.
"""

from __future__ import annotations

import zlib
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from airflow_training_provider.cancellation import CancelPolicy, GiveUp, Seconds
from airflow_training_provider.errors import TrainingPlatformError, TransientPlatformError
from airflow_training_provider.json_values import MESSAGE_CHARS, Message, bounded_text
from airflow_training_provider.lifecycle.guards import Guards, GuardStop, GuardWatch, best_checkpoint
from airflow_training_provider.lifecycle.operations import (
    JobOperations,
    LogFollow,
    Operation,
    is_terminal,
)
from airflow_training_provider.models import CancelResult, TrainingJob, complete_cancel_result
from airflow_training_provider.platforms import platform_job


class Polling(BaseModel):
    """Every interval of the provider, in seconds (a ``timedelta`` is accepted).

    :ivar poll_interval: between status polls while waiting for a job.
    :ivar outage_budget: consecutive seconds of failed polls (429, 5xx, timeouts, resets, malformed
        bodies) tolerated before the task fails with "lost contact"; the job is not cancelled.
    :ivar confirm_interval: between polls while waiting for the platform to confirm a cancel.
    :ivar clear_grace: how long a try started by a clear gives the old try's trigger to cancel the
        old job before cancelling it itself.
    :ivar resume_settle: the trigger fires no sooner than this after the task deferred. Airflow
        3.3's scheduler fails a task whose trigger fired before it processed the worker's exit
        from ``defer()`` ("finished with state success, but the task instance's state attribute
        is queued", apache/airflow#71580); the task then fails without its own message. Only a
        job that ends within seconds of the deferral waits.
    :ivar coalesce: in a triggerer, the waiting jobs of one connection share one poller that reads
        many jobs per call where the platform can (``docs/scale.md``); a job's own reads are made
        when that read shows a change, and at its end. ``False``: every job is polled on its own.
    :ivar events_interval: coalesced, a job's events endpoint is read when its state, status or
        message changed, at its end, and otherwise at least this often (seconds).
    :ivar spread_polls: a trigger's first poll waits for its job's slot in the interval (a fixed
        phase from the job id), so the polls of many triggers are spread over the interval and a
        restarted triggerer does not poll them all at once; each job keeps its phase across restarts.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    poll_interval: Seconds = Field(30.0, gt=0)
    outage_budget: Seconds = 600.0
    confirm_interval: Seconds = Field(1.0, gt=0)
    clear_grace: Seconds = 10.0
    resume_settle: Seconds = 10.0
    spread_polls: bool = True
    coalesce: bool = True
    events_interval: Seconds = Field(3600.0, gt=0)


class _Outcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    job_id: str


class JobFinished(_Outcome):
    """The job reached a terminal state; ``job`` is its final view (failure reason included)."""

    status: Literal["terminal"] = "terminal"
    job: TrainingJob
    event_cursor: int = 0


#: What a wait's deadline is: the task's ``execution_timeout``, its ``defer_timeout`` (both may
#: cancel, per the policy), or a sensor's own ``timeout`` (never cancels the job it watches).
DeadlineKind = Literal["execution_timeout", "defer_timeout", "sensor_timeout"]


class DeadlineReached(_Outcome):
    """A deadline passed with the job still running: the task's ``execution_timeout`` or
    ``defer_timeout``, or a sensor's own ``timeout`` (``kind``, a :data:`DeadlineKind`).

    :ivar job: the job as last seen (running).
    :ivar cancel: the cancel the waiter already sent at the deadline (``None``: none was sent,
        because the policy said not to or the call failed; ``cancel_error`` says which).
    """

    status: Literal["timeout"] = "timeout"
    kind: DeadlineKind = "execution_timeout"
    message: Message
    job: TrainingJob | None = None
    cancel: CancelResult | None = None
    cancel_error: Message | None = None


class LostContact(_Outcome):
    """Polls failed for longer than the outage budget; the job was left alone."""

    status: Literal["lost_contact"] = "lost_contact"
    message: Message


class PollFailed(_Outcome):
    """The platform refused a poll for good (e.g. the job is not found)."""

    status: Literal["error"] = "error"
    message: Message


class GuardStopped(_Outcome):
    """A guard (:mod:`~airflow_training_provider.lifecycle.guards`) stopped the job: ``stop`` says
    which and why (with the checkpoint to keep), ``job`` is the job after the stop (terminal unless
    the platform did not confirm in time), ``cancel`` what the stop request achieved."""

    status: Literal["guard"] = "guard"
    job: TrainingJob
    stop: GuardStop
    cancel: CancelResult | None = None
    event_cursor: int = 0


WaitOutcome = Annotated[
    JobFinished | DeadlineReached | LostContact | PollFailed | GuardStopped, Field(discriminator="status")
]
_OUTCOME = TypeAdapter(WaitOutcome)


def outcome_payload(outcome: JobFinished | DeadlineReached | LostContact | PollFailed | GuardStopped) -> dict:
    """``outcome`` as a trigger event's payload, which Airflow writes into the task instance's
    ``next_kwargs`` (JSONB on PostgreSQL): its job bounded (:func:`~airflow_training_provider.results.bounded_job`)
    and NaN/Infinity as their names (:func:`~airflow_training_provider.json_values.dump`);
    :func:`parse_outcome` reads it back."""
    from airflow_training_provider.json_values import dump
    from airflow_training_provider.results import bounded_job

    job = getattr(outcome, "job", None)
    if job is not None:
        outcome = outcome.model_copy(update={"job": bounded_job(job)})
    return dump(outcome)


def parse_outcome(payload: dict) -> JobFinished | DeadlineReached | LostContact | PollFailed | GuardStopped:
    """A trigger event payload back as its outcome. :raises pydantic.ValidationError: not an outcome."""
    return _OUTCOME.validate_python(payload)


def wait_for_job(
    ops: JobOperations,
    job_id: str,
    polling: Polling,
    policy: CancelPolicy,
    deadline: float | None = None,
    event_cursor: int | None = None,
    deadline_kind: DeadlineKind = "execution_timeout",
    guards: Guards | None = None,
    logs: LogFollow | None = None,
    coalesce: bool = False,
) -> Operation[JobFinished | DeadlineReached | LostContact | PollFailed | GuardStopped]:
    """Wait until job ``job_id`` ends, the ``deadline`` (absolute UNIX seconds) passes, or the
    platform is lost for longer than ``polling.outage_budget``.

    At the deadline the job's state is read first: a job that ended gives its normal outcome; a
    running one is cancelled if ``policy`` says so (here, at the deadline, rather than when a worker
    resumes the task seconds to minutes later), and the outcome is :class:`DeadlineReached`.

    :param event_cursor: events already reported (platforms with events); ``None`` reports none.
    :param deadline_kind: what the deadline is; a sensor's timeout never cancels.
    :param guards: stop the job when one of them fires (:class:`GuardStopped`).
    :param logs: follow the job's program log from ``logs.cursor`` (``stream_logs``): its new lines
        are reported at each poll, the last ones before the wait ends (see ``JobOperations.poll``).
    :param coalesce: the driver answers status reads from a batch read (a triggerer's coalesced
        polling): the events endpoint is then read on a change and every ``polling.events_interval``.
    """
    watch = GuardWatch(guards, ops.clock) if guards is not None and guards.any else None
    try:
        job, cursor = yield from ops.poll(
            job_id,
            is_terminal,
            polling.poll_interval,
            deadline,
            polling.outage_budget,
            event_cursor,
            watch,
            logs,
            coalesce,
            polling.events_interval if coalesce else None,
        )
    except TransientPlatformError as exc:
        return LostContact(
            job_id=job_id,
            message=f"Lost contact with the platform for more than {polling.outage_budget:.0f} s while "
            f"polling {platform_job(platform=ops.dialect.name, job_id=job_id)}; the job was NOT cancelled "
            f"and a retry of this task re-attaches to it. Last error: {exc}",
        )
    except TrainingPlatformError as exc:
        what = platform_job(platform=ops.dialect.name, job_id=job_id)
        return PollFailed(job_id=job_id, message=f"Polling {what} failed: {exc}")
    if watch is not None and watch.fired is not None:
        return (yield from stop_for_guard(ops, job_id, watch.fired, polling, policy, cursor or 0, logs))
    if job.is_terminal:
        return JobFinished(job_id=job_id, job=job, event_cursor=cursor or 0)
    if deadline_kind == "sensor_timeout":
        message = f"Sensor timed out waiting for training job {job_id} (still {job.state.value}); the job keeps running"
        return DeadlineReached(job_id=job_id, job=job, kind=deadline_kind, message=message)
    why = GiveUp.at_deadline(deadline_kind)
    decision = policy.decide(why)
    outcome = DeadlineReached(
        job_id=job_id, job=job, kind=deadline_kind, message=f"{deadline_kind} reached; {decision.reason}"
    )
    if not decision.cancel:
        return outcome
    try:
        result = yield from ops.cancel_job(job_id, policy.request(why.value))
    except TrainingPlatformError as exc:  # the resumed task tries again
        return outcome.model_copy(update={"cancel_error": bounded_text(str(exc), MESSAGE_CHARS)})
    if logs is not None:
        yield from _log_after_stop(ops, job_id, polling, policy, logs)
    return outcome.model_copy(update={"cancel": result})


def _log_after_stop(
    ops: JobOperations, job_id: str, polling: Polling, policy: CancelPolicy, logs: LogFollow
) -> Operation[None]:
    """What the program printed while it stopped after a deadline's cancel ("SIGTERM: checkpoint …
    written"): once the platform confirms the stop (``policy.confirm_timeout`` at most), its log is
    read from the cursor to its end. Not confirmed in time, or the polls failing: not read (the
    deadline's outcome stands)."""
    try:
        job = yield from ops.wait_until(
            job_id, is_terminal, policy.confirm_timeout, polling.confirm_interval, polling.outage_budget
        )
    except TrainingPlatformError:
        return
    if job.is_terminal:
        yield from ops.log_tail(job, logs, polling.poll_interval)


def stop_for_guard(
    ops: JobOperations,
    job_id: str,
    stop: GuardStop,
    polling: Polling,
    policy: CancelPolicy,
    cursor: int,
    logs: LogFollow | None = None,
) -> Operation[GuardStopped | PollFailed]:
    """Stop job ``job_id`` because ``stop`` fired, as a cancel does (checkpoints kept, a final one
    asked for where the platform can; the reason recorded), whatever ``cancel_on_kill`` says: a
    guard is the user's own request. Waits (``policy.confirm_timeout``) for the platform to confirm;
    following the program log (``logs``), its lines up to the stop are reported then."""
    try:
        result = yield from ops.cancel_job(job_id, policy.request(f"Airflow guard: {stop.reason}"))
        job = yield from ops.wait_until(
            job_id, is_terminal, policy.confirm_timeout, polling.confirm_interval, polling.outage_budget
        )
    except TrainingPlatformError as exc:
        return PollFailed(
            job_id=job_id, message=f"{stop.reason}; stopping training job {job_id} failed: {exc}"
        )
    if logs is not None:  # what the program printed while it stopped (its checkpoint, a traceback)
        yield from ops.log_tail(job, logs, polling.poll_interval)
    stop = stop.model_copy(update={"best_checkpoint": best_checkpoint(stop, job.checkpoints)})
    return GuardStopped(
        job_id=job_id, job=job, stop=stop, cancel=complete_cancel_result(result, job), event_cursor=cursor
    )


def poll_phase_delay(job_id: str, interval: float, now: float) -> float:
    """Seconds from ``now`` (UNIX) to job ``job_id``'s next slot: the slots are ``interval`` apart
    at a phase fixed by the job id, so a job's polls fall at the same point of the interval across
    triggerer restarts, and different jobs' polls are spread evenly."""
    phase = zlib.crc32(job_id.encode()) / 2**32 * interval
    return (phase - now) % interval
