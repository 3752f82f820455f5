"""The SageMaker dialect against the documented payloads (docs/platforms/sagemaker.md): names,
tags, statuses, errors, SigV4 signing checked by the local platform's verifier, and the create that
already landed. Pure logic, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from airflow_training_platform.errors import ApiError
from airflow_training_provider.errors import InvalidJobSpecError, JobAlreadyExistsError
from airflow_training_provider.hooks.transport import prepare_request
from airflow_training_provider.lifecycle.operations import JobOperations
from airflow_training_provider.models import CancelResult, JobState, complete_cancel_result
from airflow_training_provider.platforms.base import LOCAL_FINAL_CHECKPOINT_FIELD, Credentials, tag_pairs
from airflow_training_provider.platforms.sagemaker import NAME_PATTERN, SageMakerDialect, job_name
from tests.unit.canned import Canned

D = SageMakerDialect()
NAME = "af-demo-20250301-1"
SPEC = {
    "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
    "AlgorithmSpecification": {"TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1", "TrainingInputMode": "File"},
    "InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://bucket/train/"}}}],
    "OutputDataConfig": {"S3OutputPath": "s3://bucket/output/"},
    "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
    "StoppingCondition": {"MaxRuntimeInSeconds": 7200},
    "CheckpointConfig": {"S3Uri": "s3://bucket/checkpoints/af-demo/", "LocalPath": "/opt/ml/checkpoints"},
    "HyperParameters": {"epochs": "3"},
}  # fmt: skip
DESCRIBE = {  # the documented describe of a training job
    "TrainingJobName": NAME,
    "TrainingJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{NAME}",
    "TrainingJobStatus": "InProgress",
    "SecondaryStatus": "Training",
    "ModelArtifacts": {"S3ModelArtifacts": f"s3://bucket/output/{NAME}/output/model.tar.gz"},
    "StoppingCondition": {"MaxRuntimeInSeconds": 7200},
    "CheckpointConfig": {"S3Uri": "s3://bucket/checkpoints/af-demo/", "LocalPath": "/opt/ml/checkpoints"},
    "CreationTime": 1740823200.0,
    "TrainingStartTime": 1740823320.0,
    "LastModifiedTime": 1740825000.0,
    "SecondaryStatusTransitions": [
        {"Status": "Starting", "StartTime": 1740823200.0, "EndTime": 1740823320.0, "StatusMessage": "Preparing the instances for training"},
        {"Status": "Downloading", "StartTime": 1740823320.0, "EndTime": 1740823380.0, "StatusMessage": "Downloading input data"},
        {"Status": "Training", "StartTime": 1740823380.0, "StatusMessage": "Training image download completed. Training in progress."},
    ],
    "FinalMetricDataList": [{"MetricName": "train:loss", "Value": 0.41, "Timestamp": 1740824990.0}],
}  # fmt: skip
TAGS = ["airflow-deployment:prod", "airflow-dag:retrain", "airflow-run:manual__2026-01-01T00:00:00+00:00",
        "airflow-task:train", "airflow-map:-1", "airflow-try:2"]  # fmt: skip


def test_documented_describe_parses():
    job = D.parse_job(DESCRIBE)
    assert (job.id, job.state, job.raw_status) == (NAME, JobState.RUNNING, "InProgress/Training")
    assert job.metrics == {"train:loss": 0.41}
    assert job.artifacts == {
        "model": f"s3://bucket/output/{NAME}/output/model.tar.gz",
        "checkpoints": "s3://bucket/checkpoints/af-demo/",
    }
    assert [e.type for e in job.events] == ["Starting", "Downloading", "Training"]
    assert job.started_at.year == 2025 and job.cost.total_usd is None


@pytest.mark.parametrize(
    ("primary", "secondary", "state"),
    [
        ("InProgress", "Starting", JobState.STARTING),
        ("InProgress", "Downloading", JobState.STARTING),
        ("InProgress", "Pending", JobState.STARTING),
        ("InProgress", "Training", JobState.RUNNING),
        ("InProgress", "Interrupted", JobState.RUNNING),
        ("InProgress", "Restarting", JobState.RUNNING),
        ("InProgress", "Updating", JobState.RUNNING),
        ("InProgress", "SomethingNew", JobState.RUNNING),
        ("Stopping", "Stopping", JobState.STOPPING),
        ("Stopped", "Stopped", JobState.CANCELLED),
        ("Stopped", "MaxRuntimeExceeded", JobState.FAILED),
        ("Stopped", "MaxWaitTimeExceeded", JobState.FAILED),
        ("Completed", "Completed", JobState.SUCCEEDED),
        ("Failed", "Failed", JobState.FAILED),
        ("Deleting", None, JobState.FAILED),
    ],
)
def test_primary_and_secondary_status_map(primary, secondary, state):
    job = D.parse_job({**DESCRIBE, "TrainingJobStatus": primary, "SecondaryStatus": secondary})
    assert job.state is state
    if state is JobState.FAILED and primary == "Stopped":
        assert secondary in job.message


def test_failure_reason_is_the_message():
    job = D.parse_job(
        {
            **DESCRIBE,
            "TrainingJobStatus": "Failed",
            "SecondaryStatus": "Failed",
            "FailureReason": "AlgorithmError: OOM",
        }
    )
    assert job.state is JobState.FAILED and job.message == "AlgorithmError: OOM"


def test_job_names_are_deterministic_per_try_and_valid():
    first, again = job_name(None, TAGS), job_name(None, TAGS)
    assert first == again and first.endswith("-t2") and NAME_PATTERN.match(first) and len(first) <= 63
    assert job_name(None, [*TAGS[:-1], "airflow-try:3"]).endswith("-t3")
    other_run = job_name(None, [t.replace("2026-01-01", "2026-01-02") for t in TAGS])
    assert other_run != first and other_run[:-3] != first[:-3]
    long_dag = job_name(None, [t.replace("retrain", "x" * 300) for t in TAGS])
    assert len(long_dag) == 63 and NAME_PATTERN.match(long_dag)
    # a stem keeps the digest of the task instance (sha256 of "prod\nretrain\n<run>\ntrain\n-1"):
    # SageMaker names are unique per account and region, a stem alone may render the same elsewhere
    assert job_name("nightly_retrain 2026", TAGS) == "nightly-retrain-2026-249711487c-t2"


def test_with_tags_names_the_job_and_tags_it_as_sagemaker_tags():
    spec = D.validate_spec({**SPEC, "Tags": [{"Key": "team", "Value": "ml"}]})
    tagged = D.with_tags(spec, TAGS)
    assert tagged["TrainingJobName"] == job_name(None, TAGS) == D.created_job_id(tagged)
    assert {"Key": "team", "Value": "ml"} in tagged["Tags"]
    assert {"Key": "airflow-try", "Value": "2"} in tagged["Tags"] and tag_pairs(TAGS)["airflow-map"] == "-1"


def test_spec_validation_names_the_field_and_writes_numbers_as_strings():
    spec = D.validate_spec({**SPEC, "HyperParameters": {"epochs": 3, "lr": 0.01}})
    assert spec["HyperParameters"] == {"epochs": "3", "lr": "0.01"}
    cases = [
        ({**SPEC, "TrainingJobName": "bad_name"}, "TrainingJobName"),
        ({k: v for k, v in SPEC.items() if k != "RoleArn"}, "RoleArn"),
        ({**SPEC, "ResourceConfig": {"InstanceType": "g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 1}}, "ResourceConfig.InstanceType"),
        ({**SPEC, "AlgorithmSpecification": {"TrainingInputMode": "File"}}, "AlgorithmSpecification.TrainingImage"),
        ({**SPEC, "StoppingCondition": {"MaxRuntimeInSeconds": 0}}, "StoppingCondition.MaxRuntimeInSeconds"),
        ({**SPEC, "HyperParameters": {"flag": True}}, "HyperParameters"),
    ]  # fmt: skip
    for spec, field in cases:
        with pytest.raises(InvalidJobSpecError) as err:
            D.validate_spec(spec)
        assert err.value.field == field, (field, str(err.value))


def test_requests_are_awsjson_posts_with_a_target():
    for request, op in [
        (D.create_request(SPEC), "CreateTrainingJob"),
        (D.get_request(NAME), "DescribeTrainingJob"),
        (D.cancel_request(NAME, None), "StopTrainingJob"),
        (D.list_request(TAGS), "Search"),
    ]:
        assert (request.method, request.path, request.headers["X-Amz-Target"]) == (
            "POST",
            "/",
            f"SageMaker.{op}",
        )
        assert request.content_type == "application/x-amz-json-1.1" and request.idempotent
    search = D.list_request(TAGS).body["SearchExpression"]["Filters"]
    assert {"Name": "Tags.airflow-task", "Operator": "Equals", "Value": "train"} in search


def test_sigv4_signature_is_verified_by_the_local_platform():
    from starlette.requests import Request

    from airflow_training_platform.platforms.sagemaker.sigv4 import verify

    creds = Credentials(access_key_id="AKIDEXAMPLE", secret_access_key="s3cr3t", region="us-east-1")
    http = prepare_request(D, "http://127.0.0.1:8765", D.get_request(NAME), creds)
    assert http.headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")

    def as_received(headers: dict) -> Request:
        raw = [(k.lower().encode(), v.encode()) for k, v in {**headers, "host": "127.0.0.1:8765"}.items()]
        scope = {"type": "http", "method": "POST", "path": "/", "query_string": b"", "headers": raw,
                 "scheme": "http", "server": ("127.0.0.1", 8765)}  # fmt: skip
        return Request(scope)

    verify(as_received(http.headers), http.body, ("AKIDEXAMPLE", "s3cr3t"))
    with pytest.raises(ApiError) as wrong_secret:
        verify(as_received(http.headers), http.body, ("AKIDEXAMPLE", "other"))
    assert (wrong_secret.value.status, wrong_secret.value.code) == (403, "InvalidSignatureException")
    with pytest.raises(ApiError) as changed_body:
        verify(
            as_received(http.headers),
            http.body.replace(NAME.encode(), b"another-job"),
            ("AKIDEXAMPLE", "s3cr3t"),
        )
    assert changed_body.value.code == "InvalidSignatureException"
    with pytest.raises(ApiError) as wrong_key:
        verify(as_received(http.headers), http.body, ("AKIDOTHER", "s3cr3t"))
    assert wrong_key.value.code == "UnrecognizedClientException"


def _search_answer(tags: list[str]) -> dict:
    job = {
        **DESCRIBE,
        "TrainingJobName": job_name(None, TAGS),
        "Tags": [{"Key": k, "Value": v} for k, v in tag_pairs(tags).items()],
    }
    return {"Results": [{"TrainingJob": job}]}


def test_a_create_that_already_landed_returns_this_tries_job():
    spec = D.with_tags(D.validate_spec(SPEC), TAGS)
    name = spec["TrainingJobName"]
    in_use = JobAlreadyExistsError("Training job names must be unique", status=400, code="ResourceInUse")
    canned = Canned({("POST", "/"): [in_use, _search_answer(TAGS)]})
    job = canned.drive(JobOperations(D, "http://p", canned.clock).create_job(spec, TAGS))
    assert job.id == name and set(TAGS) <= set(job.tags)
    assert [r.headers["X-Amz-Target"] for r in canned.requests] == [
        "SageMaker.CreateTrainingJob",
        "SageMaker.Search",
    ]
    assert canned.requests[1].body["SearchExpression"]["Filters"][0]["Value"] == name


def test_a_name_taken_by_another_task_instance_is_an_error():
    spec = D.with_tags(D.validate_spec(SPEC), TAGS)
    in_use = JobAlreadyExistsError("exists", status=400, code="ResourceInUse")
    someone_else = [t.replace("train", "evaluate") for t in TAGS]
    canned = Canned({("POST", "/"): [in_use, _search_answer(someone_else)]})
    with pytest.raises(JobAlreadyExistsError):
        canned.drive(JobOperations(D, "http://p", canned.clock).create_job(spec, TAGS))


def test_stop_answer_is_stopping_and_console_link_only_for_aws():
    assert D.parse_cancel(NAME, {}).state is JobState.STOPPING
    assert D.console_url("http://127.0.0.1:9", NAME) is None
    assert "eu-west-1.console.aws.amazon.com" in D.console_url(
        "https://api.sagemaker.eu-west-1.amazonaws.com", NAME
    )


# the local platform's answer for a stopped user-code job (docs/platforms/sagemaker.md): the real API has
# no such field, so a real answer says nothing (None) and keeps only the checkpoint location
@pytest.mark.parametrize(
    ("field", "written", "final_id", "path", "text"),
    [
        (
            None,
            None,
            None,
            "s3://bucket/checkpoints/af-demo/",
            "final checkpoint None (s3://bucket/checkpoints/af-demo/)",
        ),
        (
            {"written": True, "files": ["checkpoint.json"], "at": 1740825000.0},
            True,
            "checkpoint.json",
            "s3://bucket/checkpoints/af-demo/checkpoint.json",
            "final checkpoint written after the stop: s3://bucket/checkpoints/af-demo/checkpoint.json",
        ),
        (
            {"written": False, "files": [], "at": None},
            False,
            None,
            "s3://bucket/checkpoints/af-demo/",
            "no final checkpoint written after the stop; checkpoints at s3://bucket/checkpoints/af-demo/",
        ),
    ],
    ids=["real", "written", "none-written"],
)
def test_a_stopped_job_says_whether_its_program_wrote_a_checkpoint_after_the_stop(
    field, written, final_id, path, text
):
    body = {**DESCRIBE, "TrainingJobStatus": "Stopped", "SecondaryStatus": "Stopped"}
    job = D.parse_job({**body, LOCAL_FINAL_CHECKPOINT_FIELD: field} if field else body)
    assert job.state is JobState.CANCELLED and job.final_checkpoint_written is written
    result = complete_cancel_result(CancelResult(job_id=job.id, state=JobState.STOPPING), job)
    assert (result.state, result.final_checkpoint_written) == (JobState.CANCELLED, written)
    assert (result.final_checkpoint_id, result.final_checkpoint_path) == (final_id, path)
    assert result.final_checkpoint_text() == text
    if written:
        assert job.final_checkpoint.created_at == datetime(2025, 3, 1, 10, 30, tzinfo=UTC)
