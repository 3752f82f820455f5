"""Retraining pipeline on Huawei Cloud ModelArts: train → register the model if the job finished.

* ``train`` submits a ModelArts training job (API v2, deferrable: no worker slot is held while it
  runs) and returns the final job: state, the checkpoint and model locations (its output
  channels), the run time. The job carries the task-instance identity in ``metadata.annotations``
  and its name, so a retry re-attaches to its job and never starts a second one; a retry after a
  failed job gets a ``resume_from`` input at the failed job's ``checkpoints`` channel and resumes
  from it. Killing or timing out the task terminates the job (SIGTERM to the containers, whose
  final checkpoint lands in the ``checkpoints`` channel). ModelArts' events stream into the task log.
* ``register`` records the model location in a small file-based model registry. ModelArts keeps no
  training metrics on the job object: a real pipeline would evaluate the model it finds in the
  ``train_url`` channel here.

Connection: an Airflow ``modelarts`` connection: access key (login) and secret key (password),
``region`` and ``project_id`` in the extras (or an IAM token in ``auth_token``). For the local
training platform, put its URL in the host::

    AIRFLOW_CONN_MODELARTS_LOCAL='{"conn_type": "modelarts", "host": "http://127.0.0.1:8765",
        "login": "HWLOCALAK", "password": "local-secret-key",
        "extra": {"region": "cn-north-4", "project_id": "0a1b2c3d4e5f"}}'
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator

CONN_ID = os.environ.get("MODELARTS_CONN_ID", "modelarts_local")
REGISTRY_DIR = Path(os.environ.get("TRAINING_MODEL_REGISTRY", "/tmp/airflow-training-registry"))
BUCKET = os.environ.get("MODELARTS_BUCKET", "/ml-training-local")  # an OBS bucket, ModelArts' path form

with DAG(
    dag_id="modelarts_retrain_digits",
    schedule="@weekly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"epochs": 10, "seconds_per_epoch": 0.5},
    tags=["training", "modelarts", "example"],
):
    run_day = "{{ dag_run.run_after.strftime('%Y%m%d') }}"
    train = SubmitTrainingJobOperator(
        task_id="train",
        conn_id=CONN_ID,
        spec={
            "kind": "job",
            "metadata": {"name": f"digits-{run_day}", "description": "weekly digits retrain"},
            "algorithm": {
                "engine": {"image_url": "swr.cn-north-4.myhuaweicloud.com/ml/digits-mlp:1"},
                "command": "python /home/ma-user/code/train.py",
                "parameters": {
                    "epochs": "{{ params.epochs }}",
                    "batch_size": "32",
                    "learning_rate": "0.001",
                    "seconds_per_epoch": "{{ params.seconds_per_epoch }}",
                },
                "inputs": [
                    {"name": "data_url", "remote": {"obs": {"obs_url": f"{BUCKET}/datasets/digits/"}}}
                ],
                "outputs": [
                    {
                        "name": "train_url",
                        "remote": {"obs": {"obs_url": f"{BUCKET}/models/digits-{run_day}/"}},
                    },
                    {
                        "name": "checkpoints",
                        "remote": {"obs": {"obs_url": f"{BUCKET}/checkpoints/digits-{run_day}/"}},
                    },
                ],
            },
            "spec": {"resource": {"flavor_id": "modelarts.p3.large.public", "node_count": 1}},
        },
        deferrable=True,
        poll_interval=2,
    )

    @task
    def register(job: dict) -> dict:
        record = {
            "job_id": job["id"],
            "checkpoints": job["artifacts"].get("checkpoints"),
            "run_seconds": job["cost"].get("billable_seconds"),
            "state": job["state"],
        }
        REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
        (REGISTRY_DIR / "digits-modelarts.json").write_text(json.dumps(record, indent=2))
        print(f"registered the model of job {record['job_id']} ({record['checkpoints']})")
        return record

    register(train.output)
