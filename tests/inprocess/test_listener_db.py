"""The mark-failed listener against Airflow's own ORM (a throw-away SQLite metadata database with
foreign keys on, as Airflow configures it) and the local platform: what it reads (decrypted trigger
kwargs, the try's XCom, the triggerer's heartbeat), its claim (the task instance kept, detached; the
trigger row deleted) and one accepted cancel however often it is called."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from airflow_training_provider.identity import TaskIdentity
from airflow_training_provider.listeners import (
    CANCEL_REASON,
    TRIGGER_CLASSPATH,
    AirflowMetadata,
    MarkedFailed,
    MarkFailedListener,
)


def deferred_task(
    db, job_id: str, *, triggerer: str | None = "dead", published: str | None = None, **policy
) -> MarkedFailed:
    """A DAG run with one task instance deferred on a training trigger for ``job_id`` (the trigger
    held by a ``triggerer`` that is ``"dead"`` (ended), ``"live"`` or ``None``), the job id
    ``published`` in XCom (default ``job_id``). Returns what the listener keeps of it."""
    from airflow.jobs.job import Job
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.trigger import Trigger
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import insert

    run_id, ti_id, now = f"manual__{uuid.uuid4().hex[:8]}", uuid.uuid4(), datetime.now(UTC)
    identity = TaskIdentity("d", run_id, "train", -1, 1)
    with create_session() as session:
        dag_run = DagRun(dag_id="d", run_id=run_id, run_type="manual", state="running", run_after=now)
        session.add(dag_run)
        triggerer_id = None
        if triggerer is not None:
            job = Job(job_type="TriggererJob")
            job.state = "running" if triggerer == "live" else "success"
            job.latest_heartbeat = now if triggerer == "live" else now - timedelta(minutes=5)
            job.end_date = None if triggerer == "live" else now - timedelta(minutes=5)
            session.add(job)
            session.flush()
            triggerer_id = job.id
        kwargs = {
            "conn_id": "tensorone_local", "job_id": job_id, "dag_id": "d", "run_id": run_id,
            "task_id": "train", "map_index": -1, "try_number": 1, "confirm_interval": 0.3,
            "cancel_on_kill": True, "confirm_timeout": 30, **policy,
        }  # fmt: skip
        trigger = Trigger(TRIGGER_CLASSPATH, kwargs)
        trigger.triggerer_id = triggerer_id
        session.add(trigger)
        session.flush()
        session.execute(
            insert(TaskInstance.__table__).values(
                id=ti_id, dag_id="d", run_id=run_id, task_id="train", map_index=-1, try_number=1,
                state="deferred", trigger_id=trigger.id, next_method="execute_complete", dag_version_id=db,
                pool="default_pool", pool_slots=1, priority_weight=1, max_tries=0, hostname="", unixname="",
                queue="default", custom_operator_name="",
            )
        )  # fmt: skip
        session.execute(
            insert(XComModel.__table__).values(
                dag_run_id=dag_run.id, dag_id="d", run_id=run_id, task_id="train", map_index=-1,
                key="job_id", value=published or job_id, timestamp=now,
            )
        )  # fmt: skip
    return MarkedFailed(str(ti_id), identity, trigger.id, now.timestamp())


def set_state(mark: MarkedFailed, state: str) -> None:
    """What the PATCH commits: only the state (trigger_id stays until a triggerer's clean-up)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import update

    with create_session() as session:
        session.execute(
            update(TaskInstance).where(TaskInstance.id == uuid.UUID(mark.ti_id)).values(state=state)
        )


def rows(mark: MarkedFailed) -> tuple[tuple | None, bool]:
    """``((state, trigger_id) of the task instance or None, whether the trigger row exists)``."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ti = session.execute(
            select(TaskInstance.state, TaskInstance.trigger_id).where(
                TaskInstance.id == uuid.UUID(mark.ti_id)
            )
        ).one_or_none()
        return (tuple(ti) if ti else None), session.get(Trigger, mark.trigger_id) is not None


def test_not_committed_yet_means_look_again(db):
    mark = deferred_task(db, "job_x")
    assert AirflowMetadata().examine(mark, claim=True) is None  # still deferred
    assert rows(mark) == (("deferred", mark.trigger_id), True)


def test_claims_an_orphaned_trigger_keeping_the_task_instance(db):
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session

    mark = deferred_task(db, "job_x", create_final_checkpoint=False)
    with create_session() as session:
        assert not session.get(Trigger, mark.trigger_id).encrypted_kwargs.startswith("{")
    set_state(mark, "failed")
    look = AirflowMetadata().examine(mark, claim=False)
    assert look.act and "is not alive" in look.reason and look.job_id == "job_x"
    assert look.policy.create_final_checkpoint is False and look.confirm_interval == 0.3  # decrypted kwargs
    assert rows(mark) == (("failed", mark.trigger_id), True)  # looking writes nothing
    assert AirflowMetadata().examine(mark, claim=True).act
    assert rows(mark) == (("failed", None), False)  # detached, then deleted; the TI is still there
    again = AirflowMetadata().examine(mark, claim=True)  # a second call finds nothing to claim
    assert not again.act and "trigger is gone" in again.reason


def test_acts_for_a_trigger_no_triggerer_took(db):
    mark = deferred_task(db, "job_x", triggerer=None)
    set_state(mark, "failed")
    verdict = AirflowMetadata().examine(mark, claim=True)
    assert verdict.act and "no triggerer took it" in verdict.reason


@pytest.mark.parametrize(
    ("setup", "state", "reason"),
    [
        ({"triggerer": "live"}, "failed", "is alive and runs the trigger"),
        ({"published": "job_other"}, "failed", "published job job_other"),
        ({"cancel_on_kill": False}, "failed", "cancel_on_kill is off"),
        ({}, "success", "success now"),
    ],
)
def test_leaves_the_trigger_alone(db, setup, state, reason):
    mark = deferred_task(db, "job_x", **setup)
    set_state(mark, state)
    verdict = AirflowMetadata().examine(mark, claim=True)
    assert not verdict.act and reason in verdict.reason
    assert rows(mark) == ((state, mark.trigger_id), True)


def test_cancels_the_job_once_however_often_it_is_called(db, control):
    """A real job; the listener's flow on its own threads' code path (run here), twice — as for a
    task marked failed and then its DAG run: one accepted cancel, checkpoints kept."""
    from airflow_training_provider.hooks.training import TrainingPlatformHook

    spec = {"name": "listener", "datasetId": "digits", "config": {"training": {"epochs": 200}}}
    job = TrainingPlatformHook("tensorone_local").create_job(spec, [])
    control.wait_job(job.id, {"running"}, timeout=60)
    mark = deferred_task(db, job.id)
    set_state(mark, "failed")

    def now(fn, *args):
        fn(*args)
        return True

    listener = MarkFailedListener(submit=now, confirm_submit=now)
    assert listener.handle(mark).act
    assert not listener.handle(mark).act
    record = control.wait_job(job.id, {"cancelled"}, timeout=60)
    (cancel,) = control.accepted_cancels(record)
    assert cancel["reason"] == CANCEL_REASON and cancel["preserve_checkpoints"] is True
    assert rows(mark) == (("failed", None), False)
