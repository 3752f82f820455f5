"""A hyperparameter sweep on TensorOne: one submit task mapped over a small grid, each job with its
own guards, then the best model by validation accuracy promoted.

* ``train`` is mapped over four specs (learning rate × hidden units): four jobs, each its own task
  instance (its own identity, retries, re-attach and cancel). Each stops early once its validation
  loss has not improved for 3 epochs, and is never let past $1 (``max_cost_usd``). Killing or
  clearing one mapped task instance cancels only its own job. Each publishes its model through the
  ``digits-model`` asset alias.
* ``pick_best`` takes the mapped results and picks the job with the best validation accuracy.
* ``promote`` records it in the file-based model registry.

Connection: ``tensorone_local`` (``TRAINING_CONN_ID`` overrides it), as in ``tensorone_retrain_digits``.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator


def _accuracy(job: dict) -> float:
    """The job's validation accuracy; a NaN one (the run diverged: "NaN" in XCom) counts as 0."""
    value = float(job["metrics"].get("validation_accuracy", 0.0))
    return value if value == value else 0.0


CONN_ID = os.environ.get("TRAINING_CONN_ID", "tensorone_local")
REGISTRY_DIR = Path(os.environ.get("TRAINING_MODEL_REGISTRY", "/tmp/airflow-training-registry"))
SECONDS_PER_EPOCH = float(os.environ.get("TRAINING_SECONDS_PER_EPOCH", "0.3"))
GRID = [(learning_rate, hidden_units) for learning_rate in (0.001, 0.01) for hidden_units in (32, 64)]

with DAG(
    dag_id="tensorone_sweep_digits",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["training", "tensorone", "example", "sweep"],
):
    train = SubmitTrainingJobOperator.partial(
        task_id="train",
        conn_id=CONN_ID,
        deferrable=True,
        poll_interval=1,
        early_stopping={"metric": "validation_loss", "mode": "min", "patience": 3, "min_delta": 0.002},
        max_cost_usd=1.0,
        model_alias="digits-model",
    ).expand(
        spec=[
            {
                "name": f"sweep-lr{learning_rate}-h{hidden_units}",
                "datasetId": "digits",
                "config": {
                    "training": {
                        "epochs": 30,
                        "learning_rate": learning_rate,
                        "hidden_units": hidden_units,
                        "seconds_per_epoch": SECONDS_PER_EPOCH,
                    }
                },
            }
            for learning_rate, hidden_units in GRID
        ]
    )

    @task
    def pick_best(jobs: list[dict]) -> dict:
        jobs = list(jobs)
        for job in jobs:
            print(f"job {job['id']}: validation accuracy {job['metrics'].get('validation_accuracy')}")
        return max(jobs, key=_accuracy)  # a diverged run ("NaN") ranks last

    @task
    def promote(job: dict) -> dict:
        model = (job.get("guard") or {}).get("best_checkpoint") or (job["checkpoints"] or [None])[-1]
        record = {
            "job_id": job["id"],
            "checkpoint": model["path"] if model else None,
            "validation_accuracy": job["metrics"].get("validation_accuracy"),
            "stopped_by": (job.get("guard") or {}).get("guard"),
        }
        REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
        (REGISTRY_DIR / "digits-sweep.json").write_text(json.dumps(record, indent=2))
        print(f"promoted job {record['job_id']} ({record['checkpoint']})")
        return record

    promote(pick_best(train.output))
