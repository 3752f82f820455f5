"""The local platform's SageMaker, driven by AWS's own client (boto3): if boto3's service model
accepts our answers and our signature check accepts boto3's requests, the wire format is right."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import boto3
import botocore.exceptions
import pytest

from airflow_training_platform.control import LocalPlatformControl
from tests.conftest import API_KEY, AWS_ACCESS_KEY_ID


@pytest.fixture(scope="module")
def sm(platform):
    return boto3.client(
        "sagemaker",
        endpoint_url=platform.url,
        region_name="us-east-1",
        aws_access_key_id=AWS_ACCESS_KEY_ID,
        aws_secret_access_key=API_KEY,
    )


@pytest.fixture(scope="module")
def control(platform):
    return LocalPlatformControl(platform.url)


def body(name: str, epochs: int = 3, checkpoints: str | None = None, **extra) -> dict:
    return {
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::123456789012:role/Boto3",
        "AlgorithmSpecification": {"TrainingImage": "local/digits-mlp:1", "TrainingInputMode": "File"},
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://b/iris/"}},
            }
        ],
        "OutputDataConfig": {"S3OutputPath": "s3://b/output"},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "CheckpointConfig": {"S3Uri": checkpoints or f"s3://b/checkpoints/{name}"},
        "HyperParameters": {"epochs": str(epochs), "seconds_per_epoch": "0.2"},
        **extra,
    }


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait(sm, name: str, until, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = sm.describe_training_job(TrainingJobName=name)
        if until(job):
            return job
        assert time.monotonic() < deadline, job["TrainingJobStatus"]
        time.sleep(0.3)


def error_of(call) -> dict:
    with pytest.raises(botocore.exceptions.ClientError) as err:
        call()
    return {**err.value.response["Error"], "status": err.value.response["ResponseMetadata"]["HTTPStatusCode"]}


def test_create_describe_list_search_and_tags(sm, control):
    name = unique("boto3-run")
    arn = sm.create_training_job(**body(name), Tags=[{"Key": "team", "Value": "ml"}])["TrainingJobArn"]
    assert arn == f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{name}"
    job = wait(sm, name, lambda j: j["TrainingJobStatus"] == "Completed")
    assert [t["Status"] for t in job["SecondaryStatusTransitions"]] == [
        "Starting",
        "Downloading",
        "Training",
        "Uploading",
        "Completed",
    ]
    assert job["SecondaryStatus"] == "Completed" and job["BillableTimeInSeconds"] >= 1
    assert job["TrainingEndTime"] >= job["TrainingStartTime"] >= job["CreationTime"]
    metrics = {m["MetricName"]: m["Value"] for m in job["FinalMetricDataList"]}
    assert set(metrics) == {"train:loss", "train:accuracy", "validation:loss", "validation:accuracy"}
    assert 0.0 < metrics["validation:accuracy"] <= 1.0 and metrics["train:loss"] > 0
    assert job["ModelArtifacts"]["S3ModelArtifacts"] == f"s3://b/output/{name}/output/model.tar.gz"
    # AWS always answers KmsKeyId ("" when unset): the SageMaker SDK's Estimator.attach() reads it
    assert job["OutputDataConfig"] == {"S3OutputPath": "s3://b/output", "KmsKeyId": ""}
    record = control.job(name)
    assert record["dataset"] == "iris" and record["state"] == "succeeded"

    listed = sm.list_training_jobs(NameContains=name, StatusEquals="Completed")["TrainingJobSummaries"]
    assert [s["TrainingJobName"] for s in listed] == [name]
    assert sm.list_tags(ResourceArn=arn)["Tags"] == [{"Key": "team", "Value": "ml"}]
    sm.add_tags(ResourceArn=arn, Tags=[{"Key": "airflow-dag", "Value": "boto3"}])
    found = sm.search(
        Resource="TrainingJob",
        SearchExpression={"Filters": [{"Name": "Tags.airflow-dag", "Operator": "Equals", "Value": "boto3"}]},
    )["Results"]
    assert [r["TrainingJob"]["TrainingJobName"] for r in found] == [name]
    assert {"Key": "team", "Value": "ml"} in found[0]["TrainingJob"]["Tags"]


def test_errors_as_aws_sends_them(sm):
    name = unique("boto3-err")
    sm.create_training_job(**body(name, epochs=1))
    dup = error_of(lambda: sm.create_training_job(**body(name, epochs=1)))
    assert (dup["Code"], dup["status"]) == ("ResourceInUse", 400) and "must be unique" in dup["Message"]
    missing = error_of(lambda: sm.describe_training_job(TrainingJobName="no-such-job"))
    assert (missing["Code"], missing["Message"]) == ("ValidationException", "Requested resource not found.")
    wait(sm, name, lambda j: j["TrainingJobStatus"] == "Completed")
    ended = error_of(lambda: sm.stop_training_job(TrainingJobName=name))
    assert ended["Code"] == "ValidationException" and "is in status Completed" in ended["Message"]
    bad_hyper = error_of(
        lambda: sm.create_training_job(**{**body(unique("x")), "HyperParameters": {"epochs": "many"}})
    )
    assert bad_hyper["Code"] == "ValidationException" and "hyperParameters.epochs" in bad_hyper["Message"]


def test_stop_sends_sigterm_and_the_final_checkpoint_lands_in_the_checkpoint_location(sm, control, platform):
    name = unique("boto3-stop")
    sm.create_training_job(**body(name, epochs=300))
    wait(sm, name, lambda j: j["SecondaryStatus"] == "Training")
    time.sleep(1.0)
    assert sm.stop_training_job(TrainingJobName=name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    job = wait(sm, name, lambda j: j["TrainingJobStatus"] == "Stopped", timeout=30)
    assert [t["Status"] for t in job["SecondaryStatusTransitions"]][-2:] == ["Stopping", "Stopped"]
    record = control.job(name)
    (cancel,) = control.accepted_cancels(record)
    assert cancel["create_final_checkpoint"] is True
    finals = [Path(c["path"]) for c in record["checkpoints"] if c["kind"] == "final"]
    location = Path(platform.data_dir) / "s3" / "b" / "checkpoints" / name
    assert finals and finals[0].is_file() and finals[0].parent == location


def test_a_new_job_with_the_same_checkpoint_location_resumes_from_it(sm, control):
    shared = f"s3://b/checkpoints/{unique('shared')}"
    first = unique("boto3-first")
    sm.create_training_job(**body(first, epochs=2, checkpoints=shared))
    wait(sm, first, lambda j: j["TrainingJobStatus"] == "Completed")
    second = unique("boto3-second")
    sm.create_training_job(**body(second, epochs=4, checkpoints=shared))
    wait(sm, second, lambda j: j["TrainingJobStatus"] == "Completed")
    record = control.job(second)
    assert record["resume_path"].endswith("ckpt_epoch_2.joblib")
    assert [c["epoch"] for c in record["checkpoints"] if c["kind"] == "automatic"] == [3, 4]

    # a third (the Amazon operator's re-run after a clear, action_if_job_exists="timestamp") finds
    # the checkpoint at its last epoch: nothing left to train, yet it ran, so it passed Training
    third = unique("boto3-third")
    sm.create_training_job(**body(third, epochs=4, checkpoints=shared))
    job = wait(sm, third, lambda j: j["TrainingJobStatus"] == "Completed")
    assert control.job(third)["resume_path"].endswith("ckpt_epoch_4.joblib")
    steps = job["SecondaryStatusTransitions"]
    assert [t["Status"] for t in steps] == ["Starting", "Downloading", "Training", "Uploading", "Completed"]
    assert all(t["StartTime"] <= t["EndTime"] for t in steps)
    assert all(a["EndTime"] == b["StartTime"] for a, b in zip(steps, steps[1:], strict=False))
    training = steps[2]
    assert job["TrainingStartTime"] == training["StartTime"]
    assert job["CreationTime"] <= job["TrainingStartTime"] <= job["TrainingEndTime"]
    assert training["StatusMessage"] == "Training image download completed. Training in progress."


def test_signatures_are_checked(platform):
    def client(key: str, secret: str):
        return boto3.client(
            "sagemaker",
            endpoint_url=platform.url,
            region_name="us-east-1",
            aws_access_key_id=key,
            aws_secret_access_key=secret,
        )

    wrong_secret = error_of(lambda: client(AWS_ACCESS_KEY_ID, "not-the-secret").list_training_jobs())
    assert (wrong_secret["Code"], wrong_secret["status"]) == ("InvalidSignatureException", 403)
    wrong_key = error_of(lambda: client("AKIDSOMEONEELSE", API_KEY).list_training_jobs())
    assert (wrong_key["Code"], wrong_key["status"]) == ("UnrecognizedClientException", 403)


def test_sts_get_caller_identity_answers_the_aws_connection_test(platform):
    """The Amazon provider's connection Test button calls STS GetCallerIdentity (query protocol)."""

    def sts(secret: str):
        return boto3.client(
            "sts",
            endpoint_url=platform.url,
            region_name="us-east-1",
            aws_access_key_id=AWS_ACCESS_KEY_ID,
            aws_secret_access_key=secret,
        )

    identity = sts(API_KEY).get_caller_identity()
    assert identity["UserId"] == AWS_ACCESS_KEY_ID and identity["Account"] == "123456789012"
    wrong = error_of(lambda: sts("not-the-secret").get_caller_identity())
    assert (wrong["Code"], wrong["status"]) == ("InvalidSignatureException", 403)
