"""The SageMaker operator submitting a script-mode job, and the PAI operator a ``Command`` +
``CodeDir`` job (the user's own script), to a local platform that runs user code: the task's
return value carries the metrics the script printed."""

from __future__ import annotations

import uuid

import pytest

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
