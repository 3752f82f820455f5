"""One portable spec, three platforms: the submit operator compiles it for the local SageMaker, PAI
and ModelArts by the connection alone, uploads the example's own script
(``example_dags/training_code``) to each connection's ``storage_root``, and each job reads the
same data and hyperparameters, reports the script's metrics, and leaves its model and checkpoints
where that platform keeps them. A cancel keeps the checkpoints the script wrote."""

from __future__ import annotations

import csv
import io
import json
import tarfile
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowTaskTimeout

from airflow_training_devel.local_fixtures import LOCAL_BUCKET, LOCAL_FIXTURES, server_options
from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.server import LocalPlatformServer
from airflow_training_provider.hooks.training import TrainingPlatformHook
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.storage import PlatformStorage, source_digest, source_files
from airflow_training_provider.testing.inprocess import run_task, task_context

ROOT = Path(__file__).resolve().parents[2]
CODE_DIR = ROOT / "example_dags" / "training_code"
CONNECTIONS = {"sagemaker": "aws_local", "pai": "pai_local", "modelarts": "modelarts_local"}
STORE = {"sagemaker": "s3", "pai": "oss", "modelarts": "obs"}
FIXTURE = {"sagemaker": "aws", "pai": "pai", "modelarts": "modelarts"}
METRICS = {
    "epoch": r"epoch=(\d+)",
    "loss": r"\bloss=([0-9.]+)",
    "validation_loss": r"validation_loss=([0-9.]+)",
    "validation_accuracy": r"validation_accuracy=([0-9.]+)",
}


def portable_spec(run: str, epochs: int, **extra) -> dict:
    """The one spec every platform gets (relative locations: each connection's storage_root)."""
    return {
        "name": "portable-digits",
        "image": {
            "sagemaker": "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3",
            "pai": "dsw-registry.cn-hangzhou.cr.aliyuncs.com/pai/pytorch-training:2.1-cpu-py310",
        },
        "source_dir": str(CODE_DIR),
        "entry_point": "train.py",
        "inputs": {"train": "portable/data/"},
        "output": f"portable/models/{run}/",
        "checkpoints": f"portable/checkpoints/{run}/",
        "hyperparameters": {"epochs": epochs, "learning_rate": 0.05, **extra},
        "resources": {
            "instance_type": {
                "sagemaker": "ml.m5.large",
                "pai": "ecs.c6.large",
                "modelarts": "modelarts.vm.cpu.2u",
            }
        },
        "max_runtime": 3600,
        "metric_definitions": METRICS,
        "tags": {"team": "ml"},
        "options": {
            "sagemaker": {"RoleArn": "arn:aws:iam::123456789012:role/Portable"},
            "modelarts": {
                "algorithm": {
                    "engine": {"engine_name": "PyTorch", "engine_version": "pytorch_2.1.0-cuda_12.1-py_3.10"}
                }
            },
        },
    }


def digits_csv() -> bytes:
    from sklearn.datasets import load_digits

    digits = load_digits()
    out = io.StringIO()
    csv.writer(out).writerows(
        [*row, label] for row, label in zip(digits.data.astype(int), digits.target, strict=True)
    )
    return out.getvalue().encode()


@pytest.fixture(scope="module")
def portable_platform(tmp_path_factory):
    """A local platform that runs user code, the three connections (with their storage_root)
    pointing at it, and the data set uploaded to each connection's storage."""
    with LocalPlatformServer(
        str(tmp_path_factory.mktemp("portable")),
        log_level="warning",
        allow_user_code=True,
        **server_options(
            sagemaker_stop_grace_seconds=5, pai_stop_grace_seconds=5, modelarts_stop_grace_seconds=5
        ),
    ) as server:
        mp = pytest.MonkeyPatch()
        data = digits_csv()
        for platform, conn_id in CONNECTIONS.items():
            fixture = LOCAL_FIXTURES[FIXTURE[platform]]
            mp.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", fixture.connection_json(server.url))
            storage = PlatformStorage(TrainingPlatformHook(conn_id).platform_connection)
            storage.ensure_bucket()
            storage.put("portable/data/digits.csv", data)
        try:
            yield server
        finally:
            mp.undo()


def stored(server: LocalPlatformServer, platform: str, key: str) -> Path:
    """The local file standing in for ``<storage_root>/<key>`` of ``platform``'s connection."""
    return Path(server.data_dir) / STORE[platform] / LOCAL_BUCKET / key


@pytest.mark.parametrize("platform", list(CONNECTIONS))
def test_one_portable_spec_runs_the_users_script_on_each_platform_by_the_connection_alone(
    portable_platform, platform
):
    run = uuid.uuid4().hex[:8]
    op = SubmitTrainingJobOperator(
        task_id="train",
        conn_id=CONNECTIONS[platform],
        portable_spec=portable_spec(run, epochs=3),
        deferrable=platform == "sagemaker",  # one deferred: the trigger's path is the same for all
        poll_interval=0.3,
    )
    ctx = task_context(op)
    result = run_task(op, ctx)
    job = LocalPlatformControl(portable_platform.url).job(ctx["ti"].xcoms["job_id"])
    assert result["state"] == "succeeded", result
    # the same hyperparameters, as the script parsed them from what the platform passed it
    assert "hyperparameters: epochs=3 learning_rate=0.05 (ignored: [])" in job["logs"], job["logs"][:5]
    assert f"platform: {platform};" in job["logs"][0] if job["logs"] else False
    # the same data: every row of the uploaded CSV
    assert any(line.startswith("data: 1797 rows from digits.csv") for line in job["logs"]), job["logs"][:5]
    # the script's metrics, as its last epoch printed them
    last = [line for line in job["logs"] if line.startswith("epoch=3 ")][-1]
    printed = dict(part.split("=") for part in last.split())
    assert {k: result["metrics"][k] for k in METRICS} == {k: float(v) for k, v in printed.items()}
    # the code came from the operator's upload, named by its digest
    digest = source_digest(source_files(CODE_DIR))
    code = "code/" + digest + ("/sourcedir.tar.gz" if platform == "sagemaker" else "/train.py")
    assert stored(portable_platform, platform, code).is_file()
    # the model and the checkpoints where the platform keeps them, under the storage root
    model = result["artifacts"]["model"]
    if platform == "sagemaker":
        assert model.endswith(f"/{job['job_id']}/output/model.tar.gz")
        archive = stored(portable_platform, platform, model.split(f"{LOCAL_BUCKET}/", 1)[1])
        with tarfile.open(archive) as tar:
            metrics = json.load(tar.extractfile("metrics.json"))
    else:
        assert model.rstrip("/").endswith(f"portable/models/{run}")
        metrics = json.loads(
            stored(portable_platform, platform, f"portable/models/{run}/metrics.json").read_text()
        )
    assert metrics["validation_accuracy"] == result["metrics"]["validation_accuracy"]
    assert stored(portable_platform, platform, f"portable/checkpoints/{run}/checkpoint.joblib").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("platform", list(CONNECTIONS))
def test_a_cancelled_portable_job_keeps_its_checkpoints_on_each_platform(portable_platform, platform):
    """``execution_timeout`` runs out mid-training: the job is cancelled; the script saves on
    SIGTERM and the checkpoint stays in the platform's storage."""
    run = uuid.uuid4().hex[:8]
    op = SubmitTrainingJobOperator(
        task_id="train",
        conn_id=CONNECTIONS[platform],
        portable_spec=portable_spec(run, epochs=500),
        deferrable=False,
        poll_interval=0.3,
        execution_timeout=timedelta(seconds=8),
    )
    ctx = task_context(op)
    with pytest.raises(AirflowTaskTimeout):
        run_task(op, ctx)
    # the stop may still be under way when the task ends (its confirm window ends with the timeout)
    job = LocalPlatformControl(portable_platform.url).wait_job(
        ctx["ti"].xcoms["job_id"], {"cancelled"}, timeout=60
    )
    result = ctx["ti"].xcoms["cancel_result"]
    assert result["already_terminal"] is False and result["state"] in ("stopping", "cancelled"), result
    # the script saved on SIGTERM (the cancel asked for a final checkpoint), into the kept location
    assert job["cancel"]["final_checkpoints"] == ["checkpoint.joblib"], job["cancel"]
    assert stored(portable_platform, platform, f"portable/checkpoints/{run}/checkpoint.joblib").is_file()


FINE_TUNE = {
    "base_model": "local/digits-mlp-4b",
    "training_file": "digits",  # a Together file id and a TensorOne dataset id on the local platform
    "epochs": 2,
    "learning_rate": 0.01,
    "batch_size": 32,
    "suffix": "portable-digits",
    # the local platform's pacing, each in its platform's own field
    "options": {
        "together": {"x_local": {"seconds_per_epoch": 0.3}},
        "tensorone": {"config": {"training": {"seconds_per_epoch": 0.3}}},
    },
}


@pytest.mark.parametrize("conn_id", ["together_local", "tensorone_local"])
def test_one_portable_fine_tune_runs_on_together_and_tensorone_by_the_connection_alone(control, conn_id):
    op = SubmitTrainingJobOperator(
        task_id="finetune", conn_id=conn_id, portable_spec=FINE_TUNE, deferrable=True, poll_interval=0.3
    )
    ctx = task_context(op)
    result = run_task(op, ctx)
    job = control.job(ctx["ti"].xcoms["job_id"])
    assert result["state"] == "succeeded" and job["state"] == "succeeded"
    assert job["dataset"] == "digits"
    assert {k: job["hyperparameters"][k] for k in ("epochs", "learning_rate", "batch_size")} == {
        "epochs": 2,
        "learning_rate": 0.01,
        "batch_size": 32,
    }
    assert result["progress"]["epoch"] == 2 and result["metrics"]["validation_accuracy"] > 0.5
