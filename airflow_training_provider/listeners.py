"""Mark failed with no triggerer running the trigger: the API server cancels the job at once.

When a user sets a deferred task instance (or its DAG run) to failed, Airflow 3.3's API server
calls ``on_task_instance_failed(previous_state=None, task_instance=<ORM TaskInstance>, error=
"TaskInstance's state was manually set to `failed`.")`` in its own process, inside the request
(``api_fastapi/core_api/services/public/task_instances.py`` ``_emit_state_listener_hooks``; the
DAG run PATCH calls it for every task instance it killed). At that moment the TI is ``failed``
in the request's not yet committed transaction, still holds ``trigger_id`` and ``next_method``,
and the trigger row still exists: only a triggerer's clean-up (``Trigger.clean_unused``) detaches
and deletes it later.

The trigger's verified ``on_kill`` cancels the job only if a live triggerer runs the trigger.
When none does (the triggerers are down, or none has picked the trigger up yet), this listener
does it instead, from the API server:

1. on the request thread: only the manual path is accepted (:func:`marked_failed`: an ORM task
   instance, ``previous_state=None``, Airflow's "manually set to `failed`" message, a trigger);
   a worker's own failure (``RuntimeTaskInstance``, ``previous_state=RUNNING``), the scheduler's
   and every other state change pass. The rest runs on a few daemon threads: the PATCH never waits.
2. off the request: once the state change is committed, in one transaction holding the trigger
   row's lock, read the trigger (a :class:`~airflow_training_provider.triggers.training_job.
   TrainingJobTrigger` for this try of this task instance, kwargs decrypted), whether its
   triggerer is alive, and the job id the try published in XCom; decide (:func:`decide`); if the
   decision is to act, **claim** the trigger: detach it from the task instance and delete it —
   what ``Trigger.clean_unused`` does at a triggerer's next loop, done now for this one trigger.
3. cancel the job through the task's own connection and cancel policy, then wait (bounded by the
   policy's ``confirm_timeout``) for the platform to confirm, and log the outcome.

**One accepted cancel, never two.** The listener acts only when no live triggerer holds the
trigger, and its claim makes sure none ever will: a triggerer assigns itself a trigger with an
``UPDATE`` of the trigger row, which waits for the lock held here and then finds the row gone,
and its ``load_triggers`` never returns a deleted trigger — so no ``on_kill`` of this trigger can
run after the claim. A triggerer that took the trigger before the lock was taken is alive by its
heartbeat: the listener leaves the cancel to that triggerer's ``on_kill``. What is left is a
triggerer Airflow already counts as dead (no heartbeat for ``triggerer_health_check_threshold``
seconds) that was still running the trigger and wakes up: it sees its trigger gone and runs
``on_kill``, which cancels through ``cancel_job`` — and that skips a job already stopping or
ended (``no_cancel_needed``), as the job is by then, the listener having cancelled it the moment
the user acted. If the listener's cancel fails, no ``on_kill`` follows (the claim removed the
trigger): the orphan reaper (:mod:`~airflow_training_provider.operators.reaper`) remains the last
net, unchanged.

Registered through the provider's plugin (``TrainingJobViewPlugin.listeners``). The API server
must have the provider installed and be able to read the task's connection (``AIRFLOW_CONN_*``
variables, its metadata database or a secrets backend); ``[training_provider]
mark_failed_listener = False`` turns it off.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from pluggy import HookimplMarker

from airflow_training_provider.cancellation import CancelPolicy
from airflow_training_provider.identity import TaskIdentity
from airflow_training_provider.task_instance_lookup import JOB_ID_XCOM_KEY

log = logging.getLogger(__name__)

# Airflow's listener marker (``airflow.listeners.hookimpl`` in the API server and scheduler,
# ``airflow.sdk``'s on workers: both are this project name), without importing either here.
hookimpl = HookimplMarker("airflow")

TRIGGER_CLASSPATH = "airflow_training_provider.triggers.training_job.TrainingJobTrigger"
"""The classpath the training trigger serializes to (the ``classpath`` of its trigger row)."""
MANUAL_FAILED_PREFIX = "TaskInstance's state was manually set to"
"""How Airflow's API server words the ``error`` of a state a user set (3.3)."""
CANCEL_REASON = "Airflow task was marked failed (itself or its DAG run) while no triggerer ran its trigger"
"""The reason recorded with the platform's cancel."""
COMMIT_WAIT = 10.0
"""Seconds the listener waits for the PATCH's transaction to commit (it is called before)."""
CONFIG_SECTION = "training_provider"
CONFIG_OPTION = "mark_failed_listener"


@dataclass(frozen=True)
class MarkedFailed:
    """A deferred task instance a user has just set to failed (what the request thread keeps).

    :ivar ti_id: the task instance's id (its ``task_instance.id``, a UUID string).
    :ivar identity: dag, run, task, map index and try number of the task instance.
    :ivar trigger_id: the id of the trigger row it was deferred on.
    :ivar marked_at: UNIX time (seconds) the listener was called.
    """

    ti_id: str
    identity: TaskIdentity
    trigger_id: int
    marked_at: float

    @property
    def label(self) -> str:
        """``dag/run/task[map index] try n``, for the API server log."""
        i = self.identity
        return f"{i.dag_id}/{i.run_id}/{i.task_id}[{i.map_index}] try {i.try_number}"


def marked_failed(previous_state: Any, task_instance: Any, error: Any) -> MarkedFailed | None:
    """The task instance the API server's manual set-to-failed path reports, if it is a deferred
    one; ``None`` for everything else.

    Accepted: ``previous_state`` is ``None``, ``error`` is Airflow's "manually set to `failed`"
    message, ``task_instance`` is the metadata database's ``TaskInstance`` (not the Task SDK's
    ``RuntimeTaskInstance`` a worker passes for a task that failed by itself) and it still holds the
    id of the trigger it was deferred on. Reads only attributes already loaded on the object.
    """
    if previous_state is not None or not isinstance(error, str):
        return None
    if not (error.startswith(MANUAL_FAILED_PREFIX) and "failed" in error[len(MANUAL_FAILED_PREFIX) :]):
        return None
    if type(task_instance).__module__ != "airflow.models.taskinstance":
        return None
    trigger_id = getattr(task_instance, "trigger_id", None)
    if trigger_id is None:
        return None  # not deferred (a running task's own on_kill handles it on the worker)
    map_index = task_instance.map_index
    return MarkedFailed(
        ti_id=str(task_instance.id),
        identity=TaskIdentity(
            task_instance.dag_id,
            task_instance.run_id,
            task_instance.task_id,
            -1 if map_index is None else int(map_index),
            int(task_instance.try_number),
        ),
        trigger_id=int(trigger_id),
        marked_at=time.time(),
    )


@dataclass(frozen=True)
class TriggerFacts:
    """What the metadata database says once the state change is committed.

    :ivar ti_state: the task instance's state now (``None`` if it has none or is gone).
    :ivar ti_try_number: its try number now.
    :ivar classpath: the trigger row's classpath; ``None`` if the row is gone (a triggerer's
        clean-up already removed it).
    :ivar kwargs: the trigger's decrypted kwargs (``{}`` if the row is gone).
    :ivar triggerer_id: the triggerer job the trigger is assigned to, if any.
    :ivar triggerer_live: that triggerer is alive by its heartbeat (Airflow's own rules).
    :ivar published_job_id: the job id the task instance's current try published (XCom ``job_id``).
    """

    ti_state: str | None
    ti_try_number: int | None
    classpath: str | None
    kwargs: dict[str, Any]
    triggerer_id: int | None
    triggerer_live: bool
    published_job_id: str | None


@dataclass(frozen=True)
class Verdict:
    """What the listener does about one marked task instance, and why (for the API server log).

    :ivar act: claim the trigger and cancel the job.
    :ivar reason: why (or why not).
    :ivar conn_id: the task's platform connection (when acting).
    :ivar job_id: the job to cancel (when acting).
    :ivar policy: the task's cancel policy (when acting).
    :ivar confirm_interval: seconds between polls while the platform confirms the cancel.
    """

    act: bool
    reason: str
    conn_id: str | None = None
    job_id: str | None = None
    policy: CancelPolicy | None = None
    confirm_interval: float = 1.0


def _leave(reason: str) -> Verdict:
    return Verdict(False, reason)


def decide(mark: MarkedFailed, facts: TriggerFacts) -> Verdict:
    """Whether the listener cancels the job of task instance ``mark``, given ``facts``.

    It acts only for a training trigger of this very try, of a task whose policy cancels on kill,
    waiting on the job the try published, when the task is now ``failed`` and no live triggerer
    holds the trigger (then that triggerer's ``on_kill`` does it). Pure.

    :raises pydantic.ValidationError: the trigger's policy fields are not valid (not ours to fix).
    """
    if facts.classpath is None:
        return _leave("its trigger is gone: a triggerer's clean-up took it (its on_kill, else the reaper)")
    if facts.classpath != TRIGGER_CLASSPATH:
        return _leave(f"not a training task (trigger {facts.classpath})")
    kw, ident = facts.kwargs, mark.identity
    if (kw.get("dag_id"), kw.get("run_id"), kw.get("task_id"), kw.get("map_index", -1)) != (
        ident.dag_id,
        ident.run_id,
        ident.task_id,
        ident.map_index,
    ) or kw.get("try_number") != facts.ti_try_number:
        return _leave("the trigger is not this task instance's current try")
    if facts.ti_state != "failed":
        return _leave(f"the task instance is {facts.ti_state or 'without a state'} now, not failed")
    policy = CancelPolicy(**{k: v for k, v in kw.items() if k in CancelPolicy.model_fields})
    if not policy.cancel_on_kill:
        return _leave("cancel_on_kill is off: the job keeps running")
    job_id, conn_id = kw.get("job_id"), kw.get("conn_id")
    if not job_id or not conn_id:
        return _leave("the trigger names no job or connection")
    if facts.published_job_id != job_id:
        return _leave(f"the try published job {facts.published_job_id}, not the trigger's {job_id}")
    if facts.triggerer_live:
        return _leave(f"triggerer {facts.triggerer_id} is alive and runs the trigger: its on_kill cancels")
    who = f"triggerer {facts.triggerer_id} is not alive" if facts.triggerer_id else "no triggerer took it"
    return Verdict(
        True,
        f"marked failed while no live triggerer runs its trigger ({who})",
        conn_id=str(conn_id),
        job_id=str(job_id),
        policy=policy,
        confirm_interval=float(kw.get("confirm_interval") or 1.0),
    )


class Metadata(Protocol):
    """The listener's access to the metadata database (the real one: :class:`AirflowMetadata`)."""

    def examine(self, mark: MarkedFailed, claim: bool) -> Verdict | None:
        """Decide about ``mark`` (:func:`decide`) and, with ``claim`` and an acting verdict, claim
        its trigger in the same transaction; ``None`` while the state change is not committed."""
        ...


class AirflowMetadata:
    """:class:`Metadata` on Airflow's ORM (the API server's own database session factory)."""

    def examine(self, mark: MarkedFailed, claim: bool) -> Verdict | None:
        """One transaction: read the facts and :func:`decide`; with ``claim``, holding the trigger
        row's lock, and claim the trigger when the verdict is to act (detach it from the task
        instance, delete it) before committing. Without ``claim`` nothing is locked or written.

        :returns: the verdict; ``None`` if the task instance is still ``deferred`` (the PATCH's
            transaction has not committed yet).
        :raises sqlalchemy.exc.SQLAlchemyError: the database failed.
        """
        from airflow.utils.session import create_session

        with create_session(scoped=False) as session:
            return self._examine(session, mark, claim)

    def _examine(self, session: Any, mark: MarkedFailed, claim: bool) -> Verdict | None:
        from airflow.models.taskinstance import TaskInstance
        from airflow.models.trigger import Trigger
        from airflow.utils.state import TaskInstanceState
        from sqlalchemy import delete, select, update

        ti_id = uuid.UUID(mark.ti_id)
        query = select(Trigger).where(Trigger.id == mark.trigger_id)
        trigger = session.scalar(query.with_for_update() if claim else query)
        row = session.execute(
            select(TaskInstance.state, TaskInstance.try_number).where(TaskInstance.id == ti_id)
        ).one_or_none()
        state = _state_value(row[0]) if row else None
        if state == TaskInstanceState.DEFERRED.value:
            session.rollback()  # not committed yet (or undone): release the lock, look again shortly
            return None
        ours = trigger is not None and trigger.classpath == TRIGGER_CLASSPATH
        facts = TriggerFacts(
            ti_state=state,
            ti_try_number=row[1] if row else None,
            classpath=trigger.classpath if trigger is not None else None,
            kwargs=trigger.kwargs if ours else {},
            triggerer_id=trigger.triggerer_id if trigger is not None else None,
            triggerer_live=_triggerer_live(session, trigger.triggerer_id if trigger is not None else None),
            published_job_id=_published_job_id(session, mark.identity) if ours else None,
        )
        verdict = decide(mark, facts)
        if not (claim and verdict.act):
            return verdict
        # The claim — exactly Trigger.clean_unused's two steps, for this trigger only. The detach
        # comes first: task_instance.trigger_id's foreign key cascades a delete to the TI.
        session.execute(
            update(TaskInstance)
            .where(
                TaskInstance.id == ti_id,
                TaskInstance.trigger_id == mark.trigger_id,
                TaskInstance.state != TaskInstanceState.DEFERRED,
            )
            .values(trigger_id=None)
            .execution_options(synchronize_session=False)
        )
        deleted = session.execute(
            delete(Trigger)
            .where(
                Trigger.id == mark.trigger_id,
                ~Trigger.task_instance.has(),
                ~Trigger.assets.any(),
                ~Trigger.callback.has(),
            )
            .execution_options(synchronize_session=False)
        ).rowcount
        if deleted != 1:
            session.rollback()
            return _leave("the trigger could not be claimed (still in use): left to its triggerer")
        return verdict  # committed by create_session


def _state_value(state: Any) -> str | None:
    return None if state is None else str(getattr(state, "value", state))


def _triggerer_live(session: Any, triggerer_id: int | None) -> bool:
    """Whether triggerer job ``triggerer_id`` is alive by either of Airflow's rules: ``Job.is_alive``
    (running, a heartbeat within ``[triggerer] triggerer_health_check_threshold``) or the one a
    triggerer applies before taking another's triggers over (no end date, a heartbeat within the
    threshold). Either says alive → its ``on_kill`` is expected to act."""
    if triggerer_id is None:
        return False
    from airflow.configuration import conf
    from airflow.jobs.job import Job

    job = session.get(Job, triggerer_id)
    if job is None or job.latest_heartbeat is None:
        return False
    threshold = conf.getfloat("triggerer", "triggerer_health_check_threshold")
    fresh = (datetime.now(UTC) - job.latest_heartbeat).total_seconds() < threshold
    return bool(job.is_alive() or (job.end_date is None and fresh))


def _published_job_id(session: Any, identity: TaskIdentity) -> str | None:
    """The job id the task instance's current try pushed to XCom (key ``job_id``)."""
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    row = session.scalar(
        select(XComModel).where(
            XComModel.dag_id == identity.dag_id,
            XComModel.run_id == identity.run_id,
            XComModel.task_id == identity.task_id,
            XComModel.map_index == identity.map_index,
            XComModel.key == JOB_ID_XCOM_KEY,
        )
    )
    value = XComModel.deserialize_value(row) if row is not None else None
    return str(value) if value is not None else None


class _DaemonWorkers:
    """A few daemon threads working a bounded queue: a full queue refuses (the reaper is the net);
    an API server exiting does not wait for them. Restarted in a forked child (gunicorn)."""

    def __init__(self, name: str, threads: int, capacity: int = 1000) -> None:
        self.name, self.threads, self.capacity = name, threads, capacity
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._queue: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...]]] = queue.Queue()

    def submit(self, fn: Callable[..., Any], *args: Any) -> bool:
        """Queue ``fn(*args)`` for a worker thread (started on first use in this process).

        :returns: ``False`` if the queue is full (``capacity`` calls waiting): nothing was queued.
        """
        with self._lock:
            if self._pid != os.getpid():
                self._pid, self._queue = os.getpid(), queue.Queue(maxsize=self.capacity)
                for i in range(self.threads):
                    threading.Thread(
                        target=self._work, args=(self._queue,), name=f"{self.name}-{i}", daemon=True
                    ).start()
        try:
            self._queue.put_nowait((fn, args))
        except queue.Full:
            return False
        return True

    def _work(self, jobs: queue.Queue) -> None:
        while True:
            fn, args = jobs.get()
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - a listener must never take its thread down
                log.exception("Mark-failed listener: %s failed", getattr(fn, "__name__", fn))


class MarkFailedListener:
    """The Airflow listener (``on_task_instance_failed``) behind "mark failed with no triggerer";
    see the module documentation.

    :param metadata: the metadata database access (default :class:`AirflowMetadata`).
    :param hook_factory: ``hook_factory(conn_id)`` → a
        :class:`~airflow_training_provider.hooks.training.TrainingPlatformHook` (default: the hook).
    :param submit: runs ``fn(*args)`` off the request thread, returning ``False`` if it cannot take
        more (default: 4 daemon threads); ``confirm_submit`` likewise for the confirmations, kept
        apart so a slow stop never delays the next cancel (default: 4 more).
    """

    def __init__(
        self,
        metadata: Metadata | None = None,
        hook_factory: Callable[[str], Any] | None = None,
        submit: Callable[..., bool] | None = None,
        confirm_submit: Callable[..., bool] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.metadata = metadata or AirflowMetadata()
        self.hook_factory = hook_factory or _platform_hook
        self.submit = submit or _DaemonWorkers("training-mark-failed", 4).submit
        self.confirm_submit = confirm_submit or _DaemonWorkers("training-mark-failed-confirm", 4).submit
        self.sleep = sleep

    @hookimpl
    def on_task_instance_failed(self, previous_state: Any, task_instance: Any, error: Any) -> None:
        """Airflow's hook. Returns at once: the work runs off the request thread. Never raises."""
        try:
            mark = marked_failed(previous_state, task_instance, error)
            if mark is None or not _enabled():
                return
            if not self.submit(self.handle, mark):
                log.error(
                    "Mark-failed listener: too many cancels pending; task %s left to the orphan reaper",
                    mark.label,
                )
        except Exception:  # noqa: BLE001 - a listener must never fail the user's request
            log.exception("Mark-failed listener: could not look at the task instance")

    def handle(self, mark: MarkedFailed) -> Verdict | None:
        """Examine ``mark`` once its state change is committed; if the verdict is to act, read the
        connection, claim the trigger and cancel. Runs on a listener thread.

        The connection is read before the claim: a connection the API server cannot read leaves
        the trigger in place, so a triggerer that comes back still runs its ``on_kill``.

        :returns: the final verdict (``None`` if the state change never became visible or the
            connection could not be read).
        """
        verdict = self._committed_verdict(mark)
        if verdict is None:
            return None
        if not verdict.act:
            log.info("Mark-failed listener: %s: %s; not cancelling", mark.label, verdict.reason)
            return verdict
        assert verdict.conn_id  # an acting verdict names its connection
        try:
            hook = self.hook_factory(verdict.conn_id)
            platform = hook.platform_connection.platform.display_name
        except Exception as exc:  # noqa: BLE001 - not ours to fix; the other nets stay in place
            log.error(
                "Mark-failed listener: %s: connection %s is not readable in the API server (%s); job %s "
                "is left to the trigger's on_kill once a triggerer runs it, else the orphan reaper",
                mark.label,
                verdict.conn_id,
                exc,
                verdict.job_id,
            )
            return None
        verdict = self.metadata.examine(mark, claim=True) or _leave("the task instance is deferred again")
        if not verdict.act:
            log.info("Mark-failed listener: %s: %s; not cancelling", mark.label, verdict.reason)
            return verdict
        self.cancel(mark, verdict, hook, platform)
        return verdict

    def _committed_verdict(self, mark: MarkedFailed) -> Verdict | None:
        """The verdict once the state change is visible (the listener is called before the PATCH
        commits); ``None`` if it never becomes visible within :data:`COMMIT_WAIT` seconds."""
        deadline = time.monotonic() + COMMIT_WAIT
        while (verdict := self.metadata.examine(mark, claim=False)) is None:
            if time.monotonic() > deadline:
                log.warning(
                    "Mark-failed listener: %s still deferred %.0f s after it was marked failed; not acting",
                    mark.label,
                    COMMIT_WAIT,
                )
                return None
            self.sleep(0.1)
        return verdict

    def cancel(self, mark: MarkedFailed, verdict: Verdict, hook: Any, platform: str) -> None:
        """Cancel ``verdict.job_id`` through ``hook`` as the task's policy asks (the trigger is
        claimed: nobody else will), then have the confirmation waited for on a confirm thread.
        Errors are logged: the orphan reaper cancels the job later."""
        assert verdict.job_id and verdict.policy  # an acting verdict has them
        log.warning(
            "Mark-failed listener: %s %s: cancelling job %s on %s (connection %s)",
            mark.label,
            verdict.reason,
            verdict.job_id,
            platform,
            verdict.conn_id,
        )
        try:
            result = hook.cancel_job(verdict.job_id, verdict.policy.request(CANCEL_REASON))
        except Exception as exc:  # noqa: BLE001 - logged; the reaper cancels it later
            log.error(
                "Mark-failed listener: cancelling job %s on %s failed (%s); the orphan reaper will cancel it",
                verdict.job_id,
                platform,
                exc,
            )
            return
        if result.already_terminal:
            log.info(
                "Mark-failed listener: job %s had already ended (%s)", verdict.job_id, result.state.value
            )
            return
        log.warning(
            "Mark-failed listener: cancel of job %s on %s sent %.2f s after the mark (job %s)",
            verdict.job_id,
            platform,
            time.time() - mark.marked_at,
            result.state.value,
        )
        if not self.confirm_submit(self.confirm, hook, result, verdict):
            log.info(
                "Mark-failed listener: not waiting for job %s to stop (too many pending)", verdict.job_id
            )

    @staticmethod
    def confirm(hook: Any, result: Any, verdict: Verdict) -> None:
        """Wait (at most the policy's ``confirm_timeout``) until the platform reports the job ended;
        log its final state, checkpoint, metrics and cost."""
        from airflow_training_provider.models import complete_cancel_result

        assert verdict.job_id and verdict.policy
        job = hook.wait_until(
            verdict.job_id, lambda j: j.is_terminal, verdict.policy.confirm_timeout, verdict.confirm_interval
        )
        final = complete_cancel_result(result, job)
        log.warning(
            "Mark-failed listener: job %s %s; %s, metrics %s, cost $%s",
            verdict.job_id,
            job.state.value,
            final.final_checkpoint_text(),
            final.final_metrics,
            final.cost.total_usd,
        )


def _platform_hook(conn_id: str) -> Any:
    from airflow_training_provider.hooks.training import TrainingPlatformHook

    return TrainingPlatformHook(conn_id)


def _enabled() -> bool:
    from airflow.configuration import conf

    return conf.getboolean(CONFIG_SECTION, CONFIG_OPTION, fallback=True)


def warm_up() -> None:
    """In the API server only (where ``airflow.api_fastapi.main`` builds the app and loads the
    plugins), import on a daemon thread what the listener's first cancel needs (the sync hook,
    the HTTP provider, the platforms' dialects): a cold first call would add a few seconds of
    imports between the user's action and the cancel. Elsewhere nothing happens."""
    if "airflow.api_fastapi.main" not in sys.modules:
        return

    def _import() -> None:
        try:
            import airflow.jobs.job  # noqa: F401
            import airflow.models.trigger  # noqa: F401
            import airflow.models.xcom  # noqa: F401

            import airflow_training_provider.hooks.training  # noqa: F401
        except Exception:  # noqa: BLE001 - an import error shows again, logged, where it matters
            log.debug("Mark-failed listener: warm-up import failed", exc_info=True)

    threading.Thread(target=_import, name="training-mark-failed-warm-up", daemon=True).start()


LISTENER = MarkFailedListener()
"""The instance the plugin registers (one per process; Airflow registers an object once)."""
