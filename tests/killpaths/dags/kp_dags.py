"""DAGs for the kill-path cases (K1–K20 of shared/cases/kill-paths.md), one per shape of task and
platform: ``kp_<shape>`` on TensorOne, ``kp_<shape>_together`` on Together AI.

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

START = datetime(2026, 1, 1)


class PidRecordingSubmit(SubmitTrainingJobOperator):
    def execute(self, context):
        context["ti"].xcom_push(key="pid", value=os.getpid())
        return super().execute(context)


def tensorone_spec(epochs: int, seconds_per_epoch: float, **training) -> dict:
    return {
        "name": "kp-{{ dag.dag_id }}",
        "datasetId": "digits",
        "config": {"training": {"epochs": epochs, "seconds_per_epoch": seconds_per_epoch, **training}},
    }


def together_spec(epochs: int, seconds_per_epoch: float, learning_rate: float = 0.001, **extra) -> dict:
    local: dict = {"seconds_per_epoch": seconds_per_epoch}
    if learning_rate < 0:  # Together refuses it before submit: have the trainer fail instead
        local["fail_with"] = "CUDA error: an illegal memory access was encountered (learning_rate diverged)"
        learning_rate = 0.001
    return {
        "model": "local/digits-mlp-4b",
        "training_file": "file-digits",
        "n_epochs": epochs,
        "n_checkpoints": epochs,
        "learning_rate": learning_rate,
        "suffix": "kp",
        "x_local": local,
        **extra,
    }


PLATFORMS = {"": ("tensorone_local", tensorone_spec), "_together": ("together_local", together_spec)}


def dag(dag_id: str, **kwargs) -> DAG:
    return DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, **kwargs)


for suffix, (CONN_ID, spec) in PLATFORMS.items():
    LONG = spec(epochs=400, seconds_per_epoch=0.5)  # ~200 s: outlives every action in the tests
    deferred = {"conn_id": CONN_ID, "deferrable": True, "poll_interval": 2}
    running = {"conn_id": CONN_ID, "deferrable": False, "poll_interval": 1}
    retry = {"retries": 1, "retry_delay": timedelta(seconds=1)}

    with dag(f"kp_deferred{suffix}"):
        PidRecordingSubmit(task_id="train", spec=LONG, **deferred)

    with dag(f"kp_deferred_mark_success_cancels{suffix}"):
        PidRecordingSubmit(task_id="train", spec=LONG, cancel_on_mark_success=True, **deferred)

    with dag(f"kp_deferred_reattach_on_clear{suffix}"):
        PidRecordingSubmit(task_id="train", spec=LONG, reattach_on_clear=True, **deferred)

    with dag(f"kp_dagrun_timeout{suffix}", dagrun_timeout=timedelta(seconds=30)):
        PidRecordingSubmit(task_id="train", spec=LONG, **deferred)

    with dag(f"kp_exec_timeout_deferred{suffix}"):
        PidRecordingSubmit(
            task_id="train", spec=LONG, execution_timeout=timedelta(seconds=25), **deferred,
            retries=1, retry_delay=timedelta(seconds=2),
        )  # fmt: skip

    with dag(f"kp_defer_timeout{suffix}"):
        PidRecordingSubmit(task_id="train", spec=LONG, defer_timeout=30, **deferred)

    with dag(f"kp_running{suffix}"):
        PidRecordingSubmit(task_id="train", spec=LONG, **running)

    with dag(f"kp_running_exec_timeout{suffix}"):
        PidRecordingSubmit(task_id="train", spec=LONG, execution_timeout=timedelta(seconds=25), **running)

    with dag(f"kp_worker_crash_reattach{suffix}"):
        PidRecordingSubmit(task_id="train", spec=LONG, **running, **retry)

    with dag(f"kp_worker_crash_adopt{suffix}"):
        PidRecordingSubmit(task_id="train", spec=spec(epochs=16, seconds_per_epoch=0.5), **running, **retry)

    with dag(f"kp_short_deferred{suffix}"):
        PidRecordingSubmit(
            task_id="train", spec=spec(epochs=24, seconds_per_epoch=0.5), outage_budget=120,
            conn_id=CONN_ID, deferrable=True, poll_interval=1,
        )  # fmt: skip

    with dag(f"kp_medium_deferred{suffix}"):
        PidRecordingSubmit(task_id="train", spec=spec(epochs=120, seconds_per_epoch=0.5), **deferred)

    with dag(f"kp_outage_retry{suffix}"):
        PidRecordingSubmit(
            task_id="train", spec=spec(epochs=60, seconds_per_epoch=0.5), outage_budget=8,
            conn_id=CONN_ID, deferrable=True, poll_interval=1, retries=1, retry_delay=timedelta(seconds=2),
        )  # fmt: skip

    with dag(f"kp_fails_fast{suffix}"):
        PidRecordingSubmit(
            task_id="train", spec=spec(epochs=3, seconds_per_epoch=0.1, learning_rate=-0.5),
            conn_id=CONN_ID, deferrable=True, poll_interval=1,
        )  # fmt: skip

    with dag(f"kp_reaper{suffix}"):
        ReapOrphanedTrainingJobsOperator(task_id="reap", conn_id=CONN_ID, min_age=5)

# Together only: platform-initiated cancels and event streaming (K19, K20).
with dag("kp_bad_wandb_key_together"):
    PidRecordingSubmit(
        task_id="train", conn_id="together_local", deferrable=True, poll_interval=1,
        spec=together_spec(epochs=20, seconds_per_epoch=0.5, wandb_key="not-forty-characters"),
    )  # fmt: skip

with dag("kp_events_together"):
    PidRecordingSubmit(
        task_id="train", conn_id="together_local", deferrable=True, poll_interval=1,
        spec=together_spec(epochs=30, seconds_per_epoch=0.5),
    )  # fmt: skip
