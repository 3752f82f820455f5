"""The one polling trigger: waits for a training job on any platform to reach a terminal state.

``run()`` drives the shared wait (:func:`~airflow_training_provider.lifecycle.waiting.wait_for_job`)
and is idempotent: the triggerer re-runs it from the top after a restart or a reassignment, with the
same kwargs. It never cancels anything on the way out (not in ``except CancelledError``, not in
``cleanup()``): both also fire on a triggerer restart. Cancels happen at the ``execution_timeout``
deadline (if the policy says so) and in the verified ``on_kill`` (``docs/airflow-kill-paths.md``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

from airflow.triggers.base import BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async
from tenacity import AsyncRetrying, stop_after_attempt, wait_exponential

from airflow_training_provider.cancellation import CancelPolicy, Decision, GiveUp
from airflow_training_provider.hooks.training_async import (
    AsyncTrainingPlatformClient,
    AsyncTrainingPlatformHook,
)
from airflow_training_provider.hooks.transport import RetryPolicy
from airflow_training_provider.identity import TaskIdentity
from airflow_training_provider.lifecycle.guards import Guards
from airflow_training_provider.lifecycle.operations import LogFollow, NewEvents, NewLogLines, Progress, Step
from airflow_training_provider.lifecycle.waiting import (
    DeadlineKind,
    DeadlineReached,
    Polling,
    outcome_payload,
    poll_phase_delay,
    wait_for_job,
)
from airflow_training_provider.program_logs import SecretLines, note_unavailable, resolve_secrets
from airflow_training_provider.progress import JobReport
from airflow_training_provider.task_instance_lookup import (
    current_job_id,
    get_event_cursor,
    get_log_cursor,
    set_event_cursor,
    set_log_cursor,
    task_instance_state,
)
from airflow_training_provider.task_log import TaskLog
from airflow_training_provider.triggers.heap import start_gc_freezer
from airflow_training_provider.triggers.shutdown import stopping, watch_stop_signals

# Strong references to in-flight on_kill cancellations: a task only weakly referenced by the loop
# could be garbage-collected mid-cancel.
_BACKGROUND_CANCELS: set[asyncio.Task] = set()
_T = TypeVar("_T")

#: seconds the event waits after the last events were written to the log (see ``run``).
LOG_DRAIN_SECONDS = 2.0
#: tries to read a saved cursor (event, program log) when the trigger starts (1 s, 2 s apart).
CURSOR_READ_ATTEMPTS = 3

_POLICY_FIELDS = frozenset(CancelPolicy.model_fields)
_POLLING_FIELDS = frozenset(Polling.model_fields)
_GUARD_FIELDS = frozenset(Guards.model_fields)


async def _retried(call: Callable[[], _T], attempts: int) -> _T:
    """``call()`` (synchronous: the API server, a secrets backend) in a thread, tried up to
    ``attempts`` times, 1 s, 2 s … apart: a triggerer that has just started may not reach them yet.

    :raises Exception: the last try's failure."""
    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(attempts), wait=wait_exponential(1, max=4), reraise=True
    ):
        with attempt:
            # shielded: a cancel while the thread runs reaches the trigger as it was sent. Unshielded,
            # asgiref cancels its own wrapper and raises a CancelledError without the cancel's
            # message (or none at all), and the triggerer then takes a user's "mark failed" for a
            # shutdown and never calls on_kill (found under load: the job kept running)
            return await asyncio.shield(sync_to_async(call)())
    raise AssertionError("unreachable")  # pragma: no cover


class _CursorSavingReport(JobReport):
    """The trigger's :class:`JobReport`: after writing new events (or program lines) it returns the
    save of the event (or log) cursor for the driver to await. Written first, then saved (shielded:
    a triggerer shutdown does not stop the save): an event or line is repeated only if the process
    dies in between, never lost — log lines written after a cancellation do not reach the task log.
    A poll's progress is written synchronously (no coroutine per poll). While the program log waits
    for its secrets (``logs.paused``), each poll's progress returns one more try to resolve them
    (``resolve``); once it succeeds the next poll reads the log from its cursor."""

    def __init__(
        self,
        log: TaskLog,
        cursor: int,
        save: Callable[[int], Awaitable[None]],
        secrets: SecretLines | None = None,
        save_log: Callable[[str | None], Awaitable[None]] | None = None,
        logs: LogFollow | None = None,
        resolve: Callable[[], Awaitable[SecretLines | None]] | None = None,
    ) -> None:
        super().__init__(log, cursor, secrets)
        self._save = save
        self._save_log = save_log
        self._logs = logs
        self._resolve = resolve
        self.wrote_events_at = 0.0  # time.monotonic() of the last events (or program lines) written

    def __call__(self, step: Step) -> Awaitable[None] | None:
        if isinstance(step, NewEvents | NewLogLines) and stopping():
            return None  # the triggerer is stopping: its restart writes them (triggers/shutdown.py)
        super().__call__(step)
        if isinstance(step, NewEvents):
            self.wrote_events_at = time.monotonic()
            return self._save(step.cursor)
        if isinstance(step, NewLogLines) and self._save_log is not None:
            self.wrote_events_at = time.monotonic()
            return self._save_log(step.cursor)
        if isinstance(step, Progress) and self._logs is not None and self._logs.paused and self._resolve:
            return self._unpause(self._logs, self._resolve)
        return None

    async def _unpause(self, logs: LogFollow, resolve: Callable[[], Awaitable[SecretLines | None]]) -> None:
        secrets = await resolve()
        if secrets is not None:
            self.secrets, logs.paused = secrets, False


class TrainingJobTrigger(BaseTrigger):
    """Poll job ``job_id`` until it ends, the deadline passes, or the platform is lost.

    Every kwarg is a plain JSON value (they land in the trigger table; never a secret):

    :param conn_id: Airflow connection of the platform (its type picks the platform).
    :param job_id: the platform's job id.
    :param deadline: absolute UNIX time (seconds) after which the trigger stops waiting; ``None`` = none.
    :param deadline_kind: ``execution_timeout`` or ``defer_timeout`` (the task's; a cancel per the
        policy) or ``sensor_timeout`` (a sensor's own ``timeout``; never a cancel).
    :param event_cursor: platform events already written to the task log (platforms with events);
        the cursor is also kept in the try's ``event_cursor.try<n>`` XCom so a restarted triggerer resumes after
        the last written event.
    :param stream_logs: write the lines the job's training program prints into the task log
        (``[program] …``; platforms with ``capabilities.program_logs``, else one note).
        The program log is followed from its start; the cursor after the last line written is kept
        in the try's ``log_cursor.try<n>`` XCom, which a restarted triggerer resumes from.
    :param secret_references: the spec's secret references as a JSON list (``{"conn_id",
        "field"}`` or ``{"variable"}``: names, never values; a string, so the kwargs stay flat);
        resolved here to mask the program's lines.
    :param unreferenced_secrets: the spec holds secret values written in it or rendered from a
        template (a boolean, never the values): this process cannot mask them, so it writes none
        of the program's lines (the worker warned once at the deferral).
    :param deferred_at: UNIX time (seconds) the task deferred; the event waits until
        ``deferred_at + resume_settle`` (see :class:`~airflow_training_provider.lifecycle.waiting.Polling`).
    :param dag_id, run_id, task_id, map_index, try_number: the task instance try that deferred —
        lets ``on_kill`` ask Airflow what happened to it, and the trigger keep its event cursor.
    :param options: the fields of :class:`~airflow_training_provider.lifecycle.waiting.Polling`
        (``poll_interval``, ``outage_budget``, ``confirm_interval``, seconds), of
        :class:`~airflow_training_provider.cancellation.CancelPolicy` (``cancel_on_kill``...) and of
        :class:`~airflow_training_provider.lifecycle.guards.Guards` (``early_stopping``,
        ``max_cost_usd``, ``max_runtime``...).

    Emits exactly one event: a :data:`~airflow_training_provider.lifecycle.waiting.WaitOutcome` as
    JSON, its ``status`` one of ``terminal`` (with the final ``job``), ``timeout`` (the deadline
    passed; the cancel already sent, if any), ``guard`` (a guard stopped the job), ``lost_contact``
    or ``error``.

    :raises TypeError: an unknown option.
    """

    def __init__(
        self,
        conn_id: str,
        job_id: str,
        deadline: float | None = None,
        event_cursor: int = 0,
        deadline_kind: DeadlineKind = "execution_timeout",
        deferred_at: float | None = None,
        dag_id: str | None = None,
        run_id: str | None = None,
        task_id: str | None = None,
        map_index: int = -1,
        try_number: int = 1,
        stream_logs: bool = False,
        secret_references: str | None = None,
        unreferenced_secrets: bool = False,
        **options: Any,
    ) -> None:
        super().__init__()
        unknown = set(options) - _POLICY_FIELDS - _POLLING_FIELDS - _GUARD_FIELDS
        if unknown:
            raise TypeError(f"TrainingJobTrigger got unknown options {sorted(unknown)}")
        self.conn_id = conn_id
        self.job_id = job_id
        self.deadline = deadline
        self.deadline_kind = deadline_kind
        self.deferred_at = deferred_at
        self.event_cursor = int(event_cursor)
        self.stream_logs = bool(stream_logs)
        self.secret_references = secret_references
        self.unreferenced_secrets = bool(unreferenced_secrets)
        self._secrets_warned = False
        self.identity = (
            TaskIdentity(dag_id, run_id, task_id, map_index, try_number)
            if dag_id and run_id and task_id
            else None
        )
        self.polling = Polling(**{k: v for k, v in options.items() if k in _POLLING_FIELDS})
        self.policy = CancelPolicy(**{k: v for k, v in options.items() if k in _POLICY_FIELDS})
        self.guards = Guards(**{k: v for k, v in options.items() if k in _GUARD_FIELDS})

    def serialize(self) -> tuple[str, dict[str, Any]]:
        identity = self.identity
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "conn_id": self.conn_id,
                "job_id": self.job_id,
                "deadline": self.deadline,
                "deadline_kind": self.deadline_kind,
                "deferred_at": self.deferred_at,
                "event_cursor": self.event_cursor,
                "dag_id": identity.dag_id if identity else None,
                "run_id": identity.run_id if identity else None,
                "task_id": identity.task_id if identity else None,
                "map_index": identity.map_index if identity else -1,
                "try_number": identity.try_number if identity else 1,
                "stream_logs": self.stream_logs,
                "secret_references": self.secret_references,
                "unreferenced_secrets": self.unreferenced_secrets,
                **self.polling.model_dump(),
                **self.policy.model_dump(),
                **self.guards.model_dump(mode="json"),
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        polling = self.polling
        start_gc_freezer()  # opt-in, once per triggerer process (see triggers/heap.py)
        watch_stop_signals()  # once per process: no events written once it is told to stop
        retry = RetryPolicy(call_timeout=min(30.0, polling.poll_interval * 2 + 5))
        async with AsyncTrainingPlatformHook(self.conn_id, retry).client() as client:  # the hook is not kept
            ops = client.ops
            ops.log = self.log  # its warnings (an unreadable auxiliary read) belong in the task log
            cursor = None
            if client.dialect.capabilities.events:
                cursor = max(self.event_cursor, await self._load_cursor())
            logs, secrets = await self._follow_log(client.dialect) if self.stream_logs else (None, None)
            report = _CursorSavingReport(
                self.log,
                cursor or 0,
                self._save_cursor,
                secrets,
                self._save_log_cursor,
                logs,
                self._resolve_secrets,
            )
            coalesce = polling.coalesce and client.can_coalesce(needs_full_rows=self.guards.any)
            self._plan(client, coalesce, cursor is not None, logs is not None)
            if polling.spread_polls:
                delay = poll_phase_delay(self.job_id, polling.poll_interval, time.time())
                if self.deadline is not None:
                    delay = min(delay, max(0.0, self.deadline - time.time()))
                await asyncio.sleep(delay)
            wait = wait_for_job(
                client.ops,
                self.job_id,
                polling,
                self.policy,
                self.deadline,
                cursor,
                self.deadline_kind,
                self.guards if self.guards.any else None,
                logs,
                coalesce,
            )
            outcome = await client.drive(wait, report)
        if isinstance(outcome, DeadlineReached):
            if outcome.cancel is not None:
                self.log.warning("execution_timeout reached: cancel of job %s requested", self.job_id)
            elif outcome.cancel_error:
                self.log.error(
                    "execution_timeout: cancelling job %s failed (%s)", self.job_id, outcome.cancel_error
                )
        # Hold the event: right after the deferral (see Polling.resume_settle), and for a moment after
        # writing events or a warning, whose log lines travel to the task log on another channel than the event:
        # the triggerer closes the trigger's log when the event is handled, dropping lines in flight.
        settle = max(
            (self.deferred_at or 0.0) + polling.resume_settle - time.time(),
            max(report.wrote_events_at, ops.warned_at) + LOG_DRAIN_SECONDS - time.monotonic()
            if report.wrote_events_at or ops.warned_at
            else 0.0,
        )
        if settle > 0:
            await asyncio.sleep(settle)
        yield TriggerEvent(outcome_payload(outcome))

    def _plan(self, client: AsyncTrainingPlatformClient, coalesce: bool, events: bool, logs: bool) -> None:
        """Join the connection's shared poller (``coalesce``) and register the reads per second
        this wait plans in the account's budget: coalesced, its events (every ``events_interval``)
        and program-log pages; on its own, its status read too, and its events at every poll."""
        polling = self.polling
        endpoint = events and not client.dialect.capabilities.events_in_job
        per_poll = (1.0 if logs else 0.0) / polling.poll_interval
        if coalesce:
            client.coalesce(self.job_id, polling.poll_interval)
            client.plan(per_poll + (1.0 / polling.events_interval if endpoint else 0.0))
        else:
            client.plan(per_poll + (2.0 if endpoint else 1.0) / polling.poll_interval)

    async def _load_cursor(self) -> int:
        """The saved event cursor (:meth:`_load_saved`); unreadable: the kwarg's cursor is used, and
        events written since the deferral may be written again."""
        return int(await self._load_saved(get_event_cursor, "Event cursor", "events") or 0)

    async def _load_saved(
        self, read: Callable[[TaskIdentity], _T | None], what: str, repeated: str
    ) -> _T | None:
        """A cursor the try saved in its XCom (``read`` is its getter), with a few tries
        (:data:`CURSOR_READ_ATTEMPTS`), since a triggerer that has just started may not reach the
        API server yet. ``None``: none saved, no identity, or still unreadable (warned: ``what``
        is not readable, ``repeated`` may be written to the log again — e.g. in ``dag.test``)."""
        if self.identity is None:
            return None
        try:
            return await _retried(partial(read, self.identity), CURSOR_READ_ATTEMPTS)
        except Exception as exc:  # noqa: BLE001
            self.log.warning("%s not readable (%s): %s may be written to the log again", what, exc, repeated)
        return None

    async def _resolve_secrets(self, attempts: int = 1) -> SecretLines | None:
        """The values of the spec's secret references, to mask the program's lines with (tried
        ``attempts`` times: a secrets backend may be briefly unreachable). ``None``: not resolved —
        warned about the first time; the lines wait (never written unmasked)."""
        references = json.loads(self.secret_references) if self.secret_references else []
        try:
            return await _retried(partial(resolve_secrets, references), attempts)
        except Exception as exc:  # noqa: BLE001 - never fails the wait
            if not self._secrets_warned:
                self._secrets_warned = True
                self.log.warning(
                    "stream_logs: the spec's secrets could not be resolved in the triggerer (%s); the "
                    "program's lines are not written until they are (tried again at each poll), lest "
                    "one show a secret",
                    exc,
                )
        return None

    async def _follow_log(self, dialect: Any) -> tuple[LogFollow | None, SecretLines | None]:
        """Where to follow the program log from (the saved cursor, else its start) and the secrets
        to mask in its lines, resolved here from the spec's references (:meth:`_resolve_secrets`,
        a few tries). Not resolved yet: the follow is ``paused`` (no line read nor written) and
        the report tries again at each poll. ``(None, None)``: not followed — the platform has no
        program log (one note), or the spec holds secret values only the worker knows
        (``unreferenced_secrets``; the worker warned)."""
        if not dialect.capabilities.program_logs:
            note_unavailable(self.log, dialect.name)
            return None, None
        if self.unreferenced_secrets:  # values only the worker knows (it warned): no line written
            return None, None
        secrets = await self._resolve_secrets(CURSOR_READ_ATTEMPTS)
        saved = await self._load_saved(get_log_cursor, "Log cursor", "program lines")
        return LogFollow(saved, paused=secrets is None), secrets

    async def _save_log_cursor(self, cursor: str | None) -> None:
        if self.identity is None:
            return
        try:
            await asyncio.shield(sync_to_async(set_log_cursor)(self.identity, cursor))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the lines are written; a restart may repeat them
            self.log.warning("Log cursor not saved (%s)", exc)

    async def _save_cursor(self, cursor: int) -> None:
        if self.identity is None:
            return
        try:
            await asyncio.shield(sync_to_async(set_event_cursor)(self.identity, cursor))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the events are written; a restart may repeat them
            self.log.warning("Event cursor %d not saved (%s)", cursor, exc)

    # -- on_kill: a user gave up on the task (or, in 3.3.2, the trigger moved to another triggerer) --
    async def on_kill(self) -> None:
        """Verify, then cancel — in a shielded background task.

        Airflow 3.3.2 re-cancels ``on_kill`` about every second, so the work runs in its own task
        that the repeated cancellation cannot reach; awaiting it through ``asyncio.shield`` keeps
        it alive while the triggerer process lives.
        """
        if not self.policy.cancel_on_kill:
            return
        task = asyncio.get_running_loop().create_task(self._verify_and_cancel(), name=f"cancel-{self.job_id}")
        _BACKGROUND_CANCELS.add(task)
        task.add_done_callback(_BACKGROUND_CANCELS.discard)
        await asyncio.shield(task)

    async def _verify_and_cancel(self) -> None:
        policy = self.policy
        try:
            decision = await asyncio.wait_for(self._decide(), timeout=policy.verify_timeout)
        except Exception as exc:  # noqa: BLE001 - the API may be cold or down; the reaper backs us up
            if not policy.cancel_if_unverified:
                self.log.error(
                    "on_kill: could not verify the task's state (%s); NOT cancelling job %s", exc, self.job_id
                )
                return
            self.log.warning("on_kill: could not verify the task's state (%s); cancelling anyway", exc)
        else:
            self.log.info(
                "on_kill for job %s: %s → %s",
                self.job_id,
                decision.reason,
                "cancel" if decision.cancel else "keep",
            )
            if not decision.cancel:
                return
        hook = AsyncTrainingPlatformHook(self.conn_id, RetryPolicy(call_timeout=30.0))
        async with hook.client() as client:
            result, job = await client.cancel_and_confirm(
                self.job_id,
                policy.request(GiveUp.TASK_KILLED.value),
                policy.confirm_timeout,
                self.polling.confirm_interval,
            )
        if result.already_terminal:
            self.log.info("on_kill: job %s had already ended (%s)", self.job_id, result.state.value)
            return
        self.log.warning(
            "on_kill: job %s %s; %s, metrics %s, cost $%s",
            self.job_id,
            job.state.value,
            result.final_checkpoint_text(),
            job.metrics,
            job.cost.total_usd,
        )

    async def _decide(self) -> Decision:
        if self.identity is None:
            raise RuntimeError("trigger has no task identity")
        state = await sync_to_async(task_instance_state)(self.identity)
        job_id = await sync_to_async(current_job_id)(self.identity)
        return self.policy.after_trigger_kill(state, job_id, self.job_id)
