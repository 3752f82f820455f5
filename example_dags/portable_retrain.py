"""One training job, any platform: the same portable spec and your own script on SageMaker, PAI and
ModelArts, mapped over their connections, then the runs compared and the best model promoted.

``train`` is one ``SubmitTrainingJobOperator`` with a ``portable_spec``, expanded over three
connection ids: each map index compiles the spec for its connection's platform (the Rendered
Template view shows the native body as ``spec``), uploads ``training_code/`` (beside this file) to
that connection's ``storage_root`` and submits. Nothing in the spec names a platform except the
fields that only one platform has (the images, the instance types, SageMaker's ``RoleArn``,
ModelArts' preset engine); the locations are relative to each connection's ``storage_root``.
Moving the pipeline to another cloud, or from the local platform to a cloud, changes the
connections, not the spec. ``docs/portable-spec.md`` has what each field becomes on each platform.

* ``put_data`` (mapped the same way) writes the data set (scikit-learn's digits as a CSV,
  standing in for your own data) to ``portable/data/`` in each connection's storage.
* ``train`` runs ``training_code/train.py``, which reads the ``train`` channel and writes its
  model and checkpoints where each platform's contract says; ``metric_definitions`` turn the lines
  it prints (``epoch=3 loss=… validation_accuracy=…``) into the job's metrics (on ModelArts, which
  has no metric regexes, the operator reads them from the program log when the job ends).
* ``compare`` lines the runs up (platform, job, metrics, model) and picks the best validation
  accuracy; ``promote`` records that model in a small file-based model registry when it is good
  enough (``params.min_val_accuracy``).

Run it against the local training platform started with ``--allow-user-code`` and the local
connections of ``README.md`` (each with its ``storage_root``)::

    airflow-training-platform serve --port 8765 --data-dir /tmp/platform --allow-user-code
    airflow dags test portable_retrain_own_script
"""

from __future__ import annotations

import csv
import io
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


REGISTRY_DIR = Path(os.environ.get("TRAINING_MODEL_REGISTRY", "/tmp/airflow-training-registry"))
RUN = "{{ dag_run.run_after.strftime('%Y%m%d-%H%M%S') }}"
"""Per run: a new run starts from scratch, a retry of the same run resumes from its checkpoints."""
CONNECTIONS = [
    os.environ.get("SAGEMAKER_CONN_ID", "aws_local"),
    os.environ.get("PAI_CONN_ID", "pai_local"),
    os.environ.get("MODELARTS_CONN_ID", "modelarts_local"),
]

PORTABLE_SPEC = {
    "name": "digits-portable",
    "source_dir": "training_code",  # beside this file; uploaded by the operator
    "entry_point": "train.py",
    "image": {
        # script mode: a scikit-learn framework image runs train.py
        "sagemaker": "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3",
        "pai": "dsw-registry.cn-hangzhou.cr.aliyuncs.com/pai/pytorch-training:2.1-cpu-py310",
    },
    "inputs": {"train": "portable/data/"},
    "output": f"portable/models/{RUN}/",
    "checkpoints": f"portable/checkpoints/{RUN}/",
    "hyperparameters": {"epochs": "{{ params.epochs }}", "learning_rate": "{{ params.learning_rate }}"},
    "resources": {
        "instance_type": {
            "sagemaker": "ml.m5.large",
            "pai": "ecs.c6.large",
            "modelarts": "modelarts.vm.cpu.2u",
        }
    },
    "max_runtime": 3600,
    "metric_definitions": {
        "epoch": r"epoch=(\d+)",
        "loss": r"\bloss=([0-9.]+)",
        "validation_loss": r"validation_loss=([0-9.]+)",
        "validation_accuracy": r"validation_accuracy=([0-9.]+)",
    },
    "tags": {"pipeline": "portable-retrain"},
    "options": {
        "sagemaker": {"RoleArn": "arn:aws:iam::123456789012:role/SageMakerTraining"},
        # a preset engine runs ModelArts' boot file (an image would take its place)
        "modelarts": {
            "algorithm": {
                "engine": {"engine_name": "PyTorch", "engine_version": "pytorch_2.1.0-cuda_12.1-py_3.10"}
            }
        },  # fmt: skip
    },
}


def digits_csv() -> bytes:
    """The digits data set as CSV rows (64 pixel values, then the label): your own data here."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    out = io.StringIO()
    csv.writer(out).writerows(
        [*row, label] for row, label in zip(digits.data.astype(int), digits.target, strict=True)
    )
    return out.getvalue().encode()


with DAG(
    dag_id="portable_retrain_own_script",
    schedule="@weekly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"min_val_accuracy": 0.90, "epochs": 10, "learning_rate": 0.05},
    tags=["training", "portable", "user-code", "example"],
):

    @task
    def put_data(conn_id: str) -> str:
        """The data set to ``portable/data/digits.csv`` in the connection's storage (its bucket is
        created when missing: the local platform starts without buckets)."""
        from airflow_training_provider.hooks.training import TrainingPlatformHook
        from airflow_training_provider.storage import PlatformStorage

        storage = PlatformStorage(TrainingPlatformHook(conn_id).platform_connection)
        storage.ensure_bucket()
        return storage.put("portable/data/digits.csv", digits_csv())

    train = SubmitTrainingJobOperator.partial(
        task_id="train",
        portable_spec=PORTABLE_SPEC,
        deferrable=True,
        poll_interval=2,
        stream_logs=True,  # train.py's own lines in each map index's log
        map_index_template="{{ task.conn_id }}",
    ).expand(conn_id=CONNECTIONS)

    @task
    def compare(jobs: list[dict]) -> dict:
        """The runs side by side; the best validation accuracy wins."""
        for job in jobs:
            metrics = ", ".join(f"{k} {float(v):.4f}" for k, v in sorted(job["metrics"].items()))
            print(f"{job['platform']:>10}  {job['id']}  {metrics}  model {job['artifacts'].get('model')}")
        best = max(jobs, key=lambda job: _accuracy(job))  # a diverged run ("NaN") ranks last
        print(f"best: {best['platform']} job {best['id']}")
        return best

    @task
    def promote(best: dict, params: dict | None = None) -> dict | None:
        accuracy = _accuracy(best)
        if accuracy < float(params["min_val_accuracy"]):
            print(f"not promoted: validation accuracy {accuracy:.4f} < {params['min_val_accuracy']}")
            return None
        record = {
            "job_id": best["id"],
            "platform": best["platform"],
            "model": best["artifacts"].get("model"),
            "metrics": best["metrics"],
        }
        REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
        (REGISTRY_DIR / "portable-digits.json").write_text(json.dumps(record, indent=2))
        print(f"promoted the {best['platform']} model {record['model']} with {record['metrics']}")
        return record

    put_data.expand(conn_id=CONNECTIONS) >> train
    promote(compare(train.output))
