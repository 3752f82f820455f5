"""Honest refusals, enumerated from botocore's own service models: every SageMaker operation whose
name holds ``TrainingJob``, plus ``Search`` and the tag operations, and every CloudWatch Logs and S3
operation the local platform claims, is either served (a real call with valid input succeeds, or
gives a documented domain error) or refused as AWS refuses what it does not know
(``UnknownOperationException``; S3: 501 ``NotImplemented``) — never a not-found for a job that
exists. One completed job, made once for the module."""

from __future__ import annotations

import uuid

import boto3
import botocore.config
import botocore.exceptions
import botocore.session
import pytest

from airflow_training_platform.platforms.sagemaker import cloudwatch_logs, routes, s3
from tests.conftest import API_KEY, AWS_ACCESS_KEY_ID
from tests.local_platform.test_sagemaker_api import body, wait

REFUSED_TRAINING_JOB_OPERATIONS = {
    "DeleteTrainingJob",
    "UpdateTrainingJob",
    "ListTrainingJobsForHyperParameterTuningJob",
}


def client(platform, service: str, validate: bool = True):
    return boto3.client(
        service,
        endpoint_url=platform.url,
        region_name="us-east-1",
        aws_access_key_id=AWS_ACCESS_KEY_ID,
        aws_secret_access_key=API_KEY,
        config=botocore.config.Config(parameter_validation=validate, retries={"max_attempts": 1}),
    )


def operations(service: str) -> set[str]:
    return set(botocore.session.get_session().get_service_model(service).operation_names)


def error_of(call) -> dict:
    with pytest.raises(botocore.exceptions.ClientError) as err:
        call()
    return {**err.value.response["Error"], "status": err.value.response["ResponseMetadata"]["HTTPStatusCode"]}


@pytest.fixture(scope="module")
def job(platform) -> dict:
    sm = client(platform, "sagemaker")
    name = f"ops-{uuid.uuid4().hex[:8]}"
    sm.create_training_job(**body(name, epochs=1), Tags=[{"Key": "k", "Value": "v"}])
    return wait(sm, name, lambda j: j["TrainingJobStatus"] == "Completed")


def test_every_training_job_operation_is_served_or_refused_as_unknown(platform, job):
    model = operations("sagemaker")
    training = {op for op in model if "TrainingJob" in op} | {"Search"}
    served = set(routes.OPERATIONS)
    assert served <= model  # every name served is one of SageMaker's
    assert training - served == REFUSED_TRAINING_JOB_OPERATIONS, "the served list changed: update the docs"

    sm = client(platform, "sagemaker")
    name, arn = job["TrainingJobName"], job["TrainingJobArn"]
    # served: valid input against an existing job gives its answer or a documented domain error
    assert sm.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] == "Completed"
    stopped = error_of(lambda: sm.stop_training_job(TrainingJobName=name))
    assert stopped["Code"] == "ValidationException" and "is in status Completed" in stopped["Message"]
    taken = error_of(lambda: sm.create_training_job(**body(name, epochs=1)))
    assert taken["Code"] == "ResourceInUse"
    listed = sm.list_training_jobs(NameContains=name)["TrainingJobSummaries"]
    assert [s["TrainingJobName"] for s in listed] == [name]
    by_name = {"Filters": [{"Name": "TrainingJobName", "Value": name}]}
    assert len(sm.search(Resource="TrainingJob", SearchExpression=by_name)["Results"]) == 1
    sm.add_tags(ResourceArn=arn, Tags=[{"Key": "k2", "Value": "v2"}])
    assert {"Key": "k2", "Value": "v2"} in sm.list_tags(ResourceArn=arn)["Tags"]
    sm.delete_tags(ResourceArn=arn, TagKeys=["k2"])
    assert sm.list_tags(ResourceArn=arn)["Tags"] == [{"Key": "k", "Value": "v"}]

    # not served: refused as an unknown operation, for an existing job too (never "not found")
    raw = client(platform, "sagemaker", validate=False)
    refusals = {
        "DeleteTrainingJob": lambda: raw.delete_training_job(TrainingJobName=name),
        "UpdateTrainingJob": lambda: raw.update_training_job(TrainingJobName=name),
        "ListTrainingJobsForHyperParameterTuningJob": lambda: (
            raw.list_training_jobs_for_hyper_parameter_tuning_job(HyperParameterTuningJobName="tuning")
        ),
        "CreateEndpoint": lambda: raw.create_endpoint(EndpointName="e", EndpointConfigName="c"),
    }
    for operation, call in refusals.items():
        refused = error_of(call)
        assert (refused["Code"], refused["status"]) == ("UnknownOperationException", 400), operation
        assert operation in refused["Message"] and "not found" not in refused["Message"]


def test_cloudwatch_logs_operations_claimed_are_served_and_the_rest_refused(platform, job):
    claimed = set(cloudwatch_logs.CloudWatchLogs(None, "us-east-1").operations)  # type: ignore[arg-type]
    assert claimed == {"DescribeLogStreams", "GetLogEvents"} and claimed <= operations("logs")
    logs = client(platform, "logs")
    group = "/aws/sagemaker/TrainingJobs"
    streams = logs.describe_log_streams(logGroupName=group, logStreamNamePrefix=job["TrainingJobName"] + "/")
    (stream,) = streams["logStreams"]
    events = logs.get_log_events(
        logGroupName=group, logStreamName=stream["logStreamName"], startFromHead=True
    )
    assert any("Training complete" in e["message"] for e in events["events"])

    raw = client(platform, "logs", validate=False)
    for operation, call in {
        "FilterLogEvents": lambda: raw.filter_log_events(logGroupName=group),
        "DescribeLogGroups": lambda: raw.describe_log_groups(),
    }.items():
        refused = error_of(call)
        assert (refused["Code"], refused["status"]) == ("UnknownOperationException", 400), operation


def test_s3_operations_claimed_are_served_and_the_rest_refused(platform):
    assert set(s3.OPERATIONS) <= operations("s3")
    store = client(platform, "s3")
    bucket = f"ops-{uuid.uuid4().hex[:8]}"
    store.create_bucket(Bucket=bucket)
    store.head_bucket(Bucket=bucket)
    assert bucket in [b["Name"] for b in store.list_buckets()["Buckets"]]
    store.get_bucket_location(Bucket=bucket)
    store.put_object(Bucket=bucket, Key="a/one.txt", Body=b"one")
    store.copy_object(Bucket=bucket, Key="a/two.txt", CopySource={"Bucket": bucket, "Key": "a/one.txt"})
    assert store.head_object(Bucket=bucket, Key="a/two.txt")["ContentLength"] == 3
    assert store.get_object(Bucket=bucket, Key="a/two.txt")["Body"].read() == b"one"
    assert [o["Key"] for o in store.list_objects_v2(Bucket=bucket)["Contents"]] == ["a/one.txt", "a/two.txt"]
    assert len(store.list_objects(Bucket=bucket)["Contents"]) == 2
    upload = store.create_multipart_upload(Bucket=bucket, Key="big")["UploadId"]
    part = store.upload_part(Bucket=bucket, Key="big", UploadId=upload, PartNumber=1, Body=b"x")
    store.complete_multipart_upload(
        Bucket=bucket,
        Key="big",
        UploadId=upload,
        MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]},
    )
    aborted = store.create_multipart_upload(Bucket=bucket, Key="gone")["UploadId"]
    store.abort_multipart_upload(Bucket=bucket, Key="gone", UploadId=aborted)
    store.delete_object(Bucket=bucket, Key="big")
    store.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "a/one.txt"}, {"Key": "a/two.txt"}]})
    store.delete_bucket(Bucket=bucket)

    store.create_bucket(Bucket=bucket)
    store.put_object(Bucket=bucket, Key="k", Body=b"v")
    for operation, call in {
        "GetObjectTagging": lambda: store.get_object_tagging(Bucket=bucket, Key="k"),
        "GetBucketVersioning": lambda: store.get_bucket_versioning(Bucket=bucket),
    }.items():
        refused = error_of(call)
        assert (refused["Code"], refused["status"]) == ("NotImplemented", 501), operation
