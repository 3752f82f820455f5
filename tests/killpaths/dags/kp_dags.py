"""DAGs for the kill-path cases (K1–K18 of shared/cases/kill-paths.md), one per shape of task.

Each DAG has one task ``train``. Jobs are paced by ``seconds_per_epoch`` so that they run long
enough for the action under test. ``PidRecordingSubmit`` pushes the task process's PID to XCom so
a test can signal exactly that process.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_training_provider.operators.reaper import ReapOrphanedTrainingJobsOperator
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.sensors.training_job import TrainingJobSensor

CONN_ID = "tensorone_local"
START = datetime(2026, 1, 1)


class PidRecordingSubmit(SubmitTrainingJobOperator):
    def execute(self, context):
        context["ti"].xcom_push(key="pid", value=os.getpid())
        return super().execute(context)


def spec(epochs: int, seconds_per_epoch: float, **training) -> dict:
    return {
        "name": "kp-{{ dag.dag_id }}",
        "datasetId": "digits",
        "config": {"training": {"epochs": epochs, "seconds_per_epoch": seconds_per_epoch, **training}},
    }


def dag(dag_id: str, **kwargs) -> DAG:
    return DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, **kwargs)


LONG = spec(epochs=400, seconds_per_epoch=0.5)  # ~200 s: outlives every action in the tests

with dag("kp_deferred"):
    PidRecordingSubmit(task_id="train", conn_id=CONN_ID, spec=LONG, deferrable=True, poll_interval=2)

with dag("kp_deferred_mark_success_cancels"):
    PidRecordingSubmit(
        task_id="train",
        conn_id=CONN_ID,
        spec=LONG,
        deferrable=True,
        poll_interval=2,
        cancel_on_mark_success=True,
    )

with dag("kp_deferred_reattach_on_clear"):
    PidRecordingSubmit(
        task_id="train", conn_id=CONN_ID, spec=LONG, deferrable=True, poll_interval=2, reattach_on_clear=True
    )

with dag("kp_dagrun_timeout", dagrun_timeout=timedelta(seconds=30)):
    PidRecordingSubmit(task_id="train", conn_id=CONN_ID, spec=LONG, deferrable=True, poll_interval=2)

with dag("kp_exec_timeout_deferred"):
    PidRecordingSubmit(
        task_id="train",
        conn_id=CONN_ID,
        spec=LONG,
        deferrable=True,
        poll_interval=2,
        execution_timeout=timedelta(seconds=25),
        retries=1,
        retry_delay=timedelta(seconds=2),
    )

with dag("kp_defer_timeout"):
    PidRecordingSubmit(
        task_id="train", conn_id=CONN_ID, spec=LONG, deferrable=True, poll_interval=2, defer_timeout=15
    )

with dag("kp_running"):
    PidRecordingSubmit(task_id="train", conn_id=CONN_ID, spec=LONG, deferrable=False, poll_interval=1)

with dag("kp_running_exec_timeout"):
    PidRecordingSubmit(
        task_id="train",
        conn_id=CONN_ID,
        spec=LONG,
        deferrable=False,
        poll_interval=1,
        execution_timeout=timedelta(seconds=25),
    )

with dag("kp_worker_crash_reattach"):
    PidRecordingSubmit(
        task_id="train",
        conn_id=CONN_ID,
        spec=LONG,
        deferrable=False,
        poll_interval=1,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )

with dag("kp_worker_crash_adopt"):
    PidRecordingSubmit(
        task_id="train",
        conn_id=CONN_ID,
        spec=spec(epochs=16, seconds_per_epoch=0.5),
        deferrable=False,
        poll_interval=1,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )

with dag("kp_short_deferred"):
    PidRecordingSubmit(
        task_id="train",
        conn_id=CONN_ID,
        spec=spec(epochs=24, seconds_per_epoch=0.5),
        deferrable=True,
        poll_interval=1,
        outage_budget=120,
    )

with dag("kp_outage_retry"):
    PidRecordingSubmit(
        task_id="train",
        conn_id=CONN_ID,
        spec=spec(epochs=60, seconds_per_epoch=0.5),
        deferrable=True,
        poll_interval=1,
        outage_budget=8,
        retries=1,
        retry_delay=timedelta(seconds=2),
    )

with dag("kp_fails_fast"):
    PidRecordingSubmit(
        task_id="train",
        conn_id=CONN_ID,
        spec=spec(epochs=3, seconds_per_epoch=0.1, learning_rate=-0.5),
        deferrable=True,
        poll_interval=1,
    )

with dag("kp_sensor"):
    TrainingJobSensor(
        task_id="train",
        conn_id=CONN_ID,
        job_id="{{ dag_run.conf['job_id'] }}",
        deferrable=True,
        poll_interval=1,
    )

with dag("kp_reaper"):
    ReapOrphanedTrainingJobsOperator(task_id="reap", conn_id=CONN_ID, min_age=5)
