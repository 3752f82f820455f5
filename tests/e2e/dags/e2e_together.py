"""Together AI failure paths for the e2e tests (copied into the e2e dags folder by the fixture)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator


def finetune(conn_id: str, **extra) -> dict:
    return {
        "model": "local/digits-mlp-4b",
        "training_file": "file-digits",
        "n_epochs": 20,
        "n_checkpoints": 2,
        "x_local": {"seconds_per_epoch": 0.5},
        **extra,
    }


with DAG(dag_id="e2e_together_bad_wandb_key", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    SubmitTrainingJobOperator(
        task_id="finetune",
        conn_id="together_local",
        spec=finetune("together_local", wandb_key="too-short-to-be-a-key", suffix="bad-wandb"),
        deferrable=True,
        poll_interval=1,
    )

with DAG(dag_id="e2e_together_out_of_balance", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    SubmitTrainingJobOperator(
        task_id="finetune",
        conn_id="together_broke",
        spec=finetune("together_broke", suffix="broke"),
        deferrable=True,
        poll_interval=1,
    )
