"""Retraining pipeline on TensorOne: train → evaluate → promote only if good enough.

* ``train`` submits a training job (deferrable: no worker slot is held while it runs) and returns
  the final job: state, metrics, checkpoints and cost.
* ``evaluate`` reads the validation accuracy from that result and short-circuits the pipeline
  when it is below ``params.min_val_accuracy``.
* ``promote`` records the job's final checkpoint in a small file-based model registry.

Connection: ``tensorone_local`` by default, e.g. from the environment::

    AIRFLOW_CONN_TENSORONE_LOCAL='{"conn_type": "tensorone", "host": "http://127.0.0.1:8765", "password": "local-key"}'

pointing at the local training platform (``airflow-training-platform serve --port 8765 ...``).
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator

CONN_ID = os.environ.get("TRAINING_CONN_ID", "tensorone_local")
REGISTRY_DIR = Path(os.environ.get("TRAINING_MODEL_REGISTRY", "/tmp/airflow-training-registry"))
# How long an epoch takes on the local platform (`make ui` slows it down to watch the curves grow).
SECONDS_PER_EPOCH = float(os.environ.get("TRAINING_SECONDS_PER_EPOCH", "0.5"))

with DAG(
    dag_id="tensorone_retrain_digits",
    schedule="@weekly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"min_val_accuracy": 0.90, "epochs": 10, "seconds_per_epoch": SECONDS_PER_EPOCH},
    tags=["training", "tensorone", "example"],
    render_template_as_native_obj=True,  # epochs etc. reach the spec as numbers, not strings
):
    train = SubmitTrainingJobOperator(
        task_id="train",
        conn_id=CONN_ID,
        spec={
            "name": "digits-retrain-{{ dag_run.run_after.strftime('%Y%m%d') }}",
            "modelType": "custom",
            "datasetId": "digits",
            "config": {
                "training": {
                    "epochs": "{{ params.epochs }}",
                    "batch_size": 32,
                    "learning_rate": 0.001,
                    "seconds_per_epoch": "{{ params.seconds_per_epoch }}",
                }
            },
            "gpuType": "a100",
            "maxWorkers": 1,
            "tags": ["team:ml", "pipeline:digits-retrain"],
        },
        deferrable=True,
        poll_interval=2,
    )

    @task.short_circuit
    def evaluate(job: dict, params: dict | None = None) -> bool:
        accuracy = float(job["metrics"].get("validation_accuracy", 0.0))  # "NaN" if it diverged
        threshold = float(params["min_val_accuracy"])
        print(f"job {job['id']}: validation accuracy {accuracy:.4f} (threshold {threshold:.2f})")
        return accuracy >= threshold

    @task
    def promote(job: dict) -> dict:
        final = job["checkpoints"][-1]
        record = {
            "job_id": job["id"],
            "checkpoint_id": final["id"],
            "checkpoint_path": final.get("path"),
            "validation_accuracy": job["metrics"].get("validation_accuracy"),
            "cost_usd": job["cost"].get("total_usd"),
        }
        REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
        (REGISTRY_DIR / "digits-classifier.json").write_text(json.dumps(record, indent=2))
        print(f"promoted checkpoint {record['checkpoint_id']} at {record['checkpoint_path']}")
        return record

    evaluate(train.output) >> promote(train.output)
