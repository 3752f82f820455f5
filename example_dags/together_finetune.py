"""Fine-tune pipeline on Together AI: fine-tune → report the model and its last checkpoint.

* ``finetune`` submits a fine-tuning job (deferrable) and streams the job's events (job_start,
  checkpoint_save, epoch_complete, ...) into the task log as they arrive. If Together cancels the
  job itself (invalid W&B key, exhausted balance), the task fails quoting that event.
* ``report`` prints the output model and the ``from_checkpoint`` reference of the last saved
  checkpoint, ready for a follow-up fine-tune.

Connection: ``together_local`` by default, e.g. for the local training platform::

    AIRFLOW_CONN_TOGETHER_LOCAL='{"conn_type": "together", "host": "http://127.0.0.1:8765", "password": "local-key"}'

``x_local`` only paces the local platform's training (seconds per epoch); remove it for the real API.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator

CONN_ID = os.environ.get("TOGETHER_CONN_ID", "together_local")

with DAG(
    dag_id="together_finetune_digits",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"n_epochs": 6, "wandb_key": None},
    render_template_as_native_obj=True,
    tags=["training", "together", "example"],
):
    finetune = SubmitTrainingJobOperator(
        task_id="finetune",
        conn_id=CONN_ID,
        spec={
            "model": "local/digits-mlp-4b",
            "training_file": "file-digits",
            "n_epochs": "{{ params.n_epochs }}",
            "n_checkpoints": 3,
            "learning_rate": 0.001,
            "batch_size": 32,
            "suffix": "digits-{{ dag_run.run_after.strftime('%Y%m%d') }}",
            "wandb_key": "{{ params.wandb_key }}",
            "x_local": {"seconds_per_epoch": 0.5},
        },
        deferrable=True,
        poll_interval=2,
        resume_from_checkpoint=True,
    )

    @task
    def report(job: dict) -> dict:
        last = job["checkpoints"][-1] if job["checkpoints"] else None
        ref = f"{job['id']}:{last['step']}" if last else None
        print(
            f"fine-tune {job['id']} {job['state']}: {len(job['checkpoints'])} checkpoints, from_checkpoint={ref}"
        )
        return {"job_id": job["id"], "from_checkpoint": ref, "cost_usd": job["cost"].get("total_usd")}

    report(finetune.output)
