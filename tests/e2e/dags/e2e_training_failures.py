"""Test DAGs for failure paths (copied into the e2e dags folder by the fixture)."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.sensors.training_job import TrainingJobSensor

CONN_ID = os.environ.get("TRAINING_CONN_ID", "tensorone_local")

with DAG(dag_id="e2e_failing_job", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    SubmitTrainingJobOperator(
        task_id="train",
        conn_id=CONN_ID,
        spec={
            "name": "negative-lr",
            "datasetId": "digits",
            "config": {"training": {"epochs": 3, "learning_rate": -0.1, "seconds_per_epoch": 0.1}},
        },
        deferrable=True,
        poll_interval=1,
    )

with DAG(dag_id="e2e_sigterm_running_task", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    SubmitTrainingJobOperator(
        task_id="train",
        conn_id=CONN_ID,
        spec={
            "name": "long-sync-job",
            "datasetId": "digits",
            "config": {"training": {"epochs": 200, "seconds_per_epoch": 0.5}},
            "tags": ["e2e:sigterm"],
        },
        deferrable=False,
        poll_interval=1,
    )

with DAG(dag_id="e2e_sensor", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    TrainingJobSensor(
        task_id="wait",
        conn_id=CONN_ID,
        job_id="{{ dag_run.conf['job_id'] }}",
        deferrable=True,
        poll_interval=1,
    )
