"""Ask Airflow (through the Task SDK supervisor, no DB access) about a task instance.

Works from a worker task and from a trigger (the triggerer's supervisor serves ``GetTaskStates``
and ``GetXCom``). Synchronous: call it through ``sync_to_async`` from async code.
"""

from __future__ import annotations

from airflow_training_provider.identity import TaskIdentity

JOB_ID_XCOM_KEY = "job_id"
EVENT_CURSOR_XCOM_KEY = "event_cursor"
LOG_CURSOR_XCOM_KEY = "log_cursor"


def event_cursor_key(try_number: int) -> str:
    """The XCom key of a try's event cursor (``event_cursor.try2``). Per try: after a clear with
    re-attach, the earlier try's trigger may still save its cursor while the new try starts; with
    one key for both, the two writes race (the API server answers 409) and one try's cursor
    overwrites the other's."""
    return f"{EVENT_CURSOR_XCOM_KEY}.try{try_number}"


def log_cursor_key(try_number: int) -> str:
    """The XCom key of a try's program-log cursor (``log_cursor.try2``), per try as the event
    cursor's (:func:`event_cursor_key`)."""
    return f"{LOG_CURSOR_XCOM_KEY}.try{try_number}"


def task_instance_state(identity: TaskIdentity) -> str | None:
    """The TI's current state (``"deferred"``, ``"failed"``...), ``None`` if none or unknown."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    states = RuntimeTaskInstance.get_task_states(
        dag_id=identity.dag_id,
        task_ids=[identity.task_id],
        run_ids=[identity.run_id],
        map_index=identity.map_index,
    )
    state = states.get(identity.run_id, {}).get(identity.state_key)
    return str(state.value if hasattr(state, "value") else state) if state is not None else None


def current_job_id(identity: TaskIdentity) -> str | None:
    """The job id the TI's current try pushed to XCom (XComs are cleared when a new try starts)."""
    from airflow.sdk.execution_time.xcom import XCom

    value = XCom.get_one(
        key=JOB_ID_XCOM_KEY,
        dag_id=identity.dag_id,
        task_id=identity.task_id,
        run_id=identity.run_id,
        map_index=identity.map_index,
    )
    return str(value) if value is not None else None


def get_event_cursor(identity: TaskIdentity) -> int | None:
    """How many platform events the current try already wrote to its log (``None``: none yet)."""
    from airflow.sdk.execution_time.xcom import XCom

    return XCom.get_one(
        key=event_cursor_key(identity.try_number),
        dag_id=identity.dag_id,
        task_id=identity.task_id,
        run_id=identity.run_id,
        map_index=identity.map_index,
    )


def set_event_cursor(identity: TaskIdentity, cursor: int) -> None:
    from airflow.sdk.execution_time.xcom import XCom

    XCom.set(
        event_cursor_key(identity.try_number),
        cursor,
        dag_id=identity.dag_id,
        task_id=identity.task_id,
        run_id=identity.run_id,
        map_index=identity.map_index,
    )


def get_log_cursor(identity: TaskIdentity) -> str | None:
    """The program-log cursor after the last line the current try wrote to its log (``None``: none
    written yet)."""
    from airflow.sdk.execution_time.xcom import XCom

    value = XCom.get_one(
        key=log_cursor_key(identity.try_number),
        dag_id=identity.dag_id,
        task_id=identity.task_id,
        run_id=identity.run_id,
        map_index=identity.map_index,
    )
    return str(value) if value is not None else None


def set_log_cursor(identity: TaskIdentity, cursor: str | None) -> None:
    from airflow.sdk.execution_time.xcom import XCom

    XCom.set(
        log_cursor_key(identity.try_number),
        cursor,
        dag_id=identity.dag_id,
        task_id=identity.task_id,
        run_id=identity.run_id,
        map_index=identity.map_index,
    )
