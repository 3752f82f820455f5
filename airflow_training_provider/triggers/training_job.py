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

from airflow_training_provider.errors import TrainingPlatformError, TransientPlatformError
from airflow_training_provider.hooks.training_async import AsyncTrainingPlatformHook
from airflow_training_provider.hooks.transport import RetryPolicy
from airflow_training_provider.progress import ProgressLog


class TrainingJobTrigger(BaseTrigger):
    """Poll job ``job_id`` until it ends, the deadline passes, or the platform is lost.

    :param conn_id: Airflow connection of the platform (its type picks the dialect).
    :param job_id: the platform's job id.
    :param poll_interval: seconds between polls.
    :param deadline: absolute UNIX time (seconds) after which the trigger stops waiting and reports
        ``timeout`` (the task's ``execution_timeout``, anchored on its first start); ``None`` = none.
    :param outage_budget: seconds of consecutive failed polls (429, 5xx, timeouts, resets, malformed
        bodies) tolerated before reporting ``lost_contact``.

    Emits exactly one event, a dict with ``status``:

    * ``"terminal"`` with ``job`` (a :class:`~airflow_training_provider.models.TrainingJob` as JSON);
    * ``"timeout"`` with ``job_id`` and ``message``;
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
    ) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.job_id = job_id
        self.poll_interval = float(poll_interval)
        self.deadline = deadline
        self.outage_budget = float(outage_budget)

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
            while True:
                if self.deadline is not None and time.time() >= self.deadline:
                    yield self._event(
                        "timeout", message="execution_timeout reached while waiting for the job"
                    )
                    return
                try:
                    job = await client.get_job(self.job_id, budget=self.outage_budget)
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
                    yield self._event("terminal", job=job.model_dump(mode="json"))
                    return
                await asyncio.sleep(self._next_sleep())

    def _next_sleep(self) -> float:
        if self.deadline is None:
            return self.poll_interval
        return max(0.0, min(self.poll_interval, self.deadline - time.time()))
