"""What every platform must do, checked the same way for each: one row in :data:`CASES` per platform.

Documented payloads parse into the normalized model; every documented status maps (in any case),
unknown ones keep the job running; errors fall into the provider's error kinds; requests are
authenticated and create is never re-sent blindly; identity tags survive the round trip; the
platform is registered with a generated hook class, connection form and provider-info entry; a
connection missing a credential is refused naming the field. Pure logic, no I/O.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_training_provider.errors import (
    InvalidJobSpecError,
    JobNotFoundError,
    JobStateConflictError,
    PlatformAuthError,
    TrainingPlatformError,
    TransientPlatformError,
)
from airflow_training_provider.get_provider_info import get_provider_info
from airflow_training_provider.hooks.connection import PlatformConnection
from airflow_training_provider.hooks.training import PLATFORM_HOOKS
from airflow_training_provider.hooks.transport import prepare_request
from airflow_training_provider.models import CancelRequest, JobState
from airflow_training_provider.platforms import PLATFORMS, modelarts, pai, sagemaker, tensorone, together
from airflow_training_provider.platforms.base import LOCAL_COST_FIELD, LOCAL_FINAL_CHECKPOINT_FIELD, tag_pairs
from airflow_training_provider.platforms.descriptor import PlatformDescriptor
from tests.unit import test_modelarts_dialect as ma
from tests.unit import test_pai_dialect as pa
from tests.unit import test_sagemaker_dialect as sm
from tests.unit import test_tensorone_dialect as t1
from tests.unit import test_together_dialect as tg


@dataclass(frozen=True)
class Case:
    """One platform's documented facts."""

    platform: PlatformDescriptor
    spec: dict[str, Any]  # a valid create body
    created: dict[str, Any]  # the create answer
    job: dict[str, Any]  # a running job object
    job_id: str
    terminal: dict[str, JobState]  # every documented terminal status
    running: tuple[str, ...]  # documented non-terminal statuses
    errors: dict[type[TrainingPlatformError], tuple[int, Any]]  # error kind → (status, body)
    connection: dict[str, Any]  # a complete Airflow connection of this type
    with_tags_in_job: Any = None  # job body → the same job carrying ``tags`` (as the platform echoes them)
    with_id: Any = None  # (job body, id) → the same job under another id
    list_answer: Any = None  # rows → the list call's answer holding them
    broken: tuple[str, Any] = ("", None)  # (the field, job body → the job with that field wrongly typed)
    extra: dict[str, Any] = field(default_factory=dict)


CASES = [
    Case(
        platform=tensorone.PLATFORM,
        spec={"name": "n", "datasetId": "digits"},
        created=t1.CREATE_RESPONSE,
        job=t1.GET_RESPONSE,
        job_id="job_train_demo1",
        terminal={
            "completed": JobState.SUCCEEDED,
            "failed": JobState.FAILED,
            "cancelled": JobState.CANCELLED,
        },
        running=("queued", "initializing", "running", "paused", "cancelling"),
        errors={
            PlatformAuthError: (401, {"error": "UNAUTHORIZED", "message": "bad key"}),
            JobNotFoundError: (404, {"error": "RESOURCE_NOT_FOUND", "message": "no job"}),
            JobStateConflictError: (409, {"error": "STATE_CONFLICT", "message": "already completed"}),
            TransientPlatformError: (429, {"error": "RATE_LIMIT_EXCEEDED", "message": "slow down"}),
            TrainingPlatformError: (400, {"error": "VALIDATION_ERROR", "message": "bad name"}),
        },
        connection={"conn_type": "tensorone", "password": "tpo_test_secret"},
        with_tags_in_job=lambda body, tags: {**body, "tags": tags},
        with_id=lambda body, job_id: {**body, "jobId": job_id},
        list_answer=lambda rows: {"jobs": rows, "totalCount": len(rows)},
        broken=("createdAt", lambda body: {**body, "createdAt": "yesterday"}),
    ),
    Case(
        platform=together.PLATFORM,
        spec=tg.CREATE_BODY,
        created={**tg.JOB, "status": "pending"},
        job=tg.JOB,
        job_id=tg.JOB_ID,
        terminal={
            "completed": JobState.SUCCEEDED,
            "error": JobState.FAILED,
            "user_error": JobState.FAILED,
            "cancelled": JobState.CANCELLED,
        },
        running=("pending", "queued", "running", "compressing", "uploading", "cancel_requested"),
        errors={
            PlatformAuthError: (
                401,
                {"error": {"message": "Invalid API key", "type": "authentication_error"}},
            ),
            JobNotFoundError: (404, {"error": {"message": "not found"}}),
            JobStateConflictError: (
                400,
                {"error": {"message": "cannot be cancelled", "code": "job_not_cancellable"}},
            ),
            TransientPlatformError: (503, {"error": {"message": "overloaded"}}),
            TrainingPlatformError: (402, {"error": {"message": "Insufficient balance"}}),
        },
        connection={"conn_type": "together", "password": "tg-secret"},
        with_tags_in_job=lambda body, tags: {**body, together.TAGS_KEY: tags},
        with_id=lambda body, job_id: {**body, "id": job_id},
        list_answer=lambda rows: {"data": rows},
        broken=("created_at", lambda body: {**body, "created_at": "yesterday"}),
    ),
    Case(
        platform=sagemaker.PLATFORM,
        spec=sm.SPEC,
        created={"TrainingJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{sm.NAME}"},
        job=sm.DESCRIBE,
        job_id=sm.NAME,
        terminal={
            "Completed": JobState.SUCCEEDED,
            "Failed": JobState.FAILED,
            "Stopped": JobState.CANCELLED,
            "Deleting": JobState.FAILED,
        },
        running=("InProgress", "Stopping"),
        errors={
            PlatformAuthError: (
                403,
                {"__type": "InvalidSignatureException", "Message": "signature mismatch"},
            ),
            JobNotFoundError: (
                400,
                {"__type": "ValidationException", "Message": "Requested resource not found."},
            ),
            JobStateConflictError: (
                400,
                {
                    "__type": "ValidationException",
                    "Message": "The request was rejected because the training job is in status Stopped.",
                },
            ),
            TransientPlatformError: (400, {"__type": "ThrottlingException", "Message": "Rate exceeded"}),
            TrainingPlatformError: (400, {"__type": "ResourceLimitExceeded", "Message": "quota"}),
        },
        connection={
            "conn_type": "aws",
            "login": "AKIDEXAMPLE",
            "password": "aws-secret",
            "extra": {"region_name": "eu-west-1"},
        },
        with_tags_in_job=lambda body, tags: {
            **body,
            "Tags": [{"Key": k, "Value": v} for k, v in tag_pairs(tags).items()],
        },
        with_id=lambda body, job_id: {**body, "TrainingJobName": job_id},
        list_answer=lambda rows: {"Results": [{"TrainingJob": row} for row in rows]},
        broken=("CreationTime", lambda body: {**body, "CreationTime": "yesterday"}),
    ),
    Case(
        platform=pai.PLATFORM,
        spec=pa.SPEC,
        created=pa.CREATED,
        job=pa.JOB,
        job_id=pa.JOB_ID,
        terminal={
            "Succeed": JobState.SUCCEEDED,
            "Succeeded": JobState.SUCCEEDED,
            "Failed": JobState.FAILED,
            "CreateFailed": JobState.FAILED,
            "InitializeFailed": JobState.FAILED,
            "Terminated": JobState.CANCELLED,
            "Stopped": JobState.CANCELLED,
        },
        running=(
            "Creating",
            "Created",
            "Submitted",
            "Queuing",
            "Initializing",
            "Running",
            "Stopping",
            "Terminating",
        ),
        errors={
            PlatformAuthError: (
                400,
                {"Code": "SignatureDoesNotMatch", "Message": "signature", "RequestId": "r"},
            ),
            JobNotFoundError: (
                404,
                {"Code": "EntityNotExist.TrainingJob", "Message": "no job", "RequestId": "r"},
            ),
            JobStateConflictError: (
                400,
                {"Code": "TrainingJobStatusNotAllowed", "Message": "is Succeed", "RequestId": "r"},
            ),
            TransientPlatformError: (
                400,
                {"Code": "Throttling.User", "Message": "slow down", "RequestId": "r"},
            ),
            TrainingPlatformError: (400, {"Code": "InvalidParameter", "Message": "bad", "RequestId": "r"}),
        },
        connection=pa.CONNECTION,
        with_tags_in_job=lambda body, tags: {
            **body,
            "Labels": [{"Key": k, "Value": v} for k, v in tag_pairs(tags).items()],
        },
        with_id=lambda body, job_id: {**body, "TrainingJobId": job_id},
        list_answer=lambda rows: {"TrainingJobs": rows, "TotalCount": len(rows), "RequestId": "r"},
        broken=("GmtCreateTime", lambda body: {**body, "GmtCreateTime": "yesterday"}),
    ),
    Case(
        platform=modelarts.PLATFORM,
        spec=ma.SPEC,
        created=ma.CREATED,
        job=ma.JOB,
        job_id=ma.JOB_ID,
        terminal={
            "Completed": JobState.SUCCEEDED,
            "Failed": JobState.FAILED,
            "Abnormal": JobState.FAILED,
            "Terminated": JobState.CANCELLED,
        },
        running=("Creating", "Pending", "Running", "Terminating"),
        errors={
            PlatformAuthError: (
                401,
                {"error_code": "APIGW.0301", "error_msg": "Incorrect IAM authentication"},
            ),
            JobNotFoundError: (404, {"error_code": "ModelArts.2762", "error_msg": "no job"}),
            JobStateConflictError: (
                400,
                {
                    "error_code": "ModelArts.2767",
                    "error_msg": "The training job in phase Completed cannot be terminated.",
                },
            ),
            TransientPlatformError: (503, {"error_code": "ModelArts.0011", "error_msg": "busy"}),
            TrainingPlatformError: (400, {"error_code": "ModelArts.0101", "error_msg": "bad"}),
        },
        connection=ma.CONNECTION,
        with_tags_in_job=lambda body, tags: {
            **body,
            "metadata": {**body["metadata"], "annotations": tag_pairs(tags)},
        },
        with_id=lambda body, job_id: {**body, "metadata": {**body["metadata"], "id": job_id}},
        list_answer=lambda rows: {"items": rows, "total": len(rows), "count": len(rows)},
        broken=(
            "metadata.create_time",
            lambda body: {**body, "metadata": {**body["metadata"], "create_time": "yesterday"}},
        ),
    ),
]
IDS = [c.platform.conn_type for c in CASES]
every_platform = pytest.mark.parametrize("case", CASES, ids=IDS)


def test_every_registered_platform_has_a_conformance_row():
    assert sorted(IDS) == sorted(PLATFORMS)


# -- payloads and statuses -----------------------------------------------------------------------
@every_platform
def test_documented_payloads_parse(case):
    dialect = case.platform.dialect()
    assert dialect.validate_spec(case.spec) == case.spec
    created = dialect.parse_created(case.created)
    assert created.id == case.job_id and not created.is_terminal and created.platform == dialect.name
    job = dialect.parse_job(case.job)
    assert job.id == case.job_id and job.state is JobState.RUNNING
    json.dumps(job.model_dump(mode="json"))  # XCom- and trigger-event-safe


@every_platform
def test_status_map_is_total_and_case_blind(case):
    dialect = case.platform.dialect()
    assert set(dialect.status_map) == set(case.terminal) | set(case.running)
    for raw, state in case.terminal.items():
        for spelling in (raw, raw.upper(), raw.capitalize(), f" {raw} "):
            assert dialect.map_status(spelling) is state, spelling
    for raw in case.running:
        assert not dialect.map_status(raw.upper()).is_terminal


@every_platform
def test_unknown_status_keeps_polling_and_is_logged_once(case, caplog):
    dialect = case.platform.dialect()
    with caplog.at_level(logging.WARNING):
        states = [dialect.map_status(f"brand_new_{case.platform.conn_type}") for _ in range(3)]
    assert states == [JobState.RUNNING] * 3
    assert len([r for r in caplog.records if "unknown job status" in r.getMessage()]) == 1


# -- errors ----------------------------------------------------------------------------------------
@every_platform
def test_errors_fall_into_the_provider_error_kinds(case):
    dialect = case.platform.dialect()
    for kind, (status, body) in case.errors.items():
        err = dialect.classify_error(status, {}, body, json.dumps(body))
        assert type(err) is kind, (status, body, err)
        assert err.message and err.status == status
    throttled = dialect.classify_error(429, {"Retry-After": "4"}, {}, "")
    assert (
        isinstance(throttled, TransientPlatformError) and throttled.retry_after == 4.0 and not throttled.sent
    )


# -- requests --------------------------------------------------------------------------------------
@every_platform
def test_requests_are_authenticated_and_create_is_not_resent_blindly(case):
    dialect = case.platform.dialect()
    conn = PlatformConnection.resolve(_connection(case))
    create = dialect.create_request(case.spec)
    named = dialect.created_job_id(dialect.with_tags(case.spec, ["airflow-dag:d", "airflow-try:1"]))
    assert not create.idempotent or named is not None, "a create may be re-sent only if its job id is ours"
    for request in (
        create,
        dialect.get_request(case.job_id),
        dialect.cancel_request(case.job_id, CancelRequest()),
    ):
        http = prepare_request(dialect, conn.base_url, request, conn.credentials)
        assert http.headers.get("Authorization"), request
        assert http.url.startswith(conn.base_url) and "{" not in conn.base_url
        assert json.loads(http.body or b"null") == request.body
    assert dialect.get_request(case.job_id).idempotent


@every_platform
def test_identity_tags_round_trip(case):
    dialect = case.platform.dialect()
    tags = ["airflow-dag:d", "airflow-try:2"]
    tagged = dialect.with_tags(case.spec, tags)
    assert dialect.validate_spec(tagged) and tagged is not case.spec
    assert dialect.parse_job(case.with_tags_in_job(case.job, tags)).tags == tags


@every_platform
def test_a_list_row_that_does_not_read_is_left_out_and_the_others_kept(case, caplog):
    dialect = case.platform.dialect()
    tags = ["airflow-deployment:d", "airflow-dag:x", "airflow-task:t"]
    rows = [case.with_tags_in_job(case.with_id(case.job, f"job-{n}"), tags) for n in ("a", "b", "c")]
    field_name, broken = case.broken
    rows[1] = broken(rows[1])
    with pytest.raises(ValueError):  # the field is wrongly typed: the job alone does not read
        dialect.parse_job(rows[1])
    with caplog.at_level(logging.WARNING, logger="airflow_training_provider.platforms.base"):
        jobs = dialect.parse_list(case.list_answer(rows))
    assert sorted(j.id for j in jobs) == ["job-a", "job-c"]
    assert all(set(tags) <= set(j.tags) for j in jobs)
    (warning,) = [
        r.getMessage() for r in caplog.records if r.name == "airflow_training_provider.platforms.base"
    ]
    assert warning.startswith(f"{dialect.name}: listed job 'job-b' (row 2) is left out")
    assert f"field '{field_name}'" in warning and warning.endswith("the other rows are kept")


@every_platform
def test_a_list_answer_whose_rows_are_not_a_list_is_malformed(case):
    body = {key: "not a list" if value == [] else value for key, value in case.list_answer([]).items()}
    assert "not a list" in body.values()
    with pytest.raises(ValueError):
        case.platform.dialect().parse_list(body)


@every_platform
def test_only_a_platform_without_money_reads_the_local_platforms_cost(case):
    dialect = case.platform.dialect()
    local = dialect.parse_job({**case.job, LOCAL_COST_FIELD: 1.5}).cost.total_usd
    if dialect.capabilities.cost_usd:  # it reports its own cost: the emulator adds none
        assert local == dialect.parse_job(case.job).cost.total_usd
    else:
        assert dialect.parse_job(case.job).cost.total_usd is None and local == 1.5


#: platforms whose API cannot say whether a stopped program wrote a checkpoint after the stop signal:
#: their dialects read what the local platform adds (LOCAL_FINAL_CHECKPOINT_FIELD); the others ignore it
SILENT_ON_THE_STOPS_CHECKPOINT = {"sagemaker", "pai", "modelarts"}


@every_platform
def test_only_a_platform_that_cannot_tell_reads_the_local_platforms_checkpoint_after_the_stop(case):
    dialect = case.platform.dialect()
    saved = {"written": True, "files": ["model.pt", "checkpoint.json"], "location": "s3://b/ck/", "at": 1.7e9}
    plain = dialect.parse_job(case.job)
    local = dialect.parse_job({**case.job, LOCAL_FINAL_CHECKPOINT_FIELD: saved})
    assert plain.final_checkpoint_written is None
    if dialect.name not in SILENT_ON_THE_STOPS_CHECKPOINT:
        assert local == plain
        return
    assert local.final_checkpoint_written is True
    finals = [(c.id, c.path) for c in local.checkpoints if c.kind == "final"]
    assert finals == [("model.pt", "s3://b/ck/model.pt"), ("checkpoint.json", "s3://b/ck/checkpoint.json")]
    # the location stays the latest checkpoint: the one a retry resumes from
    assert local.checkpoints[-len(plain.checkpoints) :] == plain.checkpoints
    assert local.latest_checkpoint == plain.latest_checkpoint
    assert local.final_checkpoint.created_at == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    none = dialect.parse_job(
        {**case.job, LOCAL_FINAL_CHECKPOINT_FIELD: {**saved, "written": False, "files": []}}
    )
    assert none.final_checkpoint_written is False and none.checkpoints == plain.checkpoints
    malformed = dialect.parse_job({**case.job, LOCAL_FINAL_CHECKPOINT_FIELD: {"written": "yes"}})
    assert malformed == plain


@every_platform
def test_cancel_flags_say_what_the_platform_will_do(case):
    dialect = case.platform.dialect()
    caps = dialect.capabilities
    effective = dialect.effective_cancel(
        CancelRequest(create_final_checkpoint=True, preserve_checkpoints=False)
    )
    assert effective.create_final_checkpoint is caps.final_checkpoint_on_cancel
    assert effective.preserve_checkpoints is not caps.preserve_checkpoints_flag


# -- registration ----------------------------------------------------------------------------------
@every_platform
def test_platform_is_registered_with_a_hook_form_and_integration(case):
    platform = case.platform
    hook = PLATFORM_HOOKS[platform.conn_type]
    assert hook.__name__ == platform.hook_class_name and hook.conn_type == platform.conn_type
    assert hook().conn_id == platform.default_conn_id
    info = get_provider_info()
    entries = [c for c in info["connection-types"] if c["connection-type"] == platform.conn_type]
    if platform.registers_connection_type:
        (entry,) = entries
        assert entry["hook-class-name"] == f"airflow_training_provider.hooks.training.{hook.__name__}"
        assert entry["ui-field-behaviour"]["hidden-fields"] == hook.get_ui_field_behaviour()["hidden_fields"]
    else:  # another provider owns the connection type (aws: the Amazon provider)
        assert entries == []
    assert {
        "integration-name": platform.display_name,
        "external-doc-url": platform.docs_url,
        "tags": ["service"],
    } in (info["integrations"])
    assert all(
        platform.display_name in [m["integration-name"] for m in info[kind]]
        for kind in ("operators", "sensors", "hooks", "triggers")
    )


@every_platform
def test_a_connection_missing_a_credential_is_refused_naming_it(case):
    conn = _connection(case)
    resolved = PlatformConnection.resolve(conn)
    assert resolved.base_url == case.platform.default_url(resolved.credentials)
    secret = case.connection.get("password")
    assert secret not in repr(resolved) and secret not in repr(resolved.credentials)
    for source in case.platform.required_credentials:
        field_name = case.platform.credentials[source]
        broken = _connection(case, **{field_name: None})
        with pytest.raises(PlatformAuthError, match=field_name):
            PlatformConnection.resolve(broken)


def _connection(case: Case, **override: Any):
    from airflow.sdk.definitions.connection import Connection

    values = {**case.connection, **override}
    extra = values.pop("extra", None)
    return Connection(
        conn_id=f"{case.platform.conn_type}_t", extra=json.dumps(extra) if extra else None, **values
    )


# -- specs: typed before submit, typos refused -----------------------------------------------------------
TYPOS = {
    "tensorone": ({"name": "n", "datasetId": "digits", "epochz": 2}, "epochz", None),
    "together": ({"training_file": "f", "model": "m", "n_epoch": 2}, "n_epoch", "n_epochs"),
    "aws": ({**sm.SPEC, "HyperParameter": {"epochs": "3"}}, "HyperParameter", "HyperParameters"),
    "pai": (
        {**pa.SPEC, "HyperParameter": [{"Name": "epochs", "Value": "3"}]},
        "HyperParameter",
        "HyperParameters",
    ),
    "modelarts": ({**ma.SPEC, "algorithms": ma.SPEC["algorithm"]}, "algorithms", "algorithm"),
}
NUMBERS = {
    "tensorone": (
        {"name": "n", "datasetId": "d", "config": {"training": {"epochs": "3"}}},
        ("config", "training", "epochs"),
        3,
    ),
    "together": (
        {"training_file": "f", "model": "m", "n_epochs": "3", "learning_rate": "1e-5"},
        ("n_epochs",),
        3,
    ),
    "aws": ({**sm.SPEC, "HyperParameters": {"epochs": 3}}, ("HyperParameters", "epochs"), "3"),
    "pai": ({**pa.SPEC, "HyperParameters": {"epochs": 3}}, ("HyperParameters", 0, "Value"), "3"),
    "modelarts": (
        {**ma.SPEC, "spec": {"resource": {"flavor_id": "f", "node_count": "2"}}},
        ("spec", "resource", "node_count"),
        2,
    ),
}


@every_platform
def test_an_unknown_field_is_refused_naming_the_closest_known_one(case):
    dialect = case.platform.dialect()
    spec, field_name, closest = TYPOS[case.platform.conn_type]
    with pytest.raises(InvalidJobSpecError) as err:
        dialect.validate_spec(spec)
    assert err.value.field == field_name
    assert ("did you mean" in str(err.value)) is (closest is not None)
    if closest:
        assert f"'{closest}'" in str(err.value)
    assert field_name in dialect.validate_spec(spec, allow_unknown_fields=True)  # the explicit pass-through


@every_platform
def test_templated_numbers_reach_the_platform_as_its_schema_types_them(case):
    spec, path, expected = NUMBERS[case.platform.conn_type]
    value = case.platform.dialect().validate_spec(spec)
    for key in path:
        value = value[key]
    assert value == expected and type(value) is type(expected)


@every_platform
def test_a_nested_typo_is_named_with_its_path(case):
    dialect = case.platform.dialect()
    nested = {
        "tensorone": (
            {"name": "n", "datasetId": "d", "config": {"training": {"epoch": 3}}},
            "config.training.epoch",
        ),
        "together": ({"training_file": "f", "model": "m", "x_airflow_tag": ["a"]}, "x_airflow_tag"),
        "aws": (
            {**sm.SPEC, "ResourceConfig": {**sm.SPEC["ResourceConfig"], "InstanceCnt": 2}},
            "ResourceConfig.InstanceCnt",
        ),
        "pai": (
            {**pa.SPEC, "ComputeResource": {"EcsSpec": "ecs.gn7i", "EcsCnt": 2}},
            "ComputeResource.EcsCnt",
        ),
        "modelarts": (
            {**ma.SPEC, "spec": {"resource": {"flavor_id": "f", "node_cont": 2}}},
            "spec.resource.node_cont",
        ),
    }[case.platform.conn_type]
    with pytest.raises(InvalidJobSpecError) as err:
        dialect.validate_spec(nested[0])
    assert err.value.field == nested[1]
