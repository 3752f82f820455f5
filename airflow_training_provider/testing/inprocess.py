"""Run an operator in this process the way Airflow runs a deferrable task, without a scheduler,
triggerer or database: ``execute()`` → :class:`~airflow.sdk.exceptions.TaskDeferred` → the trigger
rebuilt from its serialized (JSON) kwargs → ``trigger.run()`` to its first event →
``resume_execution(method, {"event": payload}, context)`` as the task runner calls it (again, if it
defers again).

The context is a small stand-in for Airflow's: a task instance that keeps XComs in memory and a
task state store, so re-attach and retry logic can be exercised too::

    ctx = task_context(op)                              # try 1
    result = run_task(op, ctx)
    retry = task_context(op, try_number=2, state=ctx)   # the next try sees the same task state store

What the provider asks Airflow about *other* task instances (the orphan reaper) goes through the
Task SDK's supervisor channel; :class:`InMemoryAirflow` answers it from a dict::

    with InMemoryAirflow({("dag", "run", "train", -1): TaskInstanceRecord("failed")}).installed():
        report = run_task(ReapOrphanedTrainingJobsOperator(...), ctx)
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk.bases.operator import ExecutorSafeguard
from airflow.sdk.exceptions import TaskDeferred
from airflow.sdk.module_loading import import_string


@dataclass
class InMemoryTaskInstance:
    """What the provider reads from ``context["ti"]``: identity, tries and XCom."""

    dag_id: str
    run_id: str
    task_id: str
    try_number: int = 1
    max_tries: int = 0
    map_index: int = -1
    xcoms: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = as_stored(value)

    def xcom_pull(self, task_ids: str | None = None, key: str = "return_value", **_: Any) -> Any:
        return self.xcoms.get(key)


def as_stored(value: Any) -> Any:
    """``value`` as Airflow's metadata database keeps it (XCom, the task state store, a trigger
    event in ``next_kwargs``: JSON, JSONB on PostgreSQL), read back.

    :raises ValueError: a value PostgreSQL refuses: NaN or ±Infinity (``invalid input syntax for
        type json``), a NUL character (JSONB: ``unsupported Unicode escape sequence``) or a lone
        surrogate (``Unicode low surrogate must follow a high surrogate``)."""
    stored = json.loads(json.dumps(value, allow_nan=False))
    if _has_nul(stored):
        raise ValueError("a NUL character (\\u0000) or a lone surrogate: PostgreSQL's JSONB refuses it")
    return stored


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")  # a lone surrogate does not encode
        except UnicodeEncodeError:
            return True
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    return isinstance(value, list) and any(_has_nul(v) for v in value)


@dataclass
class InMemoryTaskStateStore:
    """``context["task_state_store"]``: kept across the tries of one task instance."""

    values: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = as_stored(value)

    def delete(self, key: str) -> None:
        self.values.pop(key, None)


def task_context(
    operator: Any,
    *,
    try_number: int = 1,
    cleared: bool = False,
    run_id: str | None = None,
    dag_id: str = "inprocess",
    map_index: int = -1,
    state: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A context for ``operator``'s try ``try_number`` (of map index ``map_index`` of a mapped
    task; -1: not mapped). Pass an earlier context as ``state`` to keep its task state store and DAG
    run (what a retry or a clear sees); otherwise the try belongs to a DAG run of its own
    (``run_id``, default a new one: a first try re-attaches to a live job tagged with its task
    instance, so two tests must not share one). ``max_tries`` follows Airflow: ``retries`` for a
    run's tries, ``try_number - 1 + retries`` after a clear (``cleared=True``)."""
    if run_id is None:
        run_id = state["run_id"] if state else f"manual__inprocess_{uuid.uuid4().hex[:10]}"
    retries = operator.retries or 0
    max_tries = try_number - 1 + retries if cleared else retries
    ti = InMemoryTaskInstance(
        dag_id, run_id, operator.task_id, try_number, max_tries=max_tries, map_index=map_index
    )
    store = state["task_state_store"] if state else InMemoryTaskStateStore()
    from airflow.sdk.execution_time.context import OutletEventAccessors

    return {
        "ti": ti,
        "task_instance": ti,
        "task_state_store": store,
        "run_id": run_id,
        "outlet_events": OutletEventAccessors(),  # asset events the task emits (``model_alias``)
    }


async def first_event(trigger: Any) -> Any:
    """The first event ``trigger.run()`` yields (the generator is closed after it)."""
    agen = trigger.run()
    try:
        return await agen.__anext__()
    finally:
        await agen.aclose()


def run_task(operator: Any, context: dict[str, Any], max_deferrals: int = 10) -> Any:
    """``operator.execute(context)``, with every deferral run here; returns the task's result.

    The trigger is rebuilt from ``serialize()`` after a JSON round trip, as the triggerer would,
    so a kwarg that is not plain JSON fails here too. Its ``resume_settle`` (a guard against a
    scheduler race; there is no scheduler here) is set to 0 and ``spread_polls`` (spreading many
    triggers' polls) off, so a quick job is not held.
    """
    # The task runner's own pass: execute() is not being called "outside of the Task Runner".
    sentinel = {f"{type(operator).__name__}__sentinel": ExecutorSafeguard.sentinel_value}
    call = lambda: operator.execute(context, **sentinel)  # noqa: E731
    for _ in range(max_deferrals + 1):
        try:
            result = call()
            as_stored(result)  # Airflow writes it as XCom return_value
            return result
        except TaskDeferred as deferred:
            classpath, kwargs = deferred.trigger.serialize()
            kwargs = json.loads(json.dumps(kwargs))
            if "resume_settle" in kwargs:  # guards of a busy triggerer, pointless here
                kwargs.update(resume_settle=0.0, spread_polls=False)
            trigger = import_string(classpath)(**kwargs)
            event = asyncio.run(first_event(trigger))
            # as the task runner resumes a task: resume_execution(next_method, {"event": payload, ...})
            kwargs = {**(deferred.kwargs or {}), "event": as_stored(event.payload)}  # next_kwargs
            call = lambda method=deferred.method_name, kwargs=kwargs: operator.resume_execution(  # noqa: E731
                method, kwargs, context
            )
    raise RuntimeError(f"{operator.task_id} deferred more than {max_deferrals} times")


@dataclass(frozen=True)
class TaskInstanceRecord:
    """A task instance as Airflow would tell it: its ``state`` (``None``: Airflow does not know it)
    and the job id its current try pushed to XCom (``job_id``)."""

    state: str | None
    job_id: str | None = None


class InMemoryAirflow:
    """Answers from memory the Task SDK's supervisor requests the provider makes outside its own
    task's context: ``GetTaskStates`` and the ``job_id`` XCom of other task instances (the orphan
    reaper) from ``task_instances``, keyed by ``(dag_id, run_id, task_id, map_index)``, and
    ``SetXCom``/``GetXCom`` of other keys (a trigger's event cursor) from what was set. A value of
    ``task_instances`` that is an exception is raised for that task instance, as the supervisor's
    channel raises when the API server fails (``AirflowRuntimeError``)."""

    def __init__(
        self, task_instances: dict[tuple[str, str, str, int], TaskInstanceRecord | Exception] | None = None
    ) -> None:
        self.task_instances = task_instances or {}
        self.xcoms: dict[tuple[str, str, str, int, str], Any] = {}
        self.requests: list[Any] = []

    def _record(self, key: tuple[str, str, str, int]) -> TaskInstanceRecord | None:
        found = self.task_instances.get(key)
        if isinstance(found, Exception):
            raise found
        return found

    def send(self, msg: Any) -> Any:
        """The supervisor's answer to ``msg``. :raises NotImplementedError: a request it does not serve."""
        from airflow.sdk.execution_time.comms import (
            GetTaskStates,
            GetXCom,
            SetXCom,
            TaskStatesResult,
            XComResult,
        )

        self.requests.append(msg)
        map_index = -1 if msg.map_index is None else msg.map_index
        if isinstance(msg, GetTaskStates):
            states: dict[str, dict[str, Any]] = {}
            for run_id in msg.run_ids or []:
                for task_id in msg.task_ids or []:
                    record = self._record((msg.dag_id, run_id, task_id, map_index))
                    if record is not None and record.state is not None:
                        key = task_id if map_index < 0 else f"{task_id}_{map_index}"
                        states.setdefault(run_id, {})[key] = record.state
            return TaskStatesResult(task_states=states)
        ti = (msg.dag_id, getattr(msg, "run_id", ""), getattr(msg, "task_id", ""), map_index)
        if isinstance(msg, SetXCom):
            self.xcoms[(*ti, msg.key)] = msg.value
            return None
        if isinstance(msg, GetXCom):
            if (*ti, msg.key) in self.xcoms:
                return XComResult(key=msg.key, value=self.xcoms[(*ti, msg.key)])
            record = self._record(ti)
            value = record.job_id if record is not None and msg.key == "job_id" else None
            return XComResult(key=msg.key, value=value)
        raise NotImplementedError(f"InMemoryAirflow does not answer {type(msg).__name__}")

    @contextmanager
    def installed(self) -> Iterator[InMemoryAirflow]:
        """Be the supervisor's channel (``task_runner.SUPERVISOR_COMMS``) inside the block."""
        from airflow.sdk.execution_time import task_runner

        missing = object()
        before: Any = getattr(task_runner, "SUPERVISOR_COMMS", missing)
        task_runner.SUPERVISOR_COMMS = self  # type: ignore[assignment]  # a stand-in, not a CommsDecoder
        try:
            yield self
        finally:
            if before is missing:
                del task_runner.SUPERVISOR_COMMS
            else:
                task_runner.SUPERVISOR_COMMS = before
