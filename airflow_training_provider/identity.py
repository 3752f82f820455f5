"""Which Airflow task instance a training job belongs to, written on the job as tags.

Every job the provider submits carries ``airflow-deployment:<name>``, ``airflow-dag:<dag_id>``,
``airflow-run:<run_id>``, ``airflow-task:<task_id>``, ``airflow-map:<map_index>`` and
``airflow-try:<try_number>``. Re-attach finds an earlier try's job by them, and the orphan reaper
asks Airflow about the task instance they name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow.sdk import Context

DEPLOYMENT_ENV = "AIRFLOW_TRAINING_DEPLOYMENT"
_PREFIX = "airflow-"
#: how far back a try looks for an earlier try's job at least, on platforms whose job list covers
#: only recent jobs unless told (PAI): beyond its DAG run's start, in case a clear restarted the run
REATTACH_LOOKBACK = timedelta(days=30)


def earlier_jobs_since(context: Context, now: datetime | None = None) -> datetime:
    """Since when (UTC) a try's task instance may have jobs: its DAG run's start, or
    :data:`REATTACH_LOOKBACK` before ``now`` if that is earlier (a cleared run starts again, while
    its earlier tries' jobs may still run). For the list call that finds an earlier try's job."""
    since = (now or datetime.now(UTC)) - REATTACH_LOOKBACK
    dag_run = context.get("dag_run") if hasattr(context, "get") else None
    started = getattr(dag_run, "start_date", None)
    if isinstance(started, datetime):
        started = started if started.tzinfo is not None else started.replace(tzinfo=UTC)
        since = min(since, started)
    return since


def deployment_name() -> str:
    """This Airflow deployment's name for tagging (env ``AIRFLOW_TRAINING_DEPLOYMENT``, else ``default``)."""
    return os.environ.get(DEPLOYMENT_ENV, "default")


@dataclass(frozen=True)
class TaskIdentity:
    """A task instance try: ``dag_id``, ``run_id``, ``task_id``, ``map_index`` (-1 if unmapped),
    ``try_number`` (1-based), in deployment ``deployment``."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    try_number: int = 1
    deployment: str = "default"

    @classmethod
    def from_context(cls, context: Context) -> TaskIdentity:
        ti = context["ti"]
        return cls(
            dag_id=ti.dag_id,
            run_id=ti.run_id,
            task_id=ti.task_id,
            map_index=ti.map_index if ti.map_index is not None else -1,
            try_number=ti.try_number,
            deployment=deployment_name(),
        )

    def tags(self) -> list[str]:
        """All identity tags, try number included."""
        return [*self.task_tags(), f"{_PREFIX}try:{self.try_number}"]

    def task_tags(self) -> list[str]:
        """The tags shared by every try of this task instance (to find earlier tries' jobs)."""
        return [
            f"{_PREFIX}deployment:{self.deployment}",
            f"{_PREFIX}dag:{self.dag_id}",
            f"{_PREFIX}run:{self.run_id}",
            f"{_PREFIX}task:{self.task_id}",
            f"{_PREFIX}map:{self.map_index}",
        ]

    @classmethod
    def from_tags(cls, tags: list[str]) -> TaskIdentity | None:
        """Read an identity back from a job's tags; ``None`` if the job was not tagged by us."""
        fields: dict[str, str] = {}
        for tag in tags:
            if tag.startswith(_PREFIX) and ":" in tag:
                key, value = tag[len(_PREFIX) :].split(":", 1)
                fields.setdefault(key, value)
        try:
            return cls(
                dag_id=fields["dag"],
                run_id=fields["run"],
                task_id=fields["task"],
                map_index=int(fields.get("map", -1)),
                try_number=int(fields.get("try", 1)),
                deployment=fields.get("deployment", "default"),
            )
        except (KeyError, ValueError):
            return None

    @property
    def state_key(self) -> str:
        """Key of this TI in ``RuntimeTaskInstance.get_task_states`` results (mapped: ``task_mapindex``)."""
        return self.task_id if self.map_index < 0 else f"{self.task_id}_{self.map_index}"
