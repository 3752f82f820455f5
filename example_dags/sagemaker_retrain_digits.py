"""Retraining pipeline on AWS SageMaker: train → evaluate → promote only if good enough.

* ``train`` submits a ``CreateTrainingJob`` (deferrable: no worker slot is held while it runs) and
  returns the final job: state, final metrics, model artifact and checkpoint location, billed time.
  The job name is derived from the task-instance try (``digits-<date>-t<try>``), so a retry
  re-attaches to its job and never starts a second one; a retry after a failed job resumes from the
  checkpoints in ``CheckpointConfig.S3Uri``. Killing or timing out the task stops the job
  (SageMaker sends the algorithm SIGTERM and waits for it to save its state).
* ``evaluate`` reads the validation accuracy from the final metrics and short-circuits the pipeline
  when it is below ``params.min_val_accuracy``.
* ``promote`` records the model artifact in a small file-based model registry.

Connection: an Airflow ``aws`` connection (the Amazon provider's: keys, role_arn, profile or the
environment; ``region_name``). For the local training platform, point ``endpoint_url`` at it::

    AIRFLOW_CONN_AWS_LOCAL='{"conn_type": "aws", "login": "AKIDLOCAL", "password": "local-secret",
                             "extra": {"region_name": "us-east-1", "endpoint_url": "http://127.0.0.1:8765"}}'
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator

CONN_ID = os.environ.get("SAGEMAKER_CONN_ID", "aws_local")
REGISTRY_DIR = Path(os.environ.get("TRAINING_MODEL_REGISTRY", "/tmp/airflow-training-registry"))
BUCKET = os.environ.get("SAGEMAKER_BUCKET", "s3://ml-training-local")

with DAG(
    dag_id="sagemaker_retrain_digits",
    schedule="@weekly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"min_val_accuracy": 0.90, "epochs": 10, "seconds_per_epoch": 0.5},
    tags=["training", "sagemaker", "example"],
):
    train = SubmitTrainingJobOperator(
        task_id="train",
        conn_id=CONN_ID,
        spec={
            "TrainingJobName": "digits-{{ dag_run.run_after.strftime('%Y%m%d') }}",
            "RoleArn": "arn:aws:iam::123456789012:role/SageMakerTraining",
            "AlgorithmSpecification": {"TrainingImage": "local/digits-mlp:1", "TrainingInputMode": "File"},
            "InputDataConfig": [
                {
                    "ChannelName": "train",
                    "DataSource": {
                        "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"{BUCKET}/datasets/digits/"}
                    },
                }
            ],
            "OutputDataConfig": {"S3OutputPath": f"{BUCKET}/models"},
            "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
            "CheckpointConfig": {
                "S3Uri": f"{BUCKET}/checkpoints/digits-{{{{ dag_run.run_after.strftime('%Y%m%d') }}}}"
            },
            "HyperParameters": {
                "epochs": "{{ params.epochs }}",
                "batch_size": "32",
                "learning_rate": "0.001",
                "seconds_per_epoch": "{{ params.seconds_per_epoch }}",
            },
            "Tags": [{"Key": "team", "Value": "ml"}],
        },
        deferrable=True,
        poll_interval=2,
    )

    @task.short_circuit
    def evaluate(job: dict, params: dict | None = None) -> bool:
        accuracy = float(job["metrics"].get("validation:accuracy", 0.0))  # "NaN" if it diverged
        threshold = float(params["min_val_accuracy"])
        print(f"job {job['id']}: validation accuracy {accuracy:.4f} (threshold {threshold:.2f})")
        return accuracy >= threshold

    @task
    def promote(job: dict) -> dict:
        record = {
            "job_id": job["id"],
            "model_artifact": job["artifacts"].get("model"),
            "checkpoints": job["artifacts"].get("checkpoints"),
            "validation_accuracy": job["metrics"].get("validation:accuracy"),
            "billable_seconds": job["cost"].get("billable_seconds"),
        }
        REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
        (REGISTRY_DIR / "digits-sagemaker.json").write_text(json.dumps(record, indent=2))
        print(f"promoted model {record['model_artifact']}")
        return record

    evaluate(train.output) >> promote(train.output)
