"""Each try's job, read in the API server from the metadata database: for the "Training job" tab
(a try picker) and for the console link of the try the user looks at.

Why not XCom alone: a new try clears every XCom of its task instance (the Execution API hands the
task runner the keys to delete when a try starts; XComs are per task instance and map index, not
per try). The task state store (Airflow 3.3) is scoped to the DAG run, task and map index and kept
across retries and clears, so each try's job reference is kept there under
:func:`~airflow_training_provider.links.try_record_key` (:meth:`TrainingJobTaskMixin.publish_job`).
The current try's XCom ``training_job`` is the fallback when its record is missing (a task that ran
before the record existed, a failed write, a worker-side state store backend the API server cannot
read): an earlier try without a record has no job to show, never the latest try's.

Which try: Airflow's own UI asks for a past try's extra links with ``try_number`` and then calls
``get_link`` with that try's key (``TaskInstanceHistory.key``); a link registered by a plugin for an
operator takes precedence over the one read from XCom (``_link_…``, the latest try's), so
:class:`TryConsoleLink` is registered by the plugin for the submit operator and the sensor.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from typing import Any

from airflow.sdk import BaseOperatorLink

from airflow_training_provider.links import (
    JOB_REF_XCOM_KEY,
    JobReference,
    TrainingJobConsoleLink,
    try_record_key,
)
from airflow_training_provider.models import TrainingJob
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.sensors.training_job import TrainingJobSensor

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TryFacts:
    """One try of a task instance: its state (``TaskInstanceHistory`` for an earlier try, the task
    instance for the current one) and the job reference it published (``None``: none found)."""

    try_number: int
    ti_state: str | None
    ref: JobReference | None


@dataclass(frozen=True)
class TaskInstanceFacts:
    """What the metadata database says about a task instance and its tries."""

    state: str | None
    try_number: int | None  # the current try (``None``: no such task instance)
    is_training: bool
    tries: dict[int, TryFacts] = field(default_factory=dict)

    def pick(self, try_number: int | None) -> TryFacts | None:
        """The requested try, else the current one; ``None`` when there is no such try."""
        if try_number is None:
            try_number = self.try_number
        return self.tries.get(try_number) if try_number is not None else None


def _state(value: Any) -> str | None:
    return str(value.value if hasattr(value, "value") else value) if value else None


def _as_ref(value: Any) -> JobReference | None:
    """A stored value as a :class:`JobReference`; ``None`` for anything else (a worker-side state
    store backend's reference marker, a value of another shape)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    try:
        return JobReference.model_validate(value)
    except ValueError:
        return None


def read_try_records(
    dag_id: str, run_id: str, task_id: str, map_index: int, try_numbers: list[int], session: Any
) -> dict[int, JobReference]:
    """Each try's job reference from the task state store (the configured ``[state_store]
    backend``), by try number; tries without one are left out."""
    from airflow.state import TaskScope, get_state_backend

    backend = get_state_backend()
    scope = TaskScope(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index)
    records: dict[int, JobReference] = {}
    for number in try_numbers:
        try:
            stored = backend.get(scope, try_record_key(number), session=session)
        except Exception as exc:  # noqa: BLE001 - a store that cannot be read: fall back to XCom
            log.warning("Could not read try %s's job record from the task state store: %s", number, exc)
            continue
        ref = _as_ref(stored) if stored is not None else None
        if ref is not None:
            records[number] = ref
    return records


def read_task_instance(dag_id: str, run_id: str, task_id: str, map_index: int) -> TaskInstanceFacts:
    """The task instance, its tries and each try's job reference, from the metadata database."""
    from airflow.models.dagbag import DBDagBag
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    where = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index}
    with create_session(scoped=False) as session:
        ti = session.execute(
            select(TaskInstance.state, TaskInstance.try_number, TaskInstance.dag_version_id).filter_by(
                **where
            )
        ).first()
        if ti is None:
            return TaskInstanceFacts(state=None, try_number=None, is_training=False)
        is_training = False
        if ti.dag_version_id is not None:
            dag = DBDagBag().get_dag(ti.dag_version_id, session)
            task = dag.task_dict.get(task_id) if dag is not None else None
            is_training = task is not None and TrainingJobConsoleLink.name in (task.extra_links or [])
        history = dict(
            session.execute(
                select(TaskInstanceHistory.try_number, TaskInstanceHistory.state).filter_by(**where)
            ).all()
        )
        current = int(ti.try_number or 0)
        states: dict[int, str | None] = {n: _state(s) for n, s in history.items()}
        if current > 0:
            states[current] = _state(ti.state)
        records = read_try_records(
            dag_id, run_id, task_id, map_index, list(range(1, max([current, *states]) + 1)), session
        )

        def xcom(key: str) -> Any:
            """The task instance's current XCom ``key``, deserialized (``None``: there is none)."""
            row = session.scalars(
                XComModel.get_many(
                    run_id=run_id, key=key, dag_ids=dag_id, task_ids=task_id, map_indexes=map_index, limit=1
                )
            ).first()
            return XComModel.deserialize_value(row) if row is not None else None

        xcom_ref = _as_ref(stored) if (stored := xcom(JOB_REF_XCOM_KEY)) is not None else None
        tries = merge_tries(states, records, xcom_ref, current)
        if (
            (facts := tries.get(current)) is not None
            and facts.ref is not None
            and facts.ref.job_in_return_value
        ):
            job = _as_job(xcom("return_value"))
            tries[current] = replace(facts, ref=facts.ref.model_copy(update={"job": job}))
    return TaskInstanceFacts(
        state=_state(ti.state),
        try_number=current or None,
        is_training=is_training,
        tries=tries,
    )


def _as_job(value: Any) -> TrainingJob | None:
    """The job a try returned (XCom ``return_value``), ``None`` for anything else: the UI then asks
    the platform, as for an earlier try whose return value a later try cleared."""
    try:
        return TrainingJob.model_validate(value) if isinstance(value, dict) else None
    except ValueError:
        return None


def merge_tries(
    states: dict[int, str | None],
    records: dict[int, JobReference],
    xcom_ref: JobReference | None,
    current: int,
) -> dict[int, TryFacts]:
    """Each try with its state and job reference: its record, else (the current try only) the XCom
    the current try published. An earlier try without a record has no job: never the latest's."""
    refs = dict(records)
    if (
        current > 0
        and current not in refs
        and xcom_ref is not None
        and xcom_ref.try_number in (None, current)
    ):
        refs[current] = xcom_ref
    return {
        n: TryFacts(try_number=n, ti_state=states.get(n), ref=refs.get(n)) for n in sorted({*states, *refs})
    }


def console_url_for_try(dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int) -> str:
    """Try ``try_number``'s console link, ``""`` when that try published no job with one."""
    from airflow.utils.session import create_session

    with create_session(scoped=False) as session:
        records = read_try_records(dag_id, run_id, task_id, map_index, [try_number], session)
    ref = records.get(try_number)
    if ref is None:  # no record (a task that ran before records existed): the current try's XCom
        facts = read_task_instance(dag_id, run_id, task_id, map_index)
        found = facts.tries.get(try_number)
        ref = found.ref if found is not None else None
    if ref is None:
        return ""
    return (ref.job.console_url if ref.job is not None else None) or ref.console_url or ""


class TryConsoleLink(BaseOperatorLink):
    """The "Training job console" button as the API server answers it: the job of the try the
    user looks at (``ti_key.try_number``), registered by the plugin for the submit operator and the
    sensor. Never raises: a link that cannot be read is a disabled button."""

    name = TrainingJobConsoleLink.name
    # matched by class name and module in the serialized DAG: a subclass defined elsewhere keeps
    # the link Airflow reads from XCom (the latest try's)
    operators = [SubmitTrainingJobOperator, TrainingJobSensor]

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        try:
            return console_url_for_try(
                ti_key.dag_id, ti_key.run_id, ti_key.task_id, ti_key.map_index, ti_key.try_number
            )
        except Exception as exc:  # noqa: BLE001
            log.warning("No console link for %s: %s", ti_key, exc)
            return ""
