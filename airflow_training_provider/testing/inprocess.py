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
"""

from __future__ import annotations

import asyncio
import json
import uuid
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
        self.xcoms[key] = json.loads(json.dumps(value))  # XCom values must be JSON

    def xcom_pull(self, task_ids: str | None = None, key: str = "return_value", **_: Any) -> Any:
        return self.xcoms.get(key)


@dataclass
class InMemoryTaskStateStore:
    """``context["task_state_store"]``: kept across the tries of one task instance."""

    values: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = json.loads(json.dumps(value))

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
            return call()
        except TaskDeferred as deferred:
            classpath, kwargs = deferred.trigger.serialize()
            kwargs = json.loads(json.dumps(kwargs))
            if "resume_settle" in kwargs:  # guards of a busy triggerer, pointless here
                kwargs.update(resume_settle=0.0, spread_polls=False)
            trigger = import_string(classpath)(**kwargs)
            event = asyncio.run(first_event(trigger))
            # as the task runner resumes a task: resume_execution(next_method, {"event": payload, ...})
            kwargs = {**(deferred.kwargs or {}), "event": event.payload}
            call = lambda method=deferred.method_name, kwargs=kwargs: operator.resume_execution(  # noqa: E731
                method, kwargs, context
            )
    raise RuntimeError(f"{operator.task_id} deferred more than {max_deferrals} times")
