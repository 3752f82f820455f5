"""The SageMaker Python SDK v2's ``Estimator.fit()`` with its defaults (``logs="All"``, ``wait=True``)
on the user's script in script mode (``sagemaker.sklearn.SKLearn``, ``source_dir`` + ``entry_point``)
against a local platform that runs user code: the SDK packs and uploads ``sourcedir.tar.gz``, creates
the job, and prints its CloudWatch log until it ends.

The SDK conflicts with Airflow's pins, so it has a venv of its own (``make sagemaker-sdk``); it is run
as a subprocess with only the environment below. Without that venv the test is skipped, except under
``CI=true`` where that is a failure.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from airflow_training_devel.user_code import DATA_URI, SCRIPT, put_code_and_data
from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.server import LocalPlatformServer
from tests.conftest import API_KEY, AWS_ACCESS_KEY_ID, server_options
from tests.e2e.conftest import ROOT

SDK_PYTHON = ROOT / "build" / "sagemaker-sdk-venv" / "bin" / "python"
BUCKET = "sagemaker-local"
# The SDK's own config file (sagemaker.config): a default bucket, so the SDK never asks STS
# (a fixed https://sts.<region>.amazonaws.com endpoint) for the account in `sagemaker-<region>-<account>`,
# and no telemetry (a GET to an AWS-hosted bucket).
SDK_CONFIG = f"""SchemaVersion: '1.0'
SageMaker:
  PythonSDK:
    Modules:
      TelemetryOptOut: true
      Session:
        DefaultS3Bucket: {BUCKET}
"""
EPOCH_LINE = re.compile(r"epoch=(\d) loss=[0-9.]+ accuracy=[0-9.]+")


@pytest.fixture(scope="module")
def sdk_python() -> Path:
    if not SDK_PYTHON.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{SDK_PYTHON} is missing: `make test` builds it (`make sagemaker-sdk`)")
        pytest.skip(f"no SageMaker SDK venv at {SDK_PYTHON}: run `make sagemaker-sdk`")
    return SDK_PYTHON


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalPlatformServer(
        str(tmp_path_factory.mktemp("sdk")),
        gpus=2,
        log_level="warning",
        allow_user_code=True,
        **server_options(),
    ) as srv:
        put_code_and_data(srv.data_dir)
        yield srv


def sdk_env(url: str, home: Path) -> dict[str, str]:
    """All the SDK run sees: boto3 pointed at the local platform (every service, S3 and CloudWatch
    Logs too), the local key pair, an empty ``HOME`` (no AWS profile) and the SDK's config file."""
    config = home / "sagemaker-config.yaml"
    config.write_text(SDK_CONFIG)
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "AWS_ENDPOINT_URL": url,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": AWS_ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": API_KEY,
        "SAGEMAKER_USER_CONFIG_OVERRIDE": str(config),
        "SAGEMAKER_SUPPRESS_V2_WARNING": "1",
        "PYTHONUNBUFFERED": "1",
    }


def test_estimator_fit_with_its_defaults_runs_the_users_script_and_prints_its_lines(
    sdk_python, server, tmp_path
):
    run = subprocess.run(
        [
            str(sdk_python),
            str(Path(__file__).with_name("sagemaker_sdk_fit.py")),
            str(SCRIPT.parent),
            DATA_URI,
        ],
        env=sdk_env(server.url, tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    assert API_KEY not in out
    out, attach_part = out.split("=== ATTACH", 1)
    attach_part, stop_part = attach_part.split("=== STOP", 1)
    # fit() printed the program's own lines (its CloudWatch stream), then the SDK's totals
    assert [int(m[1]) for m in EPOCH_LINE.finditer(out)] == [1, 2, 3], out
    assert "progress 3/3" in out and "training complete" in out
    assert re.search(r"Billable seconds: \d+", out)
    assert API_KEY not in out

    described = json.loads(out.rsplit("DESCRIBED ", 1)[1].splitlines()[0])
    name = described["TrainingJobName"]
    assert described["TrainingJobStatus"] == "Completed" and name.startswith("sagemaker-scikit-learn-")
    hyper = described["HyperParameters"]
    assert json.loads(hyper["sagemaker_program"]) == "train.py"
    submit = json.loads(hyper["sagemaker_submit_directory"])
    assert submit == f"s3://{BUCKET}/{name}/source/sourcedir.tar.gz"
    assert json.loads(hyper["epochs"]) == 3
    (record,) = LocalPlatformControl(server.url).jobs(name=name)
    assert record["state"] == "succeeded"

    s3 = Path(server.data_dir) / "s3" / BUCKET / name
    with tarfile.open(s3 / "source" / "sourcedir.tar.gz") as tar:  # the SDK's upload, source_dir's files
        assert "train.py" in tar.getnames()
    assert described["ModelArtifacts"]["S3ModelArtifacts"] == f"s3://{BUCKET}/{name}/output/model.tar.gz"
    with tarfile.open(s3 / "output" / "model.tar.gz") as tar:
        assert json.loads(tar.extractfile("seen.json").read())["argv"][:2] == ["--epochs", "3"]

    # attach() with its defaults read the job back (it needs OutputDataConfig.KmsKeyId, "" as AWS
    # answers) and logs() printed the whole stream again, then the totals
    attached = json.loads(attach_part.split("ATTACHED ", 1)[1].splitlines()[0])
    assert attached["job"] == name and attached["output_path"] == f"s3://{BUCKET}/"
    assert attached["output_kms_key"] == "" and attached["entry_point"] == "train.py"
    assert json.loads(attached["hyperparameters"]["epochs"]) == 3
    assert attached["model_data"] == described["ModelArtifacts"]["S3ModelArtifacts"]
    assert [int(m[1]) for m in EPOCH_LINE.finditer(attach_part)] == [1, 2, 3], attach_part
    assert "training complete" in attach_part and re.search(r"Billable seconds: \d+", attach_part)

    # stop(): StopTrainingJob while it trains; the script saves its checkpoint on SIGTERM; wait() returns
    stopped = json.loads(stop_part.split("STOPPED ", 1)[1].splitlines()[0])
    assert (stopped["TrainingJobStatus"], stopped["SecondaryStatus"]) == ("Stopped", "Stopped")
    steps = [t["Status"] for t in stopped["SecondaryStatusTransitions"]]
    assert steps[-2:] == ["Stopping", "Stopped"] and "Training" in steps
    assert "Job ended with status 'Stopped'" in stop_part
    (stop_record,) = LocalPlatformControl(server.url).jobs(name=stopped["TrainingJobName"])
    assert stop_record["state"] == "cancelled" and stop_record["cancel"]["reason"] == "StopTrainingJob"
