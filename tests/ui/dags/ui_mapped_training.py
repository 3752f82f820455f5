"""A mapped training task: one job per map index (the "Training job" view shows each)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator


def spec(i: int) -> dict:
    return {
        "name": f"mapped-{i}",
        "datasetId": "digits",
        "config": {"training": {"epochs": 2 + i, "batch_size": 64, "seconds_per_epoch": 0.3}},
    }


with DAG("ui_mapped_training", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["test"]):
    SubmitTrainingJobOperator.partial(
        task_id="train", conn_id="tensorone_local", deferrable=True, poll_interval=1
    ).expand(spec=[spec(0), spec(1)])
