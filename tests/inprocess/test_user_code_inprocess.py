"""The SageMaker operator submitting a script-mode job, and the PAI operator a ``Command`` +
``CodeDir`` job (the user's own script), to a local platform that runs user code: the task's
return value carries the metrics the script printed."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from airflow.sdk.exceptions import AirflowTaskTimeout

from airflow_training_devel.local_fixtures import LOCAL_FIXTURES, server_options
from airflow_training_devel.user_code import (
    DATA_URI,
    METRIC_DEFINITIONS,
    PAI_CODE,
    PAI_COMMAND,
    PAI_DATA_URI,
    put_code_and_data,
    put_pai_code_and_data,
    script_hyperparameters,
)
from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.server import LocalPlatformServer
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.testing.inprocess import run_task, task_context

CONN_ID = "aws_user_code"
PAI_CONN_ID = "pai_user_code"


@pytest.fixture(scope="module")
def user_code_platform(tmp_path_factory):
    with LocalPlatformServer(
        str(tmp_path_factory.mktemp("usercode-inprocess")),
        log_level="warning",
        allow_user_code=True,
        **server_options(sagemaker_stop_grace_seconds=2, pai_stop_grace_seconds=2),
    ) as server:
        put_code_and_data(server.data_dir)
        put_pai_code_and_data(server.data_dir)
        yield server


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferred", "worker"])
def test_the_sagemaker_operator_runs_a_script_mode_job_and_returns_its_metrics(
    user_code_platform, monkeypatch, deferrable
):
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN_ID.upper()}", LOCAL_FIXTURES["aws"].connection_json(user_code_platform.url)
    )
    spec = {
        "RoleArn": "arn:aws:iam::123456789012:role/InProcess",
        "AlgorithmSpecification": {
            "TrainingImage": "local/sklearn-script-mode:1",
            "TrainingInputMode": "File",
            "MetricDefinitions": METRIC_DEFINITIONS,
        },
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": DATA_URI}},
            }
        ],
        "OutputDataConfig": {"S3OutputPath": "s3://ip/output"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "CheckpointConfig": {"S3Uri": f"s3://ip/checkpoints/{uuid.uuid4().hex[:8]}"},
        "HyperParameters": script_hyperparameters(epochs=2, lr=0.5),
    }
    op = SubmitTrainingJobOperator(
        task_id="train", conn_id=CONN_ID, spec=spec, deferrable=deferrable, poll_interval=0.3
    )
    ctx = task_context(op)
    result = run_task(op, ctx)
    job = LocalPlatformControl(user_code_platform.url).job(ctx["ti"].xcoms["job_id"])
    assert result["state"] == "succeeded" and job["program"]["argv"][1:] == [
        "train.py",
        "--epochs",
        "2",
        "--lr",
        "0.5",
    ]
    last = [line for line in job["logs"] if line.startswith("epoch=2 ")][0]
    assert result["metrics"] == {
        "train:loss": float(last.split("loss=")[1].split()[0]),
        "train:accuracy": float(last.split("accuracy=")[1]),
    }
    assert result["artifacts"]["model"].endswith(f"/{job['job_id']}/output/model.tar.gz")


def test_the_pai_operator_runs_a_code_dir_job_and_returns_its_metrics(user_code_platform, monkeypatch):
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{PAI_CONN_ID.upper()}", LOCAL_FIXTURES["pai"].connection_json(user_code_platform.url)
    )
    run = uuid.uuid4().hex[:8]
    spec = {
        "AlgorithmSpec": {
            "Image": "dsw-registry.cn-hangzhou.cr.aliyuncs.com/pai/pytorch-training:2.1-cpu-py310",
            "Command": PAI_COMMAND,
            "JobType": "PyTorchJob",
            "MetricDefinitions": METRIC_DEFINITIONS,
        },
        "CodeDir": {"LocationType": "oss", "LocationValue": PAI_CODE},
        "ComputeResource": {"EcsSpec": "ecs.c6.large", "EcsCount": 1},
        "HyperParameters": {"epochs": "2", "lr": "0.5"},
        "InputChannels": [{"Name": "train", "InputUri": PAI_DATA_URI}],
        "OutputChannels": [
            {"Name": "model", "OutputUri": f"oss://ip/{run}/model/"},
            {"Name": "checkpoints", "OutputUri": f"oss://ip/{run}/checkpoints/"},
        ],
    }
    op = SubmitTrainingJobOperator(task_id="train_pai", conn_id=PAI_CONN_ID, spec=spec, poll_interval=0.3)
    ctx = task_context(op)
    result = run_task(op, ctx)
    job = LocalPlatformControl(user_code_platform.url).job(ctx["ti"].xcoms["job_id"])
    assert result["state"] == "succeeded" and job["program"]["argv"][4:] == PAI_COMMAND
    last = [line for line in job["logs"] if line.startswith("epoch=2 ")][0]
    assert result["metrics"] == {
        "train:loss": float(last.split("loss=")[1].split()[0]),
        "train:accuracy": float(last.split("accuracy=")[1]),
    }
    assert result["artifacts"]["model"] == f"oss://ip/{run}/model/"


def script_mode_spec(checkpoints: str, **hyperparameters) -> dict:
    """A SageMaker script-mode create body running ``tests/data/user_code/train.py`` with
    ``hyperparameters``, its checkpoints kept at ``checkpoints``."""
    return {
        "RoleArn": "arn:aws:iam::123456789012:role/InProcess",
        "AlgorithmSpecification": {
            "TrainingImage": "local/sklearn-script-mode:1",
            "TrainingInputMode": "File",
            "MetricDefinitions": METRIC_DEFINITIONS,
        },
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": DATA_URI}},
            }
        ],
        "OutputDataConfig": {"S3OutputPath": "s3://ip/output"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "CheckpointConfig": {"S3Uri": checkpoints},
        "HyperParameters": script_hyperparameters(**hyperparameters),
    }


@pytest.mark.slow
@pytest.mark.parametrize("ignore_sigterm", [0, 1], ids=["saves-on-sigterm", "ignores-sigterm"])
def test_a_script_stopped_at_the_deferred_timeout_says_whether_it_wrote_a_checkpoint_after_the_stop(
    user_code_platform, monkeypatch, capfd, ignore_sigterm
):
    """``execution_timeout`` runs out while the task is deferred: the trigger stops the job, the
    script gets SIGTERM and (unless it ignores it, then SIGKILL after the server's 2 s grace) writes
    ``checkpoint.json``; the cancel result and the task log's cancel line say which, read from what
    the local platform adds to ``DescribeTrainingJob`` (real SageMaker cannot tell)."""
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN_ID.upper()}", LOCAL_FIXTURES["aws"].connection_json(user_code_platform.url)
    )
    location = f"s3://ip/checkpoints/{uuid.uuid4().hex[:8]}"
    spec = script_mode_spec(location, epochs=100, seconds_per_epoch=0.3, ignore_sigterm=ignore_sigterm)
    op = SubmitTrainingJobOperator(
        task_id="train",
        conn_id=CONN_ID,
        spec=spec,
        deferrable=True,
        poll_interval=0.3,
        execution_timeout=timedelta(seconds=4),
    )
    ctx = task_context(op)
    with pytest.raises(AirflowTaskTimeout):
        run_task(op, ctx)
    job_id = ctx["ti"].xcoms["job_id"]
    job = LocalPlatformControl(user_code_platform.url).job(job_id)
    assert job["state"] == "cancelled" and job["program"]["killed_after_grace"] is bool(ignore_sigterm)
    result = ctx["ti"].xcoms["cancel_result"]
    log = "".join(capfd.readouterr())
    if ignore_sigterm:
        assert job["cancel"]["final_checkpoints"] == []
        assert (result["final_checkpoint_written"], result["final_checkpoint_id"]) == (False, None)
        assert result["final_checkpoint_path"] == location
        assert f"no final checkpoint written after the stop; checkpoints at {location}" in log
        return
    assert job["cancel"]["final_checkpoints"] == ["checkpoint.json"]
    (saved,) = [c for c in job["checkpoints"] if c["kind"] == "final"]
    assert saved["created_at"] >= job["program"]["stop_signal_at"]
    assert any(line.startswith("SIGTERM: checkpoint of epoch ") for line in job["logs"])
    assert result["final_checkpoint_written"] is True and result["final_checkpoint_id"] == "checkpoint.json"
    assert result["final_checkpoint_path"] == f"{location}/checkpoint.json"
    assert f"final checkpoint written after the stop: {location}/checkpoint.json" in log
