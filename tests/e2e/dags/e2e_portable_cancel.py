"""A portable job that Airflow gives up on: the example's portable spec (``portable_retrain.py``,
beside it in the DAGs folder) with far more epochs than the task's ``execution_timeout`` allows,
mapped over the local SageMaker, PAI and ModelArts connections. When the timeout runs out the
trigger cancels each job; the script saves a checkpoint on SIGTERM, and the checkpoint stays where
the platform keeps it (``tests/e2e/test_portable_dag.py``)."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG
from portable_retrain import CONNECTIONS, PORTABLE_SPEC, put_data

from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator

with DAG(dag_id="e2e_portable_cancel", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    put_data.override(task_id="put_data").expand(conn_id=CONNECTIONS) >> SubmitTrainingJobOperator.partial(
        task_id="train",
        portable_spec={
            **PORTABLE_SPEC,
            "hyperparameters": {"epochs": 100000, "learning_rate": 0.05},  # runs until cancelled
            "output": "cancel/models/{{ run_id | replace(':', '-') }}/",
            "checkpoints": "cancel/checkpoints/{{ run_id | replace(':', '-') }}/",
        },
        deferrable=True,
        poll_interval=1,
        execution_timeout=timedelta(seconds=15),
    ).expand(conn_id=CONNECTIONS)
