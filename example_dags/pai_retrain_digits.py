"""Retraining pipeline on Alibaba Cloud PAI: train → evaluate → promote only if good enough.

* ``train`` submits a PaiStudio ``CreateTrainingJob`` (deferrable: no worker slot is held while it
  runs) and returns the final job: state, latest metrics, the model and checkpoint channels, the
  run time. The job carries the task-instance identity as PAI labels, so a retry re-attaches to its
  job and never starts a second one; a retry after a failed job gets the failed job's
  ``checkpoints`` channel and resumes from it. Killing or timing out the task stops the job
  (``StopTrainingJob``: SIGTERM to the containers, whose final checkpoint lands in the
  ``checkpoints`` channel). PAI's events stream into the task log.
* ``evaluate`` reads the validation accuracy from the latest metrics and short-circuits the
  pipeline when it is below ``params.min_val_accuracy``.
* ``promote`` records the model in a small file-based model registry.

Connection: an Airflow ``pai`` connection: AccessKey ID (login) and secret (password), ``region``
and ``workspace_id`` in the extras (or Alibaba's credential chain: environment, ECS RAM role). For
the local training platform, put its URL in the host::

    AIRFLOW_CONN_PAI_LOCAL='{"conn_type": "pai", "host": "http://127.0.0.1:8765", "login": "LTAIlocal",
                             "password": "local-secret", "extra": {"region": "cn-hangzhou", "workspace_id": "86995"}}'
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator

CONN_ID = os.environ.get("PAI_CONN_ID", "pai_local")
REGISTRY_DIR = Path(os.environ.get("TRAINING_MODEL_REGISTRY", "/tmp/airflow-training-registry"))
BUCKET = os.environ.get("PAI_BUCKET", "oss://ml-training-local")

with DAG(
    dag_id="pai_retrain_digits",
    schedule="@weekly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"min_val_accuracy": 0.90, "epochs": 10, "seconds_per_epoch": 0.5},
    tags=["training", "pai", "example"],
):
    run_day = "{{ dag_run.run_after.strftime('%Y%m%d') }}"
    train = SubmitTrainingJobOperator(
        task_id="train",
        conn_id=CONN_ID,
        spec={
            "TrainingJobName": f"digits-{run_day}",
            "AlgorithmSpec": {
                "Image": "local/digits-mlp:1",
                "Command": ["python", "train.py"],
                "JobType": "PyTorchJob",
            },
            "ComputeResource": {"EcsSpec": "ecs.gn7i-c8g1.2xlarge", "EcsCount": 1},
            "InputChannels": [{"Name": "train", "InputUri": f"{BUCKET}/datasets/digits/"}],
            "OutputChannels": [
                {"Name": "model", "OutputUri": f"{BUCKET}/models/digits-{run_day}/"},
                {"Name": "checkpoints", "OutputUri": f"{BUCKET}/checkpoints/digits-{run_day}/"},
            ],
            "HyperParameters": {
                "epochs": "{{ params.epochs }}",
                "batch_size": "32",
                "learning_rate": "0.001",
                "seconds_per_epoch": "{{ params.seconds_per_epoch }}",
            },
            "Scheduler": {"MaxRunningTimeInSeconds": 3600},
            "Labels": [{"Key": "team", "Value": "ml"}],
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
        record = {
            "job_id": job["id"],
            "model": job["artifacts"].get("model"),
            "checkpoints": job["artifacts"].get("checkpoints"),
            "validation_accuracy": job["metrics"].get("validation_accuracy"),
            "run_seconds": job["cost"].get("billable_seconds"),
        }
        REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
        (REGISTRY_DIR / "digits-pai.json").write_text(json.dumps(record, indent=2))
        print(f"promoted model {record['model']}")
        return record

    evaluate(train.output) >> promote(train.output)
