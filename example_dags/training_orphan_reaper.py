"""Orphan reaper, every 5 minutes: cancels training jobs whose Airflow task gave up on them.

Covers what no per-task code can: a task marked failed while its triggerer was down, a worker
killed for good. Only jobs tagged with this deployment (env ``AIRFLOW_TRAINING_DEPLOYMENT``) are
considered; each is cancelled with a final checkpoint.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_training_provider.operators.reaper import ReapOrphanedTrainingJobsOperator

with DAG(
    dag_id="training_orphan_reaper",
    schedule=timedelta(minutes=5),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["training", "maintenance", "example"],
):
    ReapOrphanedTrainingJobsOperator(
        task_id="reap",
        conn_id=os.environ.get("TRAINING_CONN_ID", "tensorone_local"),
        min_age=60,
    )
