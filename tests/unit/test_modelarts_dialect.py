"""The ModelArts (training jobs API v2) dialect on documented payloads, and the SDK-HMAC-SHA256
signature: Huawei's signer (what the provider sends) and the local platform's check must agree."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from airflow_training_platform.errors import ApiError
from airflow_training_platform.platforms.modelarts import signing
from airflow_training_provider.errors import (
    InvalidJobSpecError,
    JobNotFoundError,
    JobStateConflictError,
    PlatformAuthError,
    TrainingPlatformError,
    TransientPlatformError,
)
from airflow_training_provider.hooks.connection import PlatformConnection
from airflow_training_provider.hooks.transport import prepare_request
from airflow_training_provider.models import CancelResult, Checkpoint, JobState, complete_cancel_result
from airflow_training_provider.platforms import modelarts
from airflow_training_provider.platforms.base import LOCAL_FINAL_CHECKPOINT_FIELD

D = modelarts.ModelArtsDialect()
JOB_ID = "6f1d2c9a-0000-4c1e-9d6b-1a2b3c4d5e6f"
PROJECT = "0a1b2c3d4e"

# platforms.md-documented bodies (ModelArts API v2: create / show / terminate / events)
SPEC = {
    "kind": "job",
    "metadata": {"name": "airflow-demo-job", "description": "nightly retrain"},
    "algorithm": {
        "engine": {"image_url": "swr.example/ns/trainer:1.0"},
        "command": "python /home/ma-user/code/train.py",
        "parameters": [{"name": "epochs", "value": "3"}],
        "inputs": [{"name": "data_url", "remote": {"obs": {"obs_url": "/bucket/data/"}}}],
        "outputs": [
            {"name": "train_url", "remote": {"obs": {"obs_url": "/bucket/out/"}}},
            {"name": "checkpoints", "remote": {"obs": {"obs_url": "/bucket/ckpt/"}}},
        ],
        "environments": {"EPOCHS": "3"},
    },
    "spec": {
        "resource": {"flavor_id": "modelarts.vm.gpu.example", "node_count": 1},
        "log_export_path": {"obs_url": "/bucket/logs/"},
    },
}
CREATED = {
    "kind": "job",
    "metadata": {
        "id": JOB_ID,
        "name": "airflow-demo-job",
        "description": "nightly retrain",
        "create_time": 1740823200000,
        "workspace_id": "0",
        "user_name": "demo",
    },
    "status": {
        "phase": "Creating",
        "secondary_phase": "Creating",
        "duration": 0,
        "start_time": 0,
        "node_count_metrics": None,
        "tasks": ["worker-0"],
    },  # fmt: skip
    "algorithm": SPEC["algorithm"],
    "spec": {"resource": {"policy": "regular", "flavor_id": "modelarts.vm.gpu.example", "node_count": 1}},
}
JOB = {
    **CREATED,
    "status": {
        "phase": "Running",
        "secondary_phase": "Running",
        "duration": 61000,
        "start_time": 1740823260000,
        "tasks": ["worker-0"],
    },  # fmt: skip
}
CONNECTION = {
    "conn_type": "modelarts",
    "login": "HWAKEXAMPLE",
    "password": "modelarts-sk-example",
    "extra": {"region": "cn-north-4", "project_id": PROJECT},
}


def test_running_job_reads_state_duration_and_checkpoint_location():
    job = D.parse_job(JOB)
    assert (job.id, job.name, job.state, job.raw_status) == (
        JOB_ID,
        "airflow-demo-job",
        JobState.RUNNING,
        "Running",
    )
    assert job.cost.billable_seconds == 61.0
    assert job.checkpoints == [Checkpoint(id="checkpoints", kind="location", path="/bucket/ckpt/")]
    assert job.artifacts == {"checkpoints": "/bucket/ckpt/"}
    assert job.created_at.timestamp() == 1740823200 and job.started_at.timestamp() == 1740823260


@pytest.mark.parametrize(
    ("phase", "secondary", "state", "message"),
    [
        ("Completed", "Completed", JobState.SUCCEEDED, None),
        ("Failed", "Failed", JobState.FAILED, "worker-0 exit code 1: Traceback ... ValueError"),
        ("Abnormal", "CreateFailed", JobState.FAILED, "CreateFailed"),
        ("Terminated", "Terminated", JobState.CANCELLED, None),
        ("Terminating", "Terminating", JobState.STOPPING, None),
        ("Pending", "Queuing", JobState.QUEUED, None),
    ],
)
def test_phases_map_totally_and_a_failure_says_why(phase, secondary, state, message):
    status = {"phase": phase, "secondary_phase": secondary, "duration": 61000, "tasks": ["worker-0"]}
    if phase == "Failed":
        status["task_statuses"] = [
            {"task": "worker-0", "exit_code": 1, "message": "Traceback ... ValueError"}
        ]
    job = D.parse_job({**JOB, "status": status})
    assert job.state is state and job.message == message
    assert job.raw_status == (phase if secondary == phase else f"{phase}/{secondary}")


def test_a_terminated_job_is_never_a_success_and_a_failure_takes_the_last_error_event():
    from airflow_training_provider.events import explain_failure

    events = D.parse_events(
        {
            "total": 3,
            "events": [
                {
                    "time": "2025-03-01T10:02:09+08:00",
                    "level": "Info",
                    "message": "Training job is running.",
                    "source": "Job",
                },
                {
                    "time": "2025-03-01T10:03:11+08:00",
                    "level": "Info",
                    "message": "[worker-0] Training finished. Exit code 1.",
                    "source": "Task",
                },
                {
                    "time": "2025-03-01T10:03:41+08:00",
                    "level": "Error",
                    "message": "Training job failed.",
                    "source": "Job",
                },
            ],  # fmt: skip
        }
    )
    assert [(e.type, e.level) for e in events] == [("Job", "info"), ("Task", "info"), ("Job", "error")]
    failed = D.parse_job({**JOB, "status": {"phase": "Failed", "secondary_phase": "Failed"}})
    assert explain_failure(failed, events, D).message == "the job ended Failed (Job: Training job failed.)"
    assert not D.parse_job({**JOB, "status": {"phase": "Terminated"}}).state.name == "SUCCEEDED"


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (
            401,
            {"error_code": "APIGW.0301", "error_msg": "Incorrect IAM authentication information"},
            PlatformAuthError,
        ),
        (403, {"error_code": "ModelArts.0203", "error_msg": "no permission"}, PlatformAuthError),
        (404, {"error_code": "ModelArts.2762", "error_msg": "job not found"}, JobNotFoundError),
        # a gateway 404 is a wrong endpoint, never "the job is gone"
        (
            404,
            {"error_code": "APIGW.0101", "error_msg": "The API does not exist or has not been published"},
            TrainingPlatformError,
        ),
        (
            400,
            {
                "error_code": "ModelArts.2767",
                "error_msg": "The training job in phase Completed cannot be terminated.",
            },
            JobStateConflictError,
        ),
        (
            429,
            {"error_code": "APIGW.0308", "error_msg": "The throttling threshold has been reached"},
            TransientPlatformError,
        ),
        (500, {"error_code": "ModelArts.0010", "error_msg": "internal"}, TransientPlatformError),
        (400, {"error_code": "ModelArts.2755", "error_msg": "algorithm not found."}, TrainingPlatformError),
    ],  # fmt: skip
)
def test_error_bodies_map_to_the_provider_error_kinds(status, body, kind):
    err = D.classify_error(status, {}, body, json.dumps(body))
    assert type(err) is kind and err.code == body["error_code"] and err.message.startswith(body["error_msg"])


def test_spec_is_checked_before_submit_naming_the_field():
    assert D.validate_spec({**SPEC, "algorithm": {**SPEC["algorithm"], "parameters": {"epochs": 3}}})[
        "algorithm"
    ]["parameters"] == [{"name": "epochs", "value": "3"}]
    cases = {
        "algorithm": {**SPEC, "algorithm": {"command": "python x.py"}},
        "algorithm.command": {**SPEC, "algorithm": {"engine": {"image_url": "swr/x:1"}}},
        "spec.resource": {k: v for k, v in SPEC.items() if k != "spec"},
        "spec.resource.flavor_id": {**SPEC, "spec": {"resource": {"node_count": 2}}},
        "spec.resource.node_count": {**SPEC, "spec": {"resource": {"flavor_id": "f", "node_count": 0}}},
        "metadata.name": {**SPEC, "metadata": {"name": "has spaces"}},
        "algorithm.outputs.0.remote.obs.obs_url": {
            **SPEC,
            "algorithm": {
                **SPEC["algorithm"],
                "outputs": [{"name": "o", "remote": {"obs": {"obs_url": ""}}}],
            },
        },
    }
    for field_name, spec in cases.items():
        with pytest.raises(InvalidJobSpecError) as err:
            D.validate_spec(spec)
        assert err.value.field == field_name, (field_name, err.value)


def test_identity_goes_into_annotations_and_the_name_the_search_finds():
    task = [
        "airflow-deployment:prod",
        "airflow-dag:d",
        "airflow-run:r1",
        "airflow-task:train",
        "airflow-map:-1",
    ]
    tagged = D.with_tags(
        {**SPEC, "metadata": {"name": "nightly", "annotations": {"team": "ml"}}}, [*task, "airflow-try:2"]
    )
    digest = modelarts.identity_digest(task)
    assert tagged["metadata"]["name"] == f"nightly-{digest}-t2" and len(digest) == 8
    assert tagged["metadata"]["annotations"] == {
        "team": "ml",
        **dict(t.split(":", 1) for t in [*task, "airflow-try:2"]),
    }
    search = D.list_request(task).body
    assert search["filters"] == [
        {"key": "phase", "operator": "in", "value": ["Creating", "Pending", "Running"]},
        {"key": "name", "operator": "like", "value": [digest]},
    ]
    assert D.list_request(["airflow-deployment:prod"]).body["filters"][1:] == []  # the reaper: every live job
    long = modelarts.job_name("x" * 80, [*task, "airflow-try:12"])
    assert len(long) == 64 and long.endswith(f"-{digest}-t12")


def test_resume_points_a_resume_from_input_at_the_checkpoint_location():
    spec = D.resume_spec(SPEC, JOB_ID, Checkpoint(id="checkpoints", kind="location", path="/bucket/ckpt/"))
    assert spec["algorithm"]["inputs"][-1] == {
        "name": "resume_from",
        "remote": {"obs": {"obs_url": "/bucket/ckpt/"}},
    }
    assert spec["algorithm"]["outputs"] == SPEC["algorithm"]["outputs"]
    assert D.resume_spec(SPEC, JOB_ID, Checkpoint(id="c")) is None


def test_connection_gives_the_project_root_and_refuses_what_is_missing():
    from airflow.sdk.definitions.connection import Connection

    def conn(**override):
        values = {**CONNECTION, **override}
        extra = values.pop("extra")
        return Connection(conn_id="ma", extra=json.dumps(extra), **values)

    resolved = PlatformConnection.resolve(conn())
    assert resolved.base_url == f"https://modelarts.cn-north-4.myhuaweicloud.com/v2/{PROJECT}"
    local = PlatformConnection.resolve(conn(host="http://127.0.0.1:8765"))
    assert local.base_url == f"http://127.0.0.1:8765/v2/{PROJECT}"
    with pytest.raises(PlatformAuthError, match="project_id"):
        PlatformConnection.resolve(conn(extra={"region": "cn-north-4"}))
    with pytest.raises(PlatformAuthError, match="auth_token"):
        PlatformConnection.resolve(conn(login=None, password=None))
    token = PlatformConnection.resolve(
        conn(login=None, password=None, extra={"project_id": PROJECT, "auth_token": "tok"})
    )
    http = prepare_request(D, token.base_url, D.get_request(JOB_ID), token.credentials)
    assert http.headers["X-Auth-Token"] == "tok" and "Authorization" not in http.headers
    assert "modelarts-sk-example" not in repr(resolved) and "tok" not in repr(token.credentials)


def _signed(request, token: str | None = None, secret: str = "modelarts-sk-example"):
    """A request prepared and signed by Huawei's signer, as the local platform receives it."""
    from airflow.sdk.definitions.connection import Connection

    extra = {"project_id": PROJECT, **({"security_token": token} if token else {})}
    conn = Connection(conn_id="ma", conn_type="modelarts", host="http://127.0.0.1:8765", login="HWAKEXAMPLE",
                      password=secret, extra=json.dumps(extra))  # fmt: skip
    resolved = PlatformConnection.resolve(conn)
    return prepare_request(D, resolved.base_url, request, resolved.credentials)


def _as_received(http):
    from urllib.parse import parse_qsl, urlsplit

    url = urlsplit(http.url)
    headers = {k.lower(): v for k, v in http.headers.items()}
    return SimpleNamespace(
        method=http.method,
        url=SimpleNamespace(path=url.path),
        headers=headers,
        query_params=SimpleNamespace(multi_items=lambda: parse_qsl(url.query, keep_blank_values=True)),
    )


@pytest.mark.parametrize(
    "request_",
    [
        D.get_request(JOB_ID),
        D.cancel_request(JOB_ID, None),
        D.create_request(SPEC),
        D.list_request(["airflow-deployment:x"]),
        D.events_request(JOB_ID),
    ],
    ids=["show", "terminate", "create", "search", "events"],
)
@pytest.mark.parametrize("token", [None, "temporary-security-token"])
def test_huaweis_signer_and_the_local_check_agree(request_, token):
    http = _signed(request_, token)
    assert http.headers["Authorization"].startswith("SDK-HMAC-SHA256 Access=HWAKEXAMPLE, SignedHeaders=")
    assert http.headers["X-Project-Id"] == PROJECT and ("X-Security-Token" in http.headers) is bool(token)
    received = _as_received(http)
    signing.verify(received, http.body, ("HWAKEXAMPLE", "modelarts-sk-example"))
    with pytest.raises(ApiError) as err:  # the wrong secret key
        signing.verify(received, http.body, ("HWAKEXAMPLE", "another-sk"))
    assert (err.value.status, err.value.code) == (401, "APIGW.0301")
    with pytest.raises(ApiError):  # a changed body or path
        signing.verify(received, http.body + b" ", ("HWAKEXAMPLE", "modelarts-sk-example"))


# the local platform's answer for a stopped user-code job (docs/platforms/modelarts.md): the real API has
# no such field, so a real answer says nothing (None) and keeps only the checkpoint location
@pytest.mark.parametrize(
    ("field", "written", "final_id", "path", "text"),
    [
        (None, None, None, "/bucket/ckpt/", "final checkpoint None (/bucket/ckpt/)"),
        (
            {"written": True, "files": ["checkpoint.json"], "at": 1740825000.0},
            True,
            "checkpoint.json",
            "/bucket/ckpt/checkpoint.json",
            "final checkpoint written after the stop: /bucket/ckpt/checkpoint.json",
        ),
        (
            {"written": False, "files": [], "at": None},
            False,
            None,
            "/bucket/ckpt/",
            "no final checkpoint written after the stop; checkpoints at /bucket/ckpt/",
        ),
    ],
    ids=["real", "written", "none-written"],
)
def test_a_stopped_job_says_whether_its_program_wrote_a_checkpoint_after_the_stop(
    field, written, final_id, path, text
):
    body = {**JOB, "status": {**JOB["status"], "phase": "Terminated", "secondary_phase": "Terminated"}}
    job = D.parse_job({**body, LOCAL_FINAL_CHECKPOINT_FIELD: field} if field else body)
    assert job.state is JobState.CANCELLED and job.final_checkpoint_written is written
    result = complete_cancel_result(CancelResult(job_id=job.id, state=JobState.STOPPING), job)
    assert (result.state, result.final_checkpoint_written) == (JobState.CANCELLED, written)
    assert (result.final_checkpoint_id, result.final_checkpoint_path) == (final_id, path)
    assert result.final_checkpoint_text() == text
    if written:
        assert job.final_checkpoint.created_at == datetime(2025, 3, 1, 10, 30, tzinfo=UTC)


def test_the_batch_status_read_searches_the_jobs_not_ended_newest_first():
    request = D.status_batch_request(["a", "b"], None, datetime(2025, 3, 1, tzinfo=UTC))
    assert (request.method, request.path) == ("POST", "/training-job-searches")
    assert request.body == {
        "offset": 0,
        "limit": 50,
        "sort_by": "create_time",
        "order": "desc",
        "filters": [
            {"key": "phase", "operator": "in", "value": ["Creating", "Pending", "Running", "Terminating"]}
        ],
    }
    assert D.status_batch_request(["a"], "2").body["offset"] == 2  # a page index, not an item offset
    assert D.batch_size >= 10_000 and D.batch_rows_complete is True


def test_a_batch_page_reads_whole_jobs_and_asks_the_next_page_while_count_says_more():
    items = [{**JOB, "metadata": {**JOB["metadata"], "id": f"j{i}"}} for i in range(50)]
    page = D.parse_status_batch({"total": 400, "count": 120, "limit": 50, "offset": 1, "items": items}, "1")
    assert len(page.jobs) == 50 and page.next_page == "2"
    assert page.jobs[0].model_dump(exclude={"id"}) == D.parse_job(JOB).model_dump(exclude={"id"})
    last = D.parse_status_batch({"total": 400, "count": 120, "items": items[:20]}, "2")
    assert len(last.jobs) == 20 and last.next_page is None
    # without count: while a page is full
    assert D.parse_status_batch({"items": items}).next_page == "1"
    assert D.parse_status_batch({"items": items[:3]}).next_page is None
