"""The Airflow side of a task that waits on a training job: shared by the submit operator and the
sensor (and the cancel paths of the reaper and the cancel operator use its helpers).

Two ways to wait, one wait (:func:`~airflow_training_provider.lifecycle.waiting.wait_for_job`) and
one way to end (:meth:`TrainingJobTaskMixin.conclude`):

* deferred: the trigger runs the wait and yields its outcome; ``execute_complete`` parses it and
  concludes; ``resume_execution`` on ``__fail__`` (deferral timeout, trigger crash) cancels;
* on the worker: the hook runs the same wait; ``on_kill`` (SIGTERM, ``execution_timeout``) cancels
  and wakes the wait up so ``execute()`` stops — the 3.3 SIGTERM handler only calls ``on_kill`` and
  returns;
* lost contact (polls failing past the outage budget): the task fails, the job is NOT cancelled.

Whether to cancel is always the :class:`~airflow_training_provider.cancellation.CancelPolicy`'s call.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar, overload

from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowTaskTimeout,
)
from pydantic import BaseModel, ValidationError

from airflow_training_provider.assets import checkpoint_uri, model_checkpoint, model_event_extra
from airflow_training_provider.cancellation import CancelPolicy, GiveUp
from airflow_training_provider.errors import TrainingPlatformError, TransientPlatformError
from airflow_training_provider.hooks.training import TrainingPlatformHook, WaitInterrupted
from airflow_training_provider.hooks.transport import RetryPolicy
from airflow_training_provider.identity import TaskIdentity
from airflow_training_provider.json_values import dump, json_value
from airflow_training_provider.lifecycle.guards import Guards
from airflow_training_provider.lifecycle.operations import LogFollow
from airflow_training_provider.lifecycle.waiting import (
    DeadlineKind,
    DeadlineReached,
    GuardStopped,
    JobFinished,
    LostContact,
    Polling,
    WaitOutcome,
    parse_outcome,
    wait_for_job,
)
from airflow_training_provider.links import (
    JOB_REF_XCOM_KEY,
    JobReference,
    TrainingJobConsoleLink,
    try_record_key,
)
from airflow_training_provider.models import (
    CancelResult,
    Checkpoint,
    JobState,
    TrainingJob,
    complete_cancel_result,
)
from airflow_training_provider.platforms import platform_job
from airflow_training_provider.program_logs import (
    SecretLines,
    note_unavailable,
    note_unreferenced_secrets,
    resolve_secrets,
)
from airflow_training_provider.progress import JobReport, describe, diverged_text
from airflow_training_provider.results import bounded_job, job_result
from airflow_training_provider.task_instance_lookup import (
    JOB_ID_XCOM_KEY,
    current_job_id,
    event_cursor_key,
    log_cursor_key,
    task_instance_state,
)
from airflow_training_provider.task_log import TaskLog
from airflow_training_provider.triggers.training_job import TrainingJobTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.types import Logger
    from airflow.triggers.base import BaseTrigger

M = TypeVar("M", bound=BaseModel)

#: task_state_store key holding ``{"job_id", "try_number", "platform"}`` across tries.
STATE_STORE_KEY = "training_job"
#: seconds the deferral's own timeout (a backstop) runs past the trigger's deadline.
DEFER_TIMEOUT_SLACK = 120.0
#: A wait on the worker ends this many seconds (at most a fifth of ``execution_timeout``) before
#: Airflow's SIGALRM, so the job is cancelled by the wait itself: a signal handler that logs can
#: hang on the logging lock the interrupted code holds, and then ``on_kill`` never runs.
WORKER_DEADLINE_LEAD = 5.0
#: ...and it stops confirming the cancel this many seconds before the SIGALRM.
WORKER_CONFIRM_MARGIN = 1.0
#: operators call the policy's ``confirm_timeout`` this (their other cancel parameters keep its names).
CONFIRM_TIMEOUT_PARAMETER = {"confirm_timeout": "confirm_cancel_timeout"}
#: seconds the worker's ``on_kill`` may take in all (SIGKILL follows SIGTERM after 5 s): at most
#: :data:`ON_KILL_VERIFY_TIMEOUT` asking Airflow (through the supervisor) for the task instance's
#: state, the rest for the cancel's two calls (the job's state, then the cancel), shared equally.
ON_KILL_BUDGET = 4.5
ON_KILL_VERIFY_TIMEOUT = 1.5


def try_record(value: dict[str, Any]) -> dict[str, Any]:
    """A try's job reference as kept in the task state store: whole, or without the job when it is
    larger than ``[state_store] max_value_storage_bytes`` (a long job's checkpoints and metric
    history; Airflow would write it with a warning in every task log) — the UI then asks the
    platform for that try's job, as for a job that may still change."""
    from airflow.sdk.configuration import conf

    limit = conf.getint("state_store", "max_value_storage_bytes", fallback=65535)
    if limit > 0 and len(json.dumps(value)) > limit:
        return {**value, "job": None}
    return value


class TrainingJobFailed(AirflowException):
    """The training job ended failed, or was cancelled by someone other than this task."""


class TrainingJobCancelledByAirflow(AirflowException):
    """This task was killed while waiting (and cancelled its job, if its policy says so)."""


class TrainingJobInterrupted(AirflowException):
    """The worker's process was stopped while the task instance was still running (a deploy, an
    eviction, a shutdown: nobody gave up on the task); the job was left for the retry to re-attach."""


class TrainingJobStillStopping(AirflowException):
    """An earlier try's job was still stopping after the wait for it: this try neither adopted it
    nor submitted a new job beside it (a retry looks again)."""


class LostContactWithPlatform(AirflowException):
    """Polls failed for longer than the outage budget; the job was left running."""


class TrainingJobStoppedByGuard(AirflowFailException):
    """A guard (``max_cost_usd``, ``max_runtime``) stopped the job and the task fails, without
    retries: a retry would spend again what the guard saved."""


def parameters(model: type[M], owner: str, renamed: dict[str, str] | None = None, **values: Any) -> M:
    """``model(**values)``, or a ``ValueError`` naming the operator parameter (``renamed`` maps a
    model field to the parameter it came from) and what it expects — raised when the DAG is parsed,
    long before anything is submitted."""
    try:
        return model(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = ".".join(str(p) for p in err["loc"])
        name = (renamed or {}).get(name, name)
        msg = err["msg"]
        raise ValueError(
            f"{owner}: parameter {name!r}: {msg[0].lower()}{msg[1:]} (got {err.get('input')!r})"
        ) from None


def stream_logs_flag(value: Any, owner: str) -> bool:
    """``stream_logs`` as given: a boolean (not a template: it decides what the trigger is given).

    :raises ValueError: another value, naming ``owner`` and the parameter."""
    if not isinstance(value, bool):
        raise ValueError(f"{owner}: stream_logs must be True or False, got {value!r}")
    return value


def job_outcome(job: TrainingJob) -> dict[str, Any]:
    """Map a terminal job to the task's outcome: on success the job as the task returns it
    (:func:`~airflow_training_provider.results.job_result`: bounded, JSON-safe), else raise.

    :raises TrainingJobFailed: job failed (with the platform's message: its reason, status and
        the platform's name) or was cancelled outside Airflow (this task's own cancels raise before
        reaching here).
    """
    if job.state is JobState.SUCCEEDED:
        return job_result(job)
    if job.state is JobState.FAILED:
        why = job.message or "no reason given"
        raise TrainingJobFailed(f"{platform_job(job)} failed: {why} (platform status {job.raw_status})")
    if job.state is JobState.CANCELLED:
        why = f": {job.message}" if job.message else ""
        raise TrainingJobFailed(
            f"{platform_job(job)} was cancelled outside Airflow (platform status {job.raw_status}){why}"
        )
    raise TrainingJobFailed(f"{platform_job(job)} ended {job.state.value} (platform status {job.raw_status})")


def retry_left(ti: Any) -> bool:
    """Whether a retry of task instance ``ti`` follows if its current try fails: Airflow's own
    answer (the server's ``should_retry``) where the task runner has it, else
    ``try_number <= max_tries``."""
    if ti is None:
        return False
    from_server = getattr(ti, "_ti_context_from_server", None)
    if from_server is not None and getattr(from_server, "should_retry", None) is not None:
        return bool(from_server.should_retry)
    try:
        return int(ti.try_number) <= int(ti.max_tries)
    except (AttributeError, TypeError, ValueError):
        return False


def log_cancel(log: TaskLog, result: CancelResult, job: TrainingJob) -> None:
    """Write what a cancel achieved to the task log."""
    if result.already_terminal:
        # after a trigger's deadline cancel the job has usually stopped by the time the task
        # resumes: still say where its checkpoint is (the path the spec gave the platform for them)
        kept = result.final_checkpoint_id or result.final_checkpoint_path
        told = kept or result.final_checkpoint_written is not None
        log.info(
            "Training job %s had already ended (%s); nothing to cancel%s",
            result.job_id,
            result.state.value,
            f"; {result.final_checkpoint_text()}" if told else "",
        )
        return
    # "final checkpoint written after the stop: <path>" where the platform tells (CancelResult)
    log.warning(
        "Training job %s cancelled: state %s, %s, final metrics %s, cost $%s",
        result.job_id,
        job.state.value,
        result.final_checkpoint_text(),
        result.final_metrics,
        result.cost.total_usd,
    )


class OperatorHost(Protocol):
    """What :class:`TrainingJobTaskMixin` uses of the operator it is mixed into (a ``BaseOperator``,
    or a ``BaseSensorOperator``, after the mixin in the bases); for the type checker only."""

    task_id: str
    execution_timeout: timedelta | None

    @property
    def log(self) -> Logger: ...

    def defer(
        self,
        *,
        trigger: BaseTrigger,
        method_name: str,
        kwargs: dict[str, Any] | None = None,
        timeout: timedelta | int | float | None = None,
    ) -> NoReturn: ...

    #: the host's own resume (``BaseOperator``'s, ``BaseSensorOperator``'s): the mixin's calls it
    resume_execution: Callable[[str, dict[str, Any] | None, Context], Any]


if TYPE_CHECKING:
    _Host = OperatorHost
else:
    _Host = object


class TrainingJobTaskMixin(_Host):
    """Waiting, deferral and cancellation for an operator that waits on job ``self.job_id``.

    The host is an operator (:class:`OperatorHost`); it sets ``conn_id`` and ``deferrable``, and
    calls :meth:`_init_job_task` in ``__init__`` (which sets ``polling`` and ``cancel_policy``).
    """

    conn_id: str
    deferrable: bool
    cancel_policy: CancelPolicy
    polling: Polling
    defer_timeout: float | None = None
    guards: Guards | None = None
    model_alias: str | None = None
    lineage: tuple[TrainingJob, str | None, str | None] | None = None  # the model made: job, URI, guard
    #: write the training program's output into the task log while waiting (``program_logs.py``)
    stream_logs: bool = False
    #: the task submits the job from its spec, so it knows the secrets the program may print (the
    #: submit operator); a sensor watches a job it did not submit
    knows_spec: bool = False

    def program_secret_references(self) -> list[dict[str, Any]]:
        """The secret references (names, never values) whose values the job's program may print:
        the lines written by ``stream_logs`` are masked against them. None by default (a sensor
        watches a job it did not submit); the submit operator names its spec's."""
        return []

    def program_secret_values(self) -> list[str]:
        """Secret values the worker knows without resolving a reference (written in the spec), for
        the lines a wait on the worker writes. None by default."""
        return []

    def has_unreferenced_secrets(self) -> bool:
        """The spec holds secret values written in it or rendered from a template
        (:meth:`program_secret_values`): only the worker's masker knows them. Carried on as this
        boolean (trigger kwargs, the UI's job record), never as the values. ``True`` when they
        cannot be told (the connection, hence the dialect's secret fields, unreadable): the safe
        answer, and publishing the job must not fail on it."""
        try:
            return bool(self.program_secret_values())
        except Exception:  # noqa: BLE001
            return True

    def _follow_log_on_worker(self) -> tuple[LogFollow | None, SecretLines]:
        """How a wait on the worker follows the program log (``stream_logs``): from the start (a
        try's log shows every line), masked against the spec's secrets; or not at all (the
        platform has no program log: one note)."""
        if not self.stream_logs:
            return None, SecretLines()
        dialect = self.hook.dialect
        if not dialect.capabilities.program_logs:
            note_unavailable(self.log, dialect.name)
            return None, SecretLines()
        try:
            resolved = resolve_secrets(self.program_secret_references())
        except Exception as exc:  # noqa: BLE001 - never fails the wait
            self.log.warning(
                "stream_logs: the spec's secrets could not be resolved (%s); the program's lines are "
                "not written, lest one show a secret",
                exc,
            )
            return None, SecretLines()
        return LogFollow(), SecretLines([*resolved.values, *self.program_secret_values()])

    def _init_job_task(
        self,
        *,
        poll_interval: Any,
        outage_budget: Any,
        confirm_cancel_timeout: Any,
        coalesce: Any = True,
        events_interval: Any = 3600.0,
        **policy: Any,
    ) -> None:
        """Check and keep the waiting parameters (``ValueError`` naming a bad one, at DAG parse
        time): ``self.polling`` from the intervals, ``self.cancel_policy`` from the cancel options."""
        owner = f"{type(self).__name__}({self.task_id})"
        self.polling = parameters(
            Polling,
            owner,
            poll_interval=poll_interval,
            outage_budget=outage_budget,
            coalesce=coalesce,
            events_interval=events_interval,
        )
        self.cancel_policy = parameters(
            CancelPolicy, owner, CONFIRM_TIMEOUT_PARAMETER, confirm_timeout=confirm_cancel_timeout, **policy
        )
        self.job_id: str | None = getattr(self, "job_id", None)  # a sensor's is given; a submit's comes later
        self._stop = threading.Event()
        self._kill_result: CancelResult | None = None
        self._kill_note: tuple[int, str] | None = None  # on_kill's log line, written by execute()
        self._kill_interrupted = False  # on_kill kept the job: the worker was stopped, nobody gave up
        self._killing = False  # an on_kill is running (a second SIGTERM may interrupt it)
        self._verify_failures: list[str] = []  # why on_kill could not read the task instance's state
        # what on_kill needs about this try, read before it can run (_remember_try)
        self._deadline: float | None = None
        self._identity: TaskIdentity | None = None
        self._retry_left = False

    @cached_property
    def hook(self) -> TrainingPlatformHook:
        return TrainingPlatformHook(self.conn_id)

    # -- publishing --------------------------------------------------------------------------------
    def publish_job(self, context: Context | None, job: TrainingJob, returned: bool = False) -> None:
        """Publish ``job`` for people: the job reference (XCom ``training_job``, which the UI's
        "Training job" view reads) and the console link (its extra link's XCom), right after submit
        and again when the task ends, so both work while the task is deferred.

        The reference carries the job bounded (:func:`~airflow_training_provider.results.bounded_job`);
        ``returned``: the task returns this job (it succeeded), so the reference does not repeat it
        (``job_in_return_value``: the UI reads XCom ``return_value``).

        The same reference is kept as this try's record in the task state store
        (:func:`~airflow_training_provider.links.try_record_key`): the next try clears the XComs,
        not the store, so the UI still finds each try's job after a retry."""
        ti = context.get("ti") if context else None
        if ti is None:
            return
        # with do_xcom_push=False there is no return value to point at: the record keeps the job
        returned = returned and getattr(self, "do_xcom_push", True)
        try_number = getattr(ti, "try_number", None)
        ref = JobReference(
            conn_id=self.conn_id,
            platform=job.platform,
            job_id=job.id,
            console_url=job.console_url,
            job=None if returned else bounded_job(job),
            job_in_return_value=returned,
            seen_at=datetime.now(UTC),
            try_number=try_number if isinstance(try_number, int) else None,
            secret_references=self.program_secret_references(),
            spec_known=self.knows_spec,
            unreferenced_secrets=self.has_unreferenced_secrets(),
        )
        value = dump(ref)
        ti.xcom_push(key=JOB_REF_XCOM_KEY, value=value)
        self.job_reference_published = True
        if job.console_url:
            ti.xcom_push(key=TrainingJobConsoleLink().xcom_key, value=json_value(job.console_url))
        store = context.get("task_state_store") if context else None
        if store is not None and ref.try_number is not None:
            # For people only: a failed write must not fail the task (the UI then falls back to XCom).
            try:
                store.set(try_record_key(ref.try_number), try_record(value))
            except Exception as exc:  # noqa: BLE001
                self.log.warning("This try's job record was not kept in the task state store (%s)", exc)

    # -- ending ------------------------------------------------------------------------------------
    def conclude(
        self, outcome: WaitOutcome, context: Context | None, confirm_until: float | None = None
    ) -> dict[str, Any]:
        """End the task from a wait's outcome: the final job on success, else raise why.

        :param confirm_until: UNIX time after which a cancel is not confirmed any more (the worker's
            SIGALRM comes soon after); ``None``: for ``confirm_cancel_timeout`` seconds.
        """
        self.job_id = outcome.job_id
        if (job := getattr(outcome, "job", None)) is not None:
            returned = (isinstance(outcome, JobFinished) and job.state is JobState.SUCCEEDED) or (
                isinstance(outcome, GuardStopped) and outcome.stop.succeed
            )
            self.publish_job(context, job, returned=returned)
        if isinstance(outcome, JobFinished):
            finished = self.completed_job(outcome.job)
            self.note_diverged(finished)
            result = job_outcome(finished)
            self.publish_model(context, finished)
            return result
        if isinstance(outcome, GuardStopped):
            return self.conclude_guard(outcome, context)
        if isinstance(outcome, DeadlineReached) and outcome.kind == "sensor_timeout":
            raise AirflowSensorTimeout(outcome.message)
        if isinstance(outcome, DeadlineReached):
            return self._conclude_deadline(outcome, context, confirm_until)
        if isinstance(outcome, LostContact):
            raise LostContactWithPlatform(outcome.message)
        raise AirflowException(outcome.message)

    def _conclude_deadline(
        self, outcome: DeadlineReached, context: Context | None, confirm_until: float | None
    ) -> NoReturn:
        """``execution_timeout`` or ``defer_timeout`` passed with the job running: cancel it per the
        policy (confirming the trigger's cancel, or sending it if that one failed), then fail.

        :raises AirflowTaskTimeout: ``execution_timeout``.
        :raises TaskDeferralTimeout: ``defer_timeout``, as Airflow's own deferral timeout raises.
        """
        from airflow.sdk.exceptions import TaskDeferralTimeout

        why = GiveUp.at_deadline(outcome.kind)
        exception: type[BaseException] = (
            TaskDeferralTimeout if why is GiveUp.DEFER_TIMEOUT else AirflowTaskTimeout
        )
        what = platform_job(platform=self._platform_name(), job_id=outcome.job_id)
        decision = self.cancel_policy.decide(why)
        if decision.cancel:
            # the trigger's cancel, sent at the deadline, is this task's: a job it stopped before
            # this resume was cancelled by the task, not found ended
            sent = outcome.cancel is not None and not outcome.cancel.already_terminal
            self.cancel_and_report(outcome.job_id, why.value, context, confirm_until, sent=sent)
            raise exception(f"{outcome.kind} reached; {what} was cancelled")
        raise exception(f"{outcome.kind} reached; {decision.reason} ({what})")

    def completed_job(self, job: TrainingJob) -> TrainingJob:
        """``job``, which ended, as the task reports it: an operator may add what the platform
        does not say itself (the submit operator: metrics from the program log). ``job`` itself
        here."""
        return job

    def note_diverged(self, job: TrainingJob) -> None:
        """Say in the task log which final metrics are NaN or ±Infinity (the run diverged): the
        task's outcome is still the job's, and its return value keeps them (as ``"NaN"``...)."""
        if (text := diverged_text(job)) is not None:
            self.log.warning(
                "Training job %s; its result keeps them (NaN and Infinity are written as the strings "
                '"NaN", "Infinity" and "-Infinity": float() reads them back)',
                text,
            )

    def conclude_guard(self, outcome: GuardStopped, context: Context | None) -> dict[str, Any]:
        """A guard stopped the job: log and publish which (XCom ``guard_stop``, ``cancel_result``),
        then succeed with the job (its ``guard`` entry naming the checkpoint to keep) or fail."""
        stop, job = outcome.stop, outcome.job
        self.note_diverged(job)
        best = stop.best_checkpoint
        self.log.warning(
            "Training job %s stopped by a guard — %s; state %s, epoch %s, cost $%s, checkpoint to keep: %s",
            job.id,
            stop.reason,
            job.state.value,
            stop.epoch,
            job.cost.total_usd if job.cost.total_usd is not None else stop.cost_usd,
            f"{best.id} ({best.path})" if best else "none",
        )
        ti = context.get("ti") if context else None
        if ti is not None:
            ti.xcom_push(key="guard_stop", value=dump(stop))
            if outcome.cancel is not None:
                ti.xcom_push(key="cancel_result", value=dump(outcome.cancel))
        if not stop.succeed:
            raise TrainingJobStoppedByGuard(f"Training job {job.id} was stopped: {stop.reason}")
        self.publish_model(context, job, best, stop.guard)
        return job_result(job, guard=dump(stop))

    def publish_model(
        self,
        context: Context | None,
        job: TrainingJob,
        best: Checkpoint | None = None,
        guard: str | None = None,
    ) -> None:
        """With ``model_alias``, emit the model (``best``, else the job's final checkpoint) as an asset
        event through ``AssetAlias(model_alias)``: a DAG scheduled on the alias runs once per model."""
        checkpoint = model_checkpoint(job, best)
        self.lineage = (
            job,
            checkpoint_uri(job, checkpoint) if checkpoint else None,
            guard,
        )  # for OpenLineage
        if not self.model_alias or not context or "outlet_events" not in context:
            return
        from airflow.sdk import Asset, AssetAlias

        uri = checkpoint_uri(job, checkpoint)
        extra = model_event_extra(job, checkpoint, guard)
        context["outlet_events"][AssetAlias(self.model_alias)].add(Asset(uri=uri), extra=extra)
        self.log.info("Published model %s (job %s) through asset alias %r", uri, job.id, self.model_alias)

    def finish_if_ended(self, job: TrainingJob, context: Context | None = None) -> dict[str, Any] | None:
        """One status check before waiting: a job that already ended ends the task now (no deferral)."""
        if not job.is_terminal:
            return None
        job = self.hook.final_view(job)
        self.publish_job(context, job, returned=job.state is JobState.SUCCEEDED)
        self.log.info("Training job %s", describe(job))
        job = self.completed_job(job)
        self.note_diverged(job)
        result = job_outcome(job)
        self.publish_model(context, job)
        return result

    @contextmanager
    def owning(self, job: TrainingJob) -> Iterator[None]:
        """Guard the steps between submitting ``job`` and waiting for it. A failure there (an XCom or
        task-state-store error, a bad trigger argument...) must not leave the job running with nobody
        waiting on it: it is cancelled if the policy says so, else left for the retry to re-attach.
        A job that ended, a lost platform (the retry re-attaches) and the deferral pass through."""
        try:
            yield
        except (TrainingJobFailed, TransientPlatformError, LostContactWithPlatform):
            raise
        except Exception as exc:
            decision = self.cancel_policy.decide(GiveUp.START_FAILED)
            if not decision.cancel:
                self.log.warning(
                    "The task failed before waiting for training job %s (%s); %s — a retry re-attaches",
                    job.id,
                    exc,
                    decision.reason,
                )
                raise
            self.log.warning(
                "The task failed before waiting for training job %s (%s): cancelling it", job.id, exc
            )
            try:
                self.cancel_and_report(job.id, GiveUp.START_FAILED.value)
            except TrainingPlatformError as cancel_error:
                self.log.error("Cancelling training job %s failed: %s", job.id, cancel_error)
            raise

    # -- waiting -----------------------------------------------------------------------------------
    def wait_on_worker(
        self, job: TrainingJob, context: Context | None = None, deadline: float | None = None
    ) -> WaitOutcome:
        """Run the wait here, holding the worker slot; ``on_kill`` wakes it up to stop.

        :param deadline: when ``execution_timeout`` runs out (UNIX seconds, :meth:`deadline_from_now`);
            the wait cancels a running job :func:`worker_deadline` seconds before it.
        :raises TrainingJobCancelledByAirflow: the task was killed meanwhile.
        """
        self._remember_try(context, deadline)
        hook = self.hook
        cursor = 0 if hook.dialect.capabilities.events else None
        logs, secrets = self._follow_log_on_worker()
        report = JobReport(self.log, secrets=secrets)
        report.progress(job)
        ends = self.worker_deadline(deadline)
        guards = self.guards if self.guards is not None and self.guards.any else None
        wait = wait_for_job(
            hook.ops, job.id, self.polling, self.cancel_policy, ends, cursor, guards=guards, logs=logs
        )
        try:
            outcome: WaitOutcome | None = hook.drive(wait, report, stop=self._stop)
        except WaitInterrupted:
            outcome = None
        if self._stop.is_set():
            self._after_kill(context)
        assert outcome is not None  # only the stop interrupts a wait
        return outcome

    def _remember_try(self, context: Context | None, deadline: float | None) -> None:
        """What ``on_kill`` needs to tell an interruption from a give-up, read now: it may not call
        Airflow for them from a signal handler."""
        self._deadline = deadline
        ti = context.get("ti") if context else None
        self._identity = TaskIdentity.from_context(context) if context and ti is not None else None
        self._retry_left = retry_left(ti)

    def _after_kill(self, context: Context | None) -> NoReturn:
        """After ``on_kill`` decided: wait (bounded) for the platform to finish the cancel it asked
        for, then stop; or, when it kept the job (an interruption), stop at once."""
        if self._kill_note is not None:
            self.log.log(*self._kill_note)
        result = self._kill_result
        if result is None and self._kill_interrupted:
            raise TrainingJobInterrupted(
                f"The worker stopped this try while the task was still running: "
                f"{platform_job(platform=self.hook.dialect.name, job_id=self.job_id)} keeps running"
                f"{' and the retry re-attaches to it' if self._retry_left else ''}"
            )
        if result is None:
            raise TrainingJobCancelledByAirflow(
                f"Task was killed; {platform_job(platform=self.hook.dialect.name, job_id=self.job_id)} "
                "was not cancelled"
            )
        if not result.already_terminal:
            assert self.job_id is not None  # on_kill cancelled it
            job = self.hook.wait_until(
                self.job_id,
                lambda j: j.is_terminal,
                self.cancel_policy.confirm_timeout,
                self.polling.confirm_interval,
            )
            result = complete_cancel_result(result, job)
            log_cancel(self.log, result, job)
            if context is not None:
                context["ti"].xcom_push(key="cancel_result", value=dump(result))
        raise TrainingJobCancelledByAirflow(
            f"Task was killed; {platform_job(platform=self.hook.dialect.name, job_id=self.job_id)} was cancelled"
        )

    def deadline_from_now(self, context: Context | None = None) -> float | None:
        """Absolute UNIX time when ``execution_timeout`` runs out for this try, if one is set:
        counted from the try's ``start_date`` (as Airflow counted it for deferred tasks before 3.x),
        not from when ``execute()`` began, which may be seconds later on a loaded worker (DAG
        parsing, start-up); from now when the start is not known."""
        timeout = getattr(self, "execution_timeout", None)
        if timeout is None:
            return None
        start = time.time()
        started = getattr(context.get("ti"), "start_date", None) if context else None
        if isinstance(started, datetime):
            start = min(start, started.timestamp())
        return start + timeout.total_seconds()

    @overload
    def worker_deadline(self, deadline: float) -> float: ...
    @overload
    def worker_deadline(self, deadline: None) -> None: ...
    @overload
    def worker_deadline(self, deadline: float | None) -> float | None: ...

    def worker_deadline(self, deadline: float | None) -> float | None:
        """When a wait on the worker gives up: :data:`WORKER_DEADLINE_LEAD` seconds (at most a fifth
        of ``execution_timeout``) before ``deadline``, Airflow's own SIGALRM."""
        timeout = getattr(self, "execution_timeout", None)
        if deadline is None or timeout is None:
            return deadline
        return deadline - min(WORKER_DEADLINE_LEAD, timeout.total_seconds() / 5)

    def defer_on(
        self,
        job: TrainingJob,
        context: Context,
        deadline: float | None,
        deadline_kind: DeadlineKind = "execution_timeout",
    ) -> NoReturn:
        """Defer to :class:`TrainingJobTrigger`; its ``deadline`` enforces ``execution_timeout``
        (3.3.2 does not while deferred) and ``defer_timeout``, whichever comes first, and Airflow's
        own deferral timeout is only a backstop: the scheduler checks it every 15 s
        (``[scheduler] trigger_timeout_check_interval``) and a worker must start before the job is
        cancelled, while the trigger cancels at the second.

        Publishes the job id in XCom first: the trigger's ``on_kill`` compares it with its own to
        tell a reassignment from a user's kill."""
        if self.defer_timeout and (deadline is None or time.time() + self.defer_timeout < deadline):
            deadline, deadline_kind = time.time() + self.defer_timeout, "defer_timeout"
        ti = context["ti"]
        ti.xcom_push(key=JOB_ID_XCOM_KEY, value=job.id)
        identity = TaskIdentity.from_context(context)
        if self.hook.dialect.capabilities.events:
            # The trigger keeps its event cursor here; an existing key spares it a "not found" on
            # start. Only that: a failure to write it must not fail the task (the trigger starts at 0).
            try:
                ti.xcom_push(key=event_cursor_key(identity.try_number), value=0)
            except Exception as exc:  # noqa: BLE001
                self.log.warning("Event cursor not initialised (%s)", exc)
        unreferenced = False
        if self.stream_logs and self.hook.dialect.capabilities.program_logs:
            try:  # the trigger's program-log cursor, as the event cursor (None: from the start)
                ti.xcom_push(key=log_cursor_key(identity.try_number), value=None)
            except Exception as exc:  # noqa: BLE001
                self.log.warning("Log cursor not initialised (%s)", exc)
            # the triggerer cannot mask values it never sees: it writes no program line (said once, here)
            unreferenced = self.has_unreferenced_secrets()
            if unreferenced:
                note_unreferenced_secrets(self.log)
        trigger = TrainingJobTrigger(
            conn_id=self.conn_id,
            job_id=job.id,
            deadline=deadline,
            deadline_kind=deadline_kind,
            deferred_at=time.time(),
            dag_id=identity.dag_id,
            run_id=identity.run_id,
            task_id=identity.task_id,
            map_index=identity.map_index,
            try_number=identity.try_number,
            stream_logs=self.stream_logs,
            secret_references=json.dumps(self.program_secret_references()) if self.stream_logs else None,
            unreferenced_secrets=unreferenced,
            **self.polling.model_dump(exclude={"clear_grace"}),
            **self.cancel_policy.model_dump(),
            **(self.guards.model_dump(mode="json") if self.guards is not None and self.guards.any else {}),
        )
        # a backstop only: the trigger's own deadline comes first
        timeout = None if deadline is None else max(1.0, deadline - time.time()) + DEFER_TIMEOUT_SLACK
        self.defer(trigger=trigger, method_name="execute_complete", timeout=timeout)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after the trigger fired: its event is a wait outcome; conclude from it."""
        return self.conclude(parse_outcome(event), context)

    # -- giving up ---------------------------------------------------------------------------------
    def cancel_and_report(
        self,
        job_id: str,
        reason: str,
        context: Context | None = None,
        confirm_until: float | None = None,
        sent: bool = False,
    ) -> CancelResult:
        """Cancel ``job_id`` as the policy asks, wait (bounded: ``confirm_cancel_timeout`` seconds,
        and no later than ``confirm_until``, UNIX seconds) for the platform to confirm, log and
        publish the result (XCom ``cancel_result``).

        :param sent: this task's cancel was already sent (by its trigger, at the deadline): a job
            found ended is one that cancel stopped (``already_terminal`` false)."""
        timeout = self.cancel_policy.confirm_timeout
        if confirm_until is not None:
            timeout = max(0.0, min(timeout, confirm_until - time.time()))
        result, job = self.hook.cancel_and_confirm(
            job_id, self.cancel_policy.request(reason), timeout, self.polling.confirm_interval
        )
        if sent and result.already_terminal:
            result = result.model_copy(update={"already_terminal": False})
        log_cancel(self.log, result, job)
        if context is not None:
            context["ti"].xcom_push(key="cancel_result", value=dump(result))
        return result

    def on_kill(self) -> None:
        """Worker-side kill (SIGTERM, ``execution_timeout``): decide whether Airflow gave up on the
        task or the worker's process is just being stopped, cancel if the policy says so, then make
        ``execute()`` stop.

        Airflow calls this when it gives up (a user marked the task failed or cleared it, its DAG
        run failed, ``execution_timeout``) and also when the worker itself is stopped (a deploy, an
        eviction: the supervisor forwards the SIGTERM). Only the task instance's state tells them
        apart (:meth:`CancelPolicy.after_worker_kill`): it is asked of Airflow here, through the
        supervisor, within :data:`ON_KILL_VERIFY_TIMEOUT` seconds.

        Returns within a few seconds: on a server-initiated kill the supervisor SIGKILLs the task
        5 s after SIGTERM. So one cancel call with a short timeout here (a fresh hook: the signal may
        have interrupted a request of the main hook); confirmation happens back in ``execute()``,
        which stops once the outcome of that call is known.

        Airflow calls this from its SIGTERM handler, on the main thread, wherever the signal
        interrupted it, possibly inside a log write holding the log file's lock (structlog's, not
        re-entrant) or a request to the supervisor holding its channel's lock. So nothing here logs
        or asks the secrets backend, and the state question runs in a thread that is given up on
        after the timeout: what happened is kept in ``_kill_note`` and ``execute()`` logs it once
        the handler has returned.
        """
        if self._killing:  # a second SIGTERM (the supervisor's, after the process group's) landed in it
            return
        self._killing = True
        try:
            self._kill_result, self._kill_note = self._cancel_on_kill()
        finally:
            self._stop.set()

    def _cancel_on_kill(self) -> tuple[CancelResult | None, tuple[int, str] | None]:
        if not self.job_id:
            return None, None
        started = time.monotonic()
        timed_out = isinstance(sys.exc_info()[1], AirflowTaskTimeout) or self._past_deadline()
        verified, state = (False, None)
        if self.cancel_policy.cancel_on_kill and not timed_out:
            verified, state = self._task_instance_state_now()
        decision = self.cancel_policy.after_worker_kill(
            state, verified=verified, timed_out=timed_out, retry_left=self._retry_left
        )
        if not decision.cancel:
            self._kill_interrupted = decision.interrupted
            failed = (
                f"; reading it failed: {', '.join(self._verify_failures)}" if self._verify_failures else ""
            )
            return None, (logging.WARNING, f"Task killed: {decision.reason} (job {self.job_id}{failed})")
        # the connection already read by the main hook: no secrets-backend call in a signal handler;
        # each of the cancel's two calls gets half of what is left of the budget
        call_timeout = max(0.5, (ON_KILL_BUDGET - (time.monotonic() - started)) / 2)
        hook = self.hook.sibling(RetryPolicy(call_timeout=call_timeout, max_attempts=1))
        reason = GiveUp.EXECUTION_TIMEOUT if timed_out else GiveUp.WORKER_KILLED
        try:
            result = hook.cancel_job(self.job_id, self.cancel_policy.request(reason.value))
        except TrainingPlatformError as exc:
            return None, (logging.ERROR, f"Cancelling training job {self.job_id} on kill failed: {exc}")
        note = (
            f"Task killed: cancel of training job {self.job_id} requested (state {result.state.value}, "
            f"final checkpoint {result.final_checkpoint_id or 'pending'}): {decision.reason}"
        )
        return result, (logging.WARNING, note)

    def _past_deadline(self) -> bool:
        """The try's ``execution_timeout`` has (all but) run out: Airflow's SIGALRM is due."""
        deadline = self._deadline
        return deadline is not None and time.time() >= (self.worker_deadline(deadline) or deadline)

    def _task_instance_state_now(self) -> tuple[bool, str | None]:
        """``(answered, state)``: the task instance's state as the API server sees it, asked in a
        thread and given up on after :data:`ON_KILL_VERIFY_TIMEOUT` seconds (the signal may have
        interrupted this very thread inside a request to the supervisor: the thread then waits for
        that request's lock and the question goes unanswered, which the policy treats as such). A
        question that fails at once (the supervisor busy with the same signal) is asked again until
        then."""
        identity = self._identity
        if identity is None:
            return False, None
        answer: dict[str, str | None] = {}
        failures: list[str] = []
        deadline = time.monotonic() + ON_KILL_VERIFY_TIMEOUT

        def ask() -> None:
            while time.monotonic() < deadline:
                try:
                    answer["state"] = task_instance_state(identity)
                    return
                except Exception as exc:  # noqa: BLE001 - unanswered: the policy decides what that means
                    failures.append(type(exc).__name__)
                    time.sleep(0.1)

        thread = threading.Thread(target=ask, name=f"on-kill-state-{self.job_id}", daemon=True)
        thread.start()
        thread.join(ON_KILL_VERIFY_TIMEOUT)
        self._verify_failures = sorted(set(failures))  # said in the kill note (no logging here)
        return ("state" in answer), answer.get("state")

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """On ``__fail__`` (deferral timed out, trigger crashed) cancel the job, if the policy says so,
        then fail naming the platform, the job and what became of it (Airflow's own exception says
        only "Trigger failure"). The job id comes from XCom: ``next_kwargs`` are replaced by the
        error here.

        :raises TaskDeferralTimeout: the deferral timed out (``defer_timeout``).
        :raises TaskDeferralError: the trigger failed.
        """
        if next_method != TRIGGER_FAIL_REPR:
            return super().resume_execution(next_method, next_kwargs, context)
        from airflow.sdk.exceptions import TaskDeferralError, TaskDeferralTimeout

        next_kwargs = next_kwargs or {}
        raw = next_kwargs.get("error") or "Trigger failure"
        timed_out = raw == "Trigger timeout"  # Airflow's TriggerFailureReason is a str: equal to its value
        error = str(getattr(raw, "value", raw))
        if traceback := next_kwargs.get("traceback"):
            self.log.error("Trigger failed:\n%s", "\n".join(traceback))
        try:
            job_id = current_job_id(TaskIdentity.from_context(context)) or self.job_id
        except Exception as exc:  # noqa: BLE001 - no XCom access (dag.test, this process's tests)
            self.log.warning("The job id of this try could not be read (%s)", exc)
            job_id = self.job_id
        fate = "no job was recorded for this try"
        if job_id:
            self.job_id = job_id
            fate = self._give_up_after_deferral(job_id, error, context)
        what = platform_job(platform=self._platform_name(), job_id=job_id) if job_id else "a training job"
        exception = TaskDeferralTimeout if timed_out else TaskDeferralError
        raise exception(f"{error} while waiting on {what}: {fate}")

    def _give_up_after_deferral(self, job_id: str, error: str, context: Context) -> str:
        """Cancel ``job_id`` after a failed deferral if the policy says so; what became of it."""
        decision = self.cancel_policy.decide(GiveUp.DEFERRAL_FAILED)
        if not decision.cancel:
            return f"the job was left running ({decision.reason})"
        self.log.warning("Deferral failed (%s): cancelling training job %s", error, job_id)
        try:
            result = self.cancel_and_report(job_id, GiveUp.DEFERRAL_FAILED.value, context)
        except TrainingPlatformError as exc:
            self.log.error("Cancelling training job %s failed: %s", job_id, exc)
            return f"cancelling the job failed ({exc}); it may still be running"
        if result.already_terminal:
            return f"the job had already ended {result.state.value}"
        return f"the job was cancelled (state {result.state.value}, final checkpoint {result.final_checkpoint_id})"

    def _platform_name(self) -> str | None:
        try:
            return self.hook.dialect.name
        except Exception:  # noqa: BLE001 - only for the message
            return None
