"""The one polling trigger: waits for a training job on any platform to reach a terminal state.

``run()`` is pure polling and idempotent: the triggerer re-runs it from the top after a restart or a
reassignment, with the same kwargs. It never cancels anything (not in ``except CancelledError``, not
in ``cleanup()``): both also fire on a triggerer restart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async

from airflow_training_provider.errors import TrainingPlatformError, TransientPlatformError
from airflow_training_provider.events import EventLog
from airflow_training_provider.hooks.training_async import AsyncTrainingPlatformHook
from airflow_training_provider.hooks.transport import RetryPolicy
from airflow_training_provider.identity import TaskIdentity
from airflow_training_provider.kill_decisions import on_kill_decision
from airflow_training_provider.models import CancelRequest, JobEvent
from airflow_training_provider.progress import ProgressLog
from airflow_training_provider.task_instance_lookup import (
    current_job_id,
    get_event_cursor,
    set_event_cursor,
    task_instance_state,
)

# Strong references to in-flight on_kill cancellations: a task only weakly referenced by the loop
# could be garbage-collected mid-cancel.
_BACKGROUND_CANCELS: set[asyncio.Task] = set()


DEFAULT_ON_KILL: dict[str, Any] = {
    "cancel_on_kill": True,
    "cancel_on_mark_success": False,
    "reattach_on_clear": False,
    "preserve_checkpoints": True,
    "create_final_checkpoint": True,
    "confirm_timeout": 60.0,
    "verify_timeout": 60.0,
    "cancel_if_unverified": False,
}


class TrainingJobTrigger(BaseTrigger):
    """Poll job ``job_id`` until it ends, the deadline passes, or the platform is lost.

    :param conn_id: Airflow connection of the platform (its type picks the dialect).
    :param job_id: the platform's job id.
    :param poll_interval: seconds between polls.
    :param deadline: absolute UNIX time (seconds) after which the trigger stops waiting and reports
        ``timeout`` (the task's ``execution_timeout``, anchored on its first start); ``None`` = none.
    :param outage_budget: seconds of consecutive failed polls (429, 5xx, timeouts, resets, malformed
        bodies) tolerated before reporting ``lost_contact``.
    :param identity: the task instance try (``TaskIdentity`` fields as a dict) — lets ``on_kill``
        ask Airflow what happened to it.
    :param event_cursor: platform events already written to the task log (platforms with
        events): new ones are logged once, in order; the cursor is also kept in the
        ``event_cursor`` XCom so a restarted triggerer resumes after the last written event.
    :param cancel: ``on_kill`` options: ``cancel_on_kill``, ``cancel_on_mark_success``,
        ``reattach_on_clear``, ``preserve_checkpoints``, ``create_final_checkpoint``,
        ``confirm_timeout`` (seconds), ``verify_timeout`` (seconds), ``cancel_if_unverified``.

    Emits exactly one event, a dict with ``status``:

    * ``"terminal"`` with ``job`` (a :class:`~airflow_training_provider.models.TrainingJob` as JSON,
      its ``message`` quoting the decisive platform event when it failed or was cancelled) and
      ``event_cursor``;
    * ``"timeout"`` with ``job_id`` and ``message`` — the deadline passed; the trigger has already
      asked the platform to cancel the job (the resumed task confirms it);
    * ``"lost_contact"`` with ``job_id`` and ``message``;
    * ``"error"`` with ``job_id`` and ``message`` (the platform refused the poll, e.g. 404).
    """

    def __init__(
        self,
        conn_id: str,
        job_id: str,
        poll_interval: float = 30.0,
        deadline: float | None = None,
        outage_budget: float = 600.0,
        identity: dict[str, Any] | None = None,
        cancel: dict[str, Any] | None = None,
        event_cursor: int = 0,
    ) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.job_id = job_id
        self.poll_interval = float(poll_interval)
        self.deadline = deadline
        self.outage_budget = float(outage_budget)
        self.identity = identity
        self.cancel = {**DEFAULT_ON_KILL, **(cancel or {})}
        self.event_cursor = int(event_cursor)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        # Only plain JSON and never a secret: this lands in the trigger table.
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "conn_id": self.conn_id,
                "job_id": self.job_id,
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                "outage_budget": self.outage_budget,
                "identity": self.identity,
                "cancel": self.cancel,
                "event_cursor": self.event_cursor,
            },
        )

    def _event(self, status: str, **payload: Any) -> TriggerEvent:
        return TriggerEvent({"status": status, "job_id": self.job_id, **payload})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = AsyncTrainingPlatformHook(
            self.conn_id, RetryPolicy(call_timeout=min(30.0, self.poll_interval * 2 + 5))
        )
        progress = ProgressLog(self.log)
        async with hook.client() as client:
            streaming = client.dialect.capabilities.events
            events = EventLog(self.log, max(self.event_cursor, await self._load_cursor() if streaming else 0))
            seen: list[JobEvent] = []
            while True:
                if self.deadline is not None and time.time() >= self.deadline:
                    # Cancel here, at the deadline, rather than when a worker resumes the task
                    # (seconds to minutes later on a busy cluster); the worker confirms it.
                    await self._cancel_at_deadline(client)
                    yield self._event(
                        "timeout", message="execution_timeout reached while waiting for the job"
                    )
                    return
                try:
                    job = await client.get_job(self.job_id, budget=self.outage_budget)
                    if streaming:
                        seen = await client.list_events(self.job_id, budget=self.outage_budget)
                        await self._write_events(events, seen)
                    if job.is_terminal:
                        job = await client.final_view(job, seen)
                except TransientPlatformError as exc:
                    yield self._event(
                        "lost_contact",
                        message=f"lost contact with the platform for more than {self.outage_budget:.0f} s "
                        f"while polling job {self.job_id}: {exc}",
                    )
                    return
                except TrainingPlatformError as exc:
                    yield self._event("error", message=f"polling job {self.job_id} failed: {exc}")
                    return
                progress.update(job)
                if job.is_terminal:
                    yield self._event("terminal", job=job.model_dump(mode="json"), event_cursor=events.cursor)
                    return
                await asyncio.sleep(self._next_sleep())

    async def _cancel_at_deadline(self, client) -> None:
        if not self.cancel["cancel_on_kill"]:
            return
        request = CancelRequest(
            reason="Airflow execution_timeout reached",
            preserve_checkpoints=self.cancel["preserve_checkpoints"],
            create_final_checkpoint=self.cancel["create_final_checkpoint"],
        )
        try:
            result = await client.cancel_job(self.job_id, request)
        except TrainingPlatformError as exc:  # the resumed task retries the cancel
            self.log.error("execution_timeout: cancelling job %s failed (%s)", self.job_id, exc)
            return
        self.log.warning(
            "execution_timeout reached: cancel of job %s requested (%s)", self.job_id, result.state.value
        )

    async def _write_events(self, log: EventLog, events: list[JobEvent]) -> None:
        """Save the cursor, then write the new events — the write happens even if a triggerer
        shutdown cancels us during the save, so an event is lost only if the process is killed."""
        new = log.new_events(events)
        if not new:
            return
        try:
            await self._save_cursor(len(events))
        finally:
            log.write(new, len(events))

    async def _load_cursor(self) -> int:
        if not self.identity:
            return 0
        try:
            value = await sync_to_async(get_event_cursor)(TaskIdentity(**self.identity))
        except Exception as exc:  # noqa: BLE001 - no XCom access (e.g. dag.test): keep the kwarg cursor
            self.log.debug("event cursor not readable: %s", exc)
            return 0
        return int(value or 0)

    async def _save_cursor(self, cursor: int) -> None:
        if not self.identity:
            return
        try:
            await asyncio.shield(sync_to_async(set_event_cursor)(TaskIdentity(**self.identity), cursor))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            self.log.debug("event cursor not saved: %s", exc)

    def _next_sleep(self) -> float:
        if self.deadline is None:
            return self.poll_interval
        return max(0.0, min(self.poll_interval, self.deadline - time.time()))

    # -- on_kill: a user gave up on the task (or, in 3.3.2, the trigger moved to another triggerer) --
    async def on_kill(self) -> None:
        """Verify, then cancel — in a shielded background task.

        3.3.2 re-cancels ``on_kill`` about every second (airflow-kill-paths.md §0), so the work runs
        in its own task that the repeated cancellation cannot reach; awaiting it through
        ``asyncio.shield`` keeps it alive while the triggerer process lives.
        """
        if not self.cancel["cancel_on_kill"]:
            return
        task = asyncio.get_running_loop().create_task(self._verify_and_cancel(), name=f"cancel-{self.job_id}")
        _BACKGROUND_CANCELS.add(task)
        task.add_done_callback(_BACKGROUND_CANCELS.discard)
        await asyncio.shield(task)

    async def _verify_and_cancel(self) -> None:
        try:
            decision = await asyncio.wait_for(self._decide(), timeout=self.cancel["verify_timeout"])
        except Exception as exc:  # noqa: BLE001 - the API may be cold or down; the reaper backs us up
            if not self.cancel["cancel_if_unverified"]:
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
        await self._cancel_and_confirm()

    async def _decide(self):
        if not self.identity:
            raise RuntimeError("trigger has no task identity")
        identity = TaskIdentity(**self.identity)
        state = await sync_to_async(task_instance_state)(identity)
        job_id = await sync_to_async(current_job_id)(identity)
        return on_kill_decision(
            state,
            job_id,
            self.job_id,
            cancel_on_mark_success=self.cancel["cancel_on_mark_success"],
            reattach_on_clear=self.cancel["reattach_on_clear"],
        )

    async def _cancel_and_confirm(self) -> None:
        request = CancelRequest(
            reason="Airflow task was killed (marked failed, cleared or its DAG run ended)",
            preserve_checkpoints=self.cancel["preserve_checkpoints"],
            create_final_checkpoint=self.cancel["create_final_checkpoint"],
        )
        hook = AsyncTrainingPlatformHook(self.conn_id, RetryPolicy(call_timeout=30.0))
        async with hook.client() as client:
            result = await client.cancel_job(self.job_id, request)
            if result.already_terminal:
                self.log.info("on_kill: job %s had already ended (%s)", self.job_id, result.state.value)
                return
            deadline = time.monotonic() + float(self.cancel["confirm_timeout"])
            job = await client.get_job(self.job_id, budget=30.0)
            while not job.is_terminal and time.monotonic() < deadline:
                await asyncio.sleep(1.0)
                job = await client.get_job(self.job_id, budget=30.0)
        final = job.final_checkpoint
        self.log.warning(
            "on_kill: job %s %s; final checkpoint %s, metrics %s, cost $%s",
            self.job_id,
            job.state.value,
            final.id if final else None,
            job.metrics,
            job.cost.total_usd,
        )
