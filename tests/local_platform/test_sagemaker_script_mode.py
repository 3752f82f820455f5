"""SageMaker script mode on the local platform: the user's own script (``tests/data/user_code/
train.py``, plain numpy) submitted with boto3's own ``create_training_job``, run as a real process
under the training-container contract, stopped with the real stop contract. No mocks.

The code and the data are written straight under the server's S3 root (``<data_dir>/s3/...``).
"""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
import time
import uuid
from pathlib import Path

import boto3
import botocore.exceptions
import pytest

from airflow_training_devel.user_code import (
    DATA_URI,
    METRIC_DEFINITIONS,
    SCRIPT,
    put_code_and_data,
    script_hyperparameters,
)
from airflow_training_platform.cli import build_parser
from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.engine.programs import read_log
from airflow_training_platform.platforms.common import FINAL_CHECKPOINT_FIELD
from airflow_training_platform.platforms.sagemaker.wire import job_to_wire
from airflow_training_platform.server import LocalPlatformServer
from tests.conftest import API_KEY, AWS_ACCESS_KEY_ID, server_options

GRACE = 1.5  # the server's SageMaker stop grace (s): short, so the SIGKILL test is quick
SERVER_ENV_MARKER = f"server-only-{uuid.uuid4().hex}"
IMAGE = "local/byoc-train:1"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A platform that runs user code, started with its secrets set (options and environment)."""
    saved = {k: os.environ.get(k) for k in ("ATP_TEST_SERVER_MARKER", "AWS_SECRET_ACCESS_KEY")}
    os.environ["ATP_TEST_SERVER_MARKER"] = SERVER_ENV_MARKER
    os.environ["AWS_SECRET_ACCESS_KEY"] = SERVER_ENV_MARKER + "-aws"
    try:
        srv = LocalPlatformServer(
            str(tmp_path_factory.mktemp("usercode")),
            gpus=4,
            log_level="warning",
            allow_user_code=True,
            sagemaker_image_command=[f"{IMAGE}={sys.executable} {SCRIPT}"],
            **server_options(sagemaker_stop_grace_seconds=GRACE),
        ).start()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    put_code_and_data(srv.data_dir)
    try:
        yield srv
    finally:
        srv.stop()


def client(url: str):
    return boto3.client(
        "sagemaker",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=AWS_ACCESS_KEY_ID,
        aws_secret_access_key=API_KEY,
    )


@pytest.fixture(scope="module")
def sm(server):
    return client(server.url)


@pytest.fixture(scope="module")
def control(server):
    return LocalPlatformControl(server.url)


def script_job(name: str, checkpoints: str | None = None, **hyper) -> dict:
    """A create body as the SageMaker Python SDK sends script mode."""
    return {
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::123456789012:role/ScriptMode",
        "AlgorithmSpecification": {
            "TrainingImage": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3-cpu-py311",
            "TrainingInputMode": "File",
            "MetricDefinitions": METRIC_DEFINITIONS,
        },
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": DATA_URI}},
            }
        ],
        "OutputDataConfig": {"S3OutputPath": "s3://out/models"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "CheckpointConfig": {"S3Uri": checkpoints or f"s3://out/checkpoints/{name}"},
        "HyperParameters": script_hyperparameters(**{"epochs": 3, "lr": 0.5, **hyper}),
    }


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait(sm, name: str, until, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = sm.describe_training_job(TrainingJobName=name)
        if until(job):
            return job
        assert time.monotonic() < deadline, job["TrainingJobStatus"]
        time.sleep(0.2)


def ended(job: dict) -> bool:
    return job["TrainingJobStatus"] in ("Completed", "Failed", "Stopped")


def wait_for_line(control, name: str, text: str, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        record = control.job(name)
        if any(text in line for line in record["logs"]):
            return record
        assert time.monotonic() < deadline, record["logs"]
        time.sleep(0.1)


def members(tar_path: Path) -> dict[str, bytes]:
    with tarfile.open(tar_path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_a_script_mode_job_runs_the_users_script_by_the_container_contract(sm, control, server):
    name = unique("script")
    sm.create_training_job(**script_job(name))
    job = wait(sm, name, ended)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    s3 = Path(server.data_dir) / "s3"
    # the model: <S3OutputPath>/<job>/output/model.tar.gz, as ModelArtifacts says
    assert job["ModelArtifacts"]["S3ModelArtifacts"] == f"s3://out/models/{name}/output/model.tar.gz"
    model = members(s3 / "out" / "models" / name / "output" / "model.tar.gz")
    assert set(model) == {"model.json", "seen.json"}
    assert set(members(s3 / "out" / "models" / name / "output" / "output.tar.gz")) == {"predictions.csv"}
    seen = json.loads(model["seen.json"])
    # arguments: sorted, sagemaker_* removed, JSON-decoded values
    assert seen["argv"] == ["--epochs", "3", "--lr", "0.5"]
    assert seen["channel_files"] == ["part-0.csv"]
    assert seen["hyperparameters"] == script_job(name)["HyperParameters"]  # the request's strings
    env = seen["env"]
    job_dir = Path(server.data_dir) / "jobs" / name / "opt" / "ml"
    assert seen["cwd"] == str(job_dir / "code")
    assert env["SM_CHANNEL_TRAIN"] == str(job_dir / "input" / "data" / "train")
    assert env["SM_MODEL_DIR"] == str(job_dir / "model") and env["SAGEMAKER_BASE_DIR"] == str(job_dir)
    assert json.loads(env["SM_CHANNELS"]) == ["train"] and json.loads(env["SM_HPS"]) == {
        "epochs": 3,
        "lr": 0.5,
    }
    assert env["SM_HP_EPOCHS"] == "3" and json.loads(env["SM_USER_ARGS"]) == seen["argv"]
    assert env["SM_USER_ENTRY_POINT"] == "train.py" and env["SM_MODULE_NAME"] == "train"
    assert (
        env["TRAINING_JOB_NAME"] == env["SAGEMAKER_JOB_NAME"] == name and env["SM_CURRENT_HOST"] == "algo-1"
    )
    assert env["TRAINING_JOB_ARN"] == job["TrainingJobArn"] and env["SM_NUM_GPUS"].isdigit()
    assert json.loads(env["SM_TRAINING_ENV"])["channel_input_dirs"] == {"train": env["SM_CHANNEL_TRAIN"]}
    # the metrics: MetricDefinitions over the output, the last value of each
    record = control.job(name)
    last = [line for line in record["logs"] if line.startswith("epoch=3 ")][0]
    final = {m["MetricName"]: m["Value"] for m in job["FinalMetricDataList"]}
    assert final == {
        "train:loss": float(last.split("loss=")[1].split()[0]),
        "train:accuracy": float(last.split("accuracy=")[1]),
    }
    assert [row["step"] for row in record["metric_history"]] == [1, 2, 3]
    # the log file: stdout and stderr, one timestamped line per record, in order
    log = read_log(record["program"]["log_file"])
    lines = [entry["line"] for entry in log["lines"]]
    expected = [x for e in (1, 2, 3) for x in (f"epoch={e} ", f"progress {e}/3")] + ["training complete"]
    assert len(lines) == len(expected) and all(map(str.startswith, lines, expected)), lines
    times = [entry["t"] for entry in log["lines"]]
    assert times == sorted(times) and log["next"] == len(lines) == 7
    assert read_log(record["program"]["log_file"], start=5, limit=1)["lines"] == log["lines"][5:6]


def test_a_stop_sigterms_the_process_group_and_the_final_checkpoint_resumes_the_next_job(sm, control, server):
    shared = f"s3://out/checkpoints/{unique('shared')}"
    name = unique("stop")
    sm.create_training_job(**script_job(name, shared, epochs=100, seconds_per_epoch=0.3, spawn_child=1))
    record = wait_for_line(control, name, "epoch=2 ")
    child = int((Path(record["program"]["model_dir"]) / "child.pid").read_text())
    assert alive(child)
    sm.stop_training_job(TrainingJobName=name)
    job = wait(sm, name, ended)
    assert job["TrainingJobStatus"] == "Stopped"
    record = control.job(name)
    assert record["cancel"]["final_checkpoint_written"] is True
    assert (
        record["cancel"]["final_checkpoints"] == record["program"]["final_checkpoints"] == ["checkpoint.json"]
    )
    assert record["program"]["killed_after_grace"] is False
    assert any(e["type"] == "signal_sent" and e["signal"] == "SIGTERM" for e in record["events"])
    assert not alive(child), "the script's child got the SIGTERM too"
    saved = (
        Path(server.data_dir) / "s3" / "out" / "checkpoints" / shared.rsplit("/", 1)[1] / "checkpoint.json"
    )
    stopped_at = json.loads(saved.read_text())["epoch"]
    assert stopped_at >= 2
    # DescribeTrainingJob says so too (the local platform's extension, which boto3 parsed and dropped)
    after_stop = job_to_wire(record, "us-east-1")[FINAL_CHECKPOINT_FIELD]
    assert after_stop == {
        "written": True,
        "files": ["checkpoint.json"],
        "location": shared,
        "at": after_stop["at"],
    }
    assert after_stop["at"] >= record["program"]["stop_signal_at"]

    second = unique("resume")
    sm.create_training_job(**script_job(second, shared, epochs=stopped_at + 1))
    assert wait(sm, second, ended)["TrainingJobStatus"] == "Completed"
    assert FINAL_CHECKPOINT_FIELD not in job_to_wire(control.job(second), "us-east-1"), "not a stopped job"
    assert f"resumed from epoch {stopped_at}" in control.job(second)["logs"]
    seen = members(Path(server.data_dir) / "s3" / "out" / "models" / second / "output" / "model.tar.gz")
    assert json.loads(seen["seen.json"])["start_epoch"] == stopped_at + 1


def test_a_shell_entry_point_survives_the_stop_until_its_program_saved(sm, control, server):
    """``sagemaker_program: train.sh`` runs as ``/bin/sh -c ./train.sh …``: both shells die of the
    stop's SIGTERM at once; the container init keeps the job alive until ``train.py`` (their child)
    has written its checkpoint and exited, instead of SIGKILLing it as the main process ends."""
    code = Path(server.data_dir) / "s3" / "code" / "sh"
    code.mkdir(parents=True, exist_ok=True)
    entry = b'#!/bin/sh\necho "shell entry point: $*"\npython train.py "$@"\necho "train.py exited"\n'
    with tarfile.open(code / "sourcedir.tar.gz", "w:gz") as tar:
        tar.add(SCRIPT, arcname="train.py")
        info = tarfile.TarInfo("train.sh")
        info.size, info.mode = len(entry), 0o755
        tar.addfile(info, io.BytesIO(entry))
    name = unique("sh-stop")
    body = script_job(name, epochs=100, seconds_per_epoch=0.3)
    body["HyperParameters"].update(
        sagemaker_program=json.dumps("train.sh"),
        sagemaker_submit_directory=json.dumps("s3://code/sh/sourcedir.tar.gz"),
    )
    sm.create_training_job(**body)
    wait_for_line(control, name, "epoch=1 ")
    sm.stop_training_job(TrainingJobName=name)
    assert wait(sm, name, ended)["TrainingJobStatus"] == "Stopped"
    record = control.job(name)
    assert record["cancel"]["final_checkpoint_written"] is True, record["logs"]
    assert record["program"]["final_checkpoints"] == ["checkpoint.json"]
    assert record["program"]["killed_after_grace"] is False
    assert any(line.startswith("SIGTERM: checkpoint of epoch ") for line in record["logs"])
    assert record["logs"][0] == "shell entry point: --epochs 100 --lr 0.5 --seconds_per_epoch 0.3"


def test_a_script_that_ignores_sigterm_is_killed_after_the_grace_without_a_final_checkpoint(sm, control):
    name = unique("stubborn")
    sm.create_training_job(**script_job(name, epochs=100, seconds_per_epoch=0.3, ignore_sigterm=1))
    wait_for_line(control, name, "epoch=1 ")
    sm.stop_training_job(TrainingJobName=name)
    job = wait(sm, name, ended)
    assert job["TrainingJobStatus"] == "Stopped"
    record = control.job(name)
    program = record["program"]
    assert program["killed_after_grace"] is True and program["final_checkpoints"] == []
    assert record["cancel"]["final_checkpoint_written"] is False and record["returncode"] == -9
    after_stop = job_to_wire(record, "us-east-1")[FINAL_CHECKPOINT_FIELD]
    assert (after_stop["written"], after_stop["files"], after_stop["at"]) == (False, [], None)
    assert record["exited_at"] - program["stop_signal_at"] >= GRACE
    assert [e["signal"] for e in record["events"] if e["type"] == "signal_sent"] == ["SIGTERM", "SIGKILL"]


def test_a_script_that_writes_its_failure_file_and_exits_1_fails_with_that_reason(sm):
    name = unique("fails")
    sm.create_training_job(**script_job(name, fail_with="out of cheese: the data has no label column"))
    job = wait(sm, name, ended)
    assert job["TrainingJobStatus"] == "Failed"
    assert job["FailureReason"] == "AlgorithmError: out of cheese: the data has no label column"


def test_the_program_sees_no_server_setting_secret_or_environment(sm, server):
    name = unique("env")
    sm.create_training_job(**script_job(name, dump_env=1), Environment={"MY_SETTING": "mine"})
    assert wait(sm, name, ended)["TrainingJobStatus"] == "Completed"
    env = json.loads(
        (Path(server.data_dir) / "jobs" / name / "opt" / "ml" / "model" / "env.json").read_text()
    )
    text = json.dumps(env)
    for secret in (API_KEY, AWS_ACCESS_KEY_ID, SERVER_ENV_MARKER):
        assert secret not in text
    assert env["MY_SETTING"] == "mine"
    base = {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"}
    contract = {"CURRENT_HOST", "SAGEMAKER_JOB_NAME", "SAGEMAKER_REGION", "TRAINING_JOB_NAME",
                "TRAINING_JOB_ARN", "SAGEMAKER_BASE_DIR", "MY_SETTING"}  # fmt: skip
    # what Python itself adds to its own environment on start-up (not from the server)
    assert {k for k in env if not k.startswith("SM_")} - base - contract <= {"LC_CTYPE"}
    assert env["HOME"].startswith(str(Path(server.data_dir) / "jobs" / name))


def test_a_mapped_image_runs_its_local_command_with_the_container_arguments(sm, control, server):
    name = unique("byoc")
    body = script_job(name)
    body["HyperParameters"] = {}
    body["AlgorithmSpecification"] = {
        **body["AlgorithmSpecification"],
        "TrainingImage": IMAGE,
        "ContainerArguments": ["--epochs", "2", "--lr", "0.1"],
    }
    sm.create_training_job(**body)
    job = wait(sm, name, ended)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert control.job(name)["program"]["argv"] == [
        sys.executable,
        str(SCRIPT),
        "--epochs",
        "2",
        "--lr",
        "0.1",
    ]
    assert {m["MetricName"] for m in job["FinalMetricDataList"]} == {"train:loss", "train:accuracy"}


def test_without_the_opt_in_flag_user_code_is_refused_and_nothing_runs(platform):
    sm = client(platform.url)
    name = unique("refused")
    with pytest.raises(botocore.exceptions.ClientError) as err:
        sm.create_training_job(**script_job(name))
    error = err.value.response["Error"]
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error["Code"] == "ValidationException" and "--allow-user-code" in error["Message"]
    assert name not in [j["job_id"] for j in LocalPlatformControl(platform.url).jobs(platform="sagemaker")]
    assert not (Path(platform.data_dir) / "jobs" / name).exists()


def test_the_server_binds_loopback_and_runs_no_user_code_unless_told():
    args = build_parser().parse_args(["serve", "--data-dir", "d"])
    assert args.host == "127.0.0.1" and args.allow_user_code is False
    args = build_parser().parse_args(
        ["serve", "--data-dir", "d", "--allow-user-code", "--sagemaker-image-command", "a=x",
         "--sagemaker-image-command", "b=y z"]
    )  # fmt: skip
    assert args.allow_user_code is True and args.sagemaker_image_command == ["a=x", "b=y z"]
    assert "--allow-user-code" in LocalPlatformServer("d", allow_user_code=True).command()
    assert "--allow-user-code" not in LocalPlatformServer("d", allow_user_code=False).command()
    assert LocalPlatformServer("d").command()[4:6] == ["--host", "127.0.0.1"]
