"""Retraining with your own training script from this repository, on SageMaker, PAI and ModelArts:
upload → train → evaluate → promote, the script's own metrics deciding.

Three DAGs, one per platform, the same four steps:

* ``upload_code_and_data`` puts the script directory (``training_code/``, beside this file) and the
  data set (scikit-learn's digits as a CSV, standing in for your own data) where the platform reads
  them: SageMaker script mode wants the code as ``sourcedir.tar.gz`` in S3 (boto3 ``upload_file``
  through the ``aws`` connection), PAI a ``CodeDir`` prefix in OSS, ModelArts a ``code_dir`` in OBS.
* ``train`` submits the job running ``training_code/train.py`` (SageMaker:
  ``HyperParameters.sagemaker_program`` + ``sagemaker_submit_directory``; PAI:
  ``AlgorithmSpec.Command`` + ``CodeDir``; ModelArts: ``algorithm.code_dir`` + ``boot_file``) and
  returns the final job. On SageMaker and PAI, ``MetricDefinitions`` turn the lines the script
  prints (``epoch=3 loss=… validation_loss=… validation_accuracy=…``) into the job's metrics, in
  the return value and the Training job tab. ModelArts has no metric regexes and reports no training
  metrics: there the script's ``metrics.json``, written beside its model (the ``model_url``
  output), is read instead.
* ``evaluate`` short-circuits the pipeline when the validation accuracy is below
  ``params.min_val_accuracy``.
* ``promote`` records the model artifact and the metrics in a small file-based model registry.

Run them against the local training platform, started with ``--allow-user-code`` (it then runs the
script as a local process by each platform's contract) and the local connections (``README.md``)::

    airflow-training-platform serve --port 8765 --data-dir /tmp/platform --allow-user-code
    TRAINING_PLATFORM_DATA_DIR=/tmp/platform airflow dags test sagemaker_retrain_own_script

The local platform's OSS and OBS are directories (``oss://bucket/key`` is
``<data dir>/oss/bucket/key``, OBS ``/bucket/key`` is ``<data dir>/obs/bucket/key``): the PAI and
ModelArts uploads copy files there, found through ``TRAINING_PLATFORM_DATA_DIR``. On the real
clouds that step is an upload with Alibaba's ``oss2`` or Huawei's OBS client.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import tarfile
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator

CODE_DIR = Path(__file__).parent / "training_code"
REGISTRY_DIR = Path(os.environ.get("TRAINING_MODEL_REGISTRY", "/tmp/airflow-training-registry"))
LOCAL_DATA_DIR = Path(os.environ.get("TRAINING_PLATFORM_DATA_DIR", "/tmp/platform"))
BUCKET = "ml-training-local"
RUN = "{{ dag_run.run_after.strftime('%Y%m%d-%H%M%S') }}"
"""Per run: a new run starts from scratch, a retry of the same run resumes from its checkpoints."""

# The lines train.py prints after each epoch, as metrics (SageMaker and PAI use the same shape).
METRIC_DEFINITIONS = [
    {"Name": "epoch", "Regex": r"epoch=(\d+)"},
    {"Name": "loss", "Regex": r"\bloss=([0-9.]+)"},
    {"Name": "validation_loss", "Regex": r"validation_loss=([0-9.]+)"},
    {"Name": "validation_accuracy", "Regex": r"validation_accuracy=([0-9.]+)"},
]
HYPERPARAMETERS = {"epochs": "{{ params.epochs }}", "learning_rate": "{{ params.learning_rate }}"}


def write_data_csv(directory: Path) -> Path:
    """The digits data set as ``digits.csv`` (64 pixel values, then the label): your own data here."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    path = directory / "digits.csv"
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows(
            [*row, label] for row, label in zip(digits.data.astype(int), digits.target, strict=True)
        )
    return path


def code_files() -> dict[str, Path]:
    """The files of the script directory, by their path in it (what a code upload sends)."""
    return {
        str(path.relative_to(CODE_DIR)): path
        for path in sorted(CODE_DIR.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def copy_into_local_store(store: str, files: dict[str, Path]) -> None:
    """Copy ``{key: file}`` into the local platform's OSS or OBS directory (``store``: oss, obs)."""
    for key, src in files.items():
        dest = LOCAL_DATA_DIR / store / BUCKET / key
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dest)


def upload_sagemaker() -> None:
    """``sourcedir.tar.gz`` (the script directory at its root, as the SageMaker SDK packs it) and
    the data, with boto3's ``upload_file`` through the ``aws`` connection (its ``endpoint_url``:
    the local S3)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    hook = S3Hook(aws_conn_id=CONNECTIONS["sagemaker"])
    if not hook.check_for_bucket(BUCKET):
        hook.create_bucket(BUCKET)
    s3 = hook.get_conn()
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp, "sourcedir.tar.gz")
        with tarfile.open(archive, "w:gz") as tar:
            for name, path in code_files().items():
                tar.add(path, arcname=name)
        s3.upload_file(str(archive), BUCKET, "own-script/code/sourcedir.tar.gz")
        s3.upload_file(str(write_data_csv(Path(tmp))), BUCKET, "own-script/data/digits.csv")


def upload_pai() -> None:
    """The script directory's files as objects under the ``CodeDir`` prefix (as the PAI SDK uploads
    ``source_dir``), the data under the ``train`` channel's."""
    code = {f"own-script/code/{name}": path for name, path in code_files().items()}
    with tempfile.TemporaryDirectory() as tmp:
        copy_into_local_store("oss", {**code, "own-script/data/digits.csv": write_data_csv(Path(tmp))})


def upload_modelarts() -> None:
    """The script directory in the OBS ``code_dir`` (the job gets it as ``${MA_JOB_DIR}/code``), the
    data in the ``data_url`` input's directory."""
    code = {f"own-script/code/{name}": path for name, path in code_files().items()}
    with tempfile.TemporaryDirectory() as tmp:
        copy_into_local_store("obs", {**code, "own-script/data/digits.csv": write_data_csv(Path(tmp))})


SPECS: dict[str, dict[str, Any]] = {
    "sagemaker": {
        "TrainingJobName": f"own-script-{RUN}",
        "RoleArn": "arn:aws:iam::123456789012:role/SageMakerTraining",
        "AlgorithmSpecification": {
            # a scikit-learn framework image; script mode runs train.py from the submit directory
            "TrainingImage": "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3",
            "TrainingInputMode": "File",
            "MetricDefinitions": METRIC_DEFINITIONS,
        },
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {
                    "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/own-script/data/"}
                },
            }
        ],
        "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/own-script/models"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "CheckpointConfig": {"S3Uri": f"s3://{BUCKET}/own-script/checkpoints/{RUN}"},
        # script mode's hyperparameters are JSON-encoded (as the SageMaker SDK sends them)
        "HyperParameters": {
            "sagemaker_program": '"train.py"',
            "sagemaker_submit_directory": f'"s3://{BUCKET}/own-script/code/sourcedir.tar.gz"',
            **HYPERPARAMETERS,
        },
    },
    "pai": {
        "TrainingJobName": f"own-script-{RUN}",
        "AlgorithmSpec": {
            "Image": "dsw-registry.cn-hangzhou.cr.aliyuncs.com/pai/pytorch-training:2.1-cpu-py310",
            # as the PAI SDK sends the command "python train.py $PAI_USER_ARGS"
            "Command": ["sh", "-c", "python train.py $PAI_USER_ARGS"],
            "JobType": "PyTorchJob",
            "MetricDefinitions": METRIC_DEFINITIONS,
        },
        "CodeDir": {"LocationType": "oss", "LocationValue": {"Bucket": BUCKET, "Key": "own-script/code/"}},
        "ComputeResource": {"EcsSpec": "ecs.c6.large", "EcsCount": 1},
        "InputChannels": [{"Name": "train", "InputUri": f"oss://{BUCKET}/own-script/data/"}],
        "OutputChannels": [
            {"Name": "model", "OutputUri": f"oss://{BUCKET}/own-script/models/{RUN}/"},
            {"Name": "checkpoints", "OutputUri": f"oss://{BUCKET}/own-script/checkpoints/{RUN}/"},
        ],
        "HyperParameters": HYPERPARAMETERS,
        "Scheduler": {"MaxRunningTimeInSeconds": 3600},
    },
    "modelarts": {
        "kind": "job",
        "metadata": {"name": f"own-script-{RUN}", "description": "retrain with training_code/train.py"},
        "algorithm": {
            "code_dir": f"/{BUCKET}/own-script/code/",
            "boot_file": f"/{BUCKET}/own-script/code/train.py",
            "engine": {"engine_name": "PyTorch", "engine_version": "pytorch_2.1.0-cuda_12.1-py_3.10"},
            "parameters": HYPERPARAMETERS,
            "inputs": [{"name": "data_url", "remote": {"obs": {"obs_url": f"/{BUCKET}/own-script/data/"}}}],
            "outputs": [
                # named model_url: the provider reports a model/model_url output as the job's model
                {"name": "model_url", "remote": {"obs": {"obs_url": f"/{BUCKET}/own-script/models/{RUN}/"}}},
                {
                    "name": "checkpoints",
                    "remote": {"obs": {"obs_url": f"/{BUCKET}/own-script/checkpoints/{RUN}/"}},
                },
            ],
        },
        "spec": {"resource": {"flavor_id": "modelarts.vm.cpu.2u", "node_count": 1}},
    },
}
UPLOADS = {"sagemaker": upload_sagemaker, "pai": upload_pai, "modelarts": upload_modelarts}
CONNECTIONS = {
    "sagemaker": os.environ.get("SAGEMAKER_CONN_ID", "aws_local"),
    "pai": os.environ.get("PAI_CONN_ID", "pai_local"),
    "modelarts": os.environ.get("MODELARTS_CONN_ID", "modelarts_local"),
}


def script_metrics(job: dict) -> dict[str, float]:
    """The metrics train.py reported: the job's (SageMaker, PAI: parsed by ``MetricDefinitions``),
    else (ModelArts) its ``metrics.json`` in the ``model_url`` output (here: the local OBS)."""
    if job["platform"] != "modelarts":
        return job["metrics"]
    model_dir = LOCAL_DATA_DIR / "obs" / job["artifacts"]["model"].strip("/")
    return json.loads((model_dir / "metrics.json").read_text())


for platform, spec in SPECS.items():
    with DAG(
        dag_id=f"{platform}_retrain_own_script",
        schedule="@weekly",
        start_date=datetime(2026, 1, 1),
        catchup=False,
        params={"min_val_accuracy": 0.90, "epochs": 10, "learning_rate": 0.05},
        tags=["training", platform, "user-code", "example"],
    ):
        upload = task(UPLOADS[platform], task_id="upload_code_and_data")()
        train = SubmitTrainingJobOperator(
            task_id="train",
            conn_id=CONNECTIONS[platform],
            spec=spec,
            deferrable=True,
            poll_interval=2,
            stream_logs=True,  # train.py's own lines in this task's log, as it prints them
        )

        @task.short_circuit
        def evaluate(job: dict, params: dict | None = None) -> bool:
            accuracy = script_metrics(job).get("validation_accuracy", 0.0)
            threshold = float(params["min_val_accuracy"])
            print(f"job {job['id']}: validation accuracy {accuracy:.4f} (threshold {threshold:.2f})")
            return accuracy >= threshold

        @task
        def promote(job: dict) -> dict:
            record = {
                "job_id": job["id"],
                "platform": job["platform"],
                "model": job["artifacts"].get("model"),
                "metrics": script_metrics(job),
            }
            REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
            (REGISTRY_DIR / f"own-script-{job['platform']}.json").write_text(json.dumps(record, indent=2))
            print(f"promoted model {record['model']} with {record['metrics']}")
            return record

        upload >> train
        evaluate(train.output) >> promote(train.output)
