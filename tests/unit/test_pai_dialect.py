"""The PAI (PaiStudio 2022-01-12) dialect on documented payloads, and the ACS3-HMAC-SHA256
signature: Alibaba's signer (what the provider sends) and the local platform's check must agree."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

import pytest

from airflow_training_platform.platforms.pai import acs3
from airflow_training_provider.errors import InvalidJobSpecError, TransientPlatformError
from airflow_training_provider.hooks.connection import PlatformConnection
from airflow_training_provider.hooks.transport import prepare_request
from airflow_training_provider.models import CancelResult, Checkpoint, JobState, complete_cancel_result
from airflow_training_provider.platforms import pai
from airflow_training_provider.platforms.base import LOCAL_FINAL_CHECKPOINT_FIELD, Credentials

D = pai.PaiDialect()
JOB_ID = "traindemo0001"

# platforms.md-documented bodies (PaiStudio API reference: CreateTrainingJob / GetTrainingJob)
SPEC = {
    "TrainingJobName": "af-demo-job",
    "WorkspaceId": "86995",
    "AlgorithmSpec": {
        "Image": "registry.example/trainer:1",
        "Command": ["python", "train.py"],
        "JobType": "PyTorchJob",
        "MetricDefinitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
    },
    "ComputeResource": {"EcsSpec": "ecs.gn7i-c8g1.2xlarge", "EcsCount": 1},
    "HyperParameters": [{"Name": "epochs", "Value": "3"}],
    "InputChannels": [{"Name": "train", "InputUri": "oss://bucket/data/"}],
    "OutputChannels": [
        {"Name": "model", "OutputUri": "oss://bucket/out/model/"},
        {"Name": "checkpoints", "OutputUri": "oss://bucket/out/checkpoints/"},
    ],
    "Scheduler": {"MaxRunningTimeInSeconds": 7200},
}
CREATED = {"RequestId": "6A1F0C2E-0000-4E3B-9C77-2F1D0A9B8C7D", "TrainingJobId": JOB_ID}
JOB = {
    "RequestId": "r",
    "TrainingJobId": JOB_ID,
    "TrainingJobName": "af-demo-job",
    "WorkspaceId": "86995",
    "Status": "Running",
    "ReasonCode": "",
    "ReasonMessage": "",
    "StatusTransitions": [
        {"Status": "Creating", "StartTime": "2025-03-01T10:00:00Z", "EndTime": "2025-03-01T10:01:00Z"},
        {"Status": "Running", "StartTime": "2025-03-01T10:01:00Z"},
    ],
    "LatestMetrics": [{"Name": "loss", "Timestamp": "2025-03-01T10:20:00Z", "Value": 0.52}],
    "LatestProgress": {
        "OverallProgress": {"Timestamp": "2025-03-01T10:20:00Z", "Value": 0.4},
        "RemainingTime": {"Timestamp": "2025-03-01T10:20:00Z", "Value": 1800},
    },
    "Instances": [{"Name": "traindemo0001-master-0", "Role": "master", "Status": "Running"}],
    "OutputChannels": SPEC["OutputChannels"],
    "Duration": 1200,
    "GmtCreateTime": "2025-03-01T10:00:00Z",
    "GmtModifiedTime": "2025-03-01T10:20:00Z",
}
CONNECTION = {
    "conn_type": "pai",
    "login": "LTAI5tExampleKeyId",
    "password": "pai-secret-example",
    "extra": {"region": "cn-beijing", "workspace_id": "86995"},
}


def test_running_job_reads_progress_metrics_and_checkpoint_location():
    job = D.parse_job(JOB)
    assert job.state is JobState.RUNNING and job.raw_status == "Running"
    assert job.progress.percent == 40.0 and job.progress.eta_seconds == 1800
    assert job.metrics == {"loss": 0.52}
    assert job.checkpoints == [
        Checkpoint(id="checkpoints", kind="location", path="oss://bucket/out/checkpoints/")
    ]
    assert job.artifacts == {
        "checkpoints": "oss://bucket/out/checkpoints/",
        "model": "oss://bucket/out/model/",
    }
    assert job.cost.billable_seconds == 1200
    assert job.created_at == datetime(2025, 3, 1, 10, tzinfo=UTC)
    assert job.started_at == datetime(2025, 3, 1, 10, 1, tzinfo=UTC)  # the Running transition


@pytest.mark.parametrize(
    ("status", "reason", "state"),
    [
        ("Succeed", "TrainingJobSucceed", JobState.SUCCEEDED),
        ("Failed", "TrainingJobFailed", JobState.FAILED),
        ("CreateFailed", "", JobState.FAILED),
        ("InitializeFailed", "ImagePullFailed", JobState.FAILED),
        ("Terminated", "JobStoppedByUser", JobState.CANCELLED),
        ("Stopped", "", JobState.CANCELLED),
        # the platform's own time limit ended it: a failure, never a cancel or a success
        ("Terminated", "MaxRunningTimeExceeded", JobState.FAILED),
    ],
)
def test_terminal_statuses_and_their_reason(status, reason, state):
    job = D.parse_job(
        {**JOB, "Status": status, "ReasonCode": reason, "ReasonMessage": "why" if reason else ""}
    )
    assert job.state is state
    if state is not JobState.SUCCEEDED and reason:
        assert job.message == f"{reason}: why"


def test_events_are_text_lines_with_time_and_type():
    body = {
        "Events": [
            "2025-03-01T10:00:00Z [Creating] Job created",
            "2025-03-01T10:09:00.123Z [TrainingJobFailed] OOM killed",
            "free text without a time",
        ],
        "TotalCount": "3",
    }
    events = D.parse_events(body)
    assert [(e.type, e.message, e.level) for e in events] == [
        ("Creating", "Job created", "info"),
        ("TrainingJobFailed", "OOM killed", "error"),
        ("event", "free text without a time", "info"),
    ]
    assert events[0].created_at == datetime(2025, 3, 1, 10, tzinfo=UTC)


def test_metrics_rows_group_into_points_per_epoch():
    rows = []
    for epoch, (loss, val) in enumerate([(0.9, 0.8), (0.5, 0.45)], start=1):
        at = f"2025-03-01T10:0{epoch}:00Z"
        rows += [
            {"Name": "epoch", "Value": epoch, "Timestamp": at},
            {"Name": "step", "Value": epoch * 10, "Timestamp": at},
            {"Name": "loss", "Value": loss, "Timestamp": at},
            {"Name": "validation_loss", "Value": val, "Timestamp": at},
        ]
    points = D.parse_metrics({"Metrics": rows, "TotalCount": len(rows)})
    assert [(p.step, p.epoch, p.kind, p.values) for p in points] == [
        (10, 1.0, "epoch", {"loss": 0.9, "validation_loss": 0.8}),
        (20, 2.0, "epoch", {"loss": 0.5, "validation_loss": 0.45}),
    ]


def test_throttling_retry_after_is_in_milliseconds():
    err = D.classify_error(400, {"x-acs-retry-after": "2500"}, {"Code": "Throttling.User", "Message": "m"})
    assert isinstance(err, TransientPlatformError) and err.retry_after == 2.5 and not err.sent


def test_workspace_comes_from_the_connection_or_is_named_as_missing():
    spec = {k: v for k, v in SPEC.items() if k != "WorkspaceId"}
    with pytest.raises(InvalidJobSpecError) as err:
        D.validate_spec(spec)
    assert err.value.field == "WorkspaceId" and "workspace_id" in str(err.value)
    conn = PlatformConnection.resolve(_connection())
    assert D.validate_spec({**D.spec_defaults(conn.credentials), **spec})["WorkspaceId"] == "86995"


def test_spec_needs_an_algorithm_and_an_instance_type():
    with pytest.raises(InvalidJobSpecError) as err:
        D.validate_spec({k: v for k, v in SPEC.items() if k != "AlgorithmSpec"})
    assert err.value.field == "AlgorithmSpec"
    with pytest.raises(InvalidJobSpecError) as err:
        D.validate_spec({**SPEC, "ComputeResource": {"EcsCount": 2}})
    assert err.value.field == "ComputeResource.EcsSpec"
    named = {k: v for k, v in SPEC.items() if k != "AlgorithmSpec"}
    named.update(AlgorithmName="pytorch_ddp", AlgorithmProvider="pai", AlgorithmVersion="v1")
    assert D.validate_spec(named)["AlgorithmName"] == "pytorch_ddp"


def test_labels_name_and_resume():
    tags = ["airflow-dag:retrain", "airflow-task:train", "airflow-try:2"]
    tagged = D.with_tags({**SPEC, "Labels": [{"Key": "team", "Value": "ml"}]}, tags)
    assert tagged["Labels"] == [
        {"Key": "team", "Value": "ml"},
        {"Key": "airflow-dag", "Value": "retrain"},
        {"Key": "airflow-task", "Value": "train"},
        {"Key": "airflow-try", "Value": "2"},
    ]
    assert tagged["TrainingJobName"] == "af-demo-job-t2"
    assert pai.job_name(None, tags) == "af-retrain-train-t2"
    listing = D.list_request(tags)
    assert json.loads(listing.params["Labels"]) == {
        "airflow-dag": "retrain",
        "airflow-task": "train",
        "airflow-try": "2",
    }
    resumed = D.resume_spec(SPEC, JOB_ID, Checkpoint(id="checkpoints", path="oss://bucket/old/ckpt/"))
    assert {"Name": "checkpoints", "OutputUri": "oss://bucket/old/ckpt/"} in resumed["OutputChannels"]
    assert {"Name": "model", "OutputUri": "oss://bucket/out/model/"} in resumed["OutputChannels"]


def test_the_list_covers_the_window_asked_for_newest_first_and_reads_oldest_first():
    # ListTrainingJobs lists only the last 7 days unless StartTime is sent (PaiStudio API reference)
    since = datetime(2025, 2, 1, 9, 30, tzinfo=UTC)
    listing = D.list_request(["airflow-deployment:prod"], since)
    assert listing.params["StartTime"] == "2025-02-01T09:30:00Z" and "EndTime" not in listing.params
    assert (listing.params["SortBy"], listing.params["Order"]) == ("GmtCreateTime", "DESC")
    assert "StartTime" not in D.list_request(["airflow-deployment:prod"]).params
    newest_first = {"TrainingJobs": [{**JOB, "TrainingJobId": f"train{n}"} for n in (3, 2, 1)]}
    assert [j.id for j in D.parse_list(newest_first)] == ["train1", "train2", "train3"]
    assert pai.pai_time(datetime(2025, 2, 1, 10, 30)) == "2025-02-01T10:30:00Z", "naive is UTC"


def test_endpoint_follows_the_region_including_the_exceptions():
    assert pai.endpoint_of("cn-beijing") == "https://pai.cn-beijing.aliyuncs.com"
    assert pai.endpoint_of("cn-hangzhou") == "https://pai.cn-hangzhou.data.aliyun.com"
    assert PlatformConnection.resolve(_connection()).base_url == "https://pai.cn-beijing.aliyuncs.com"
    assert D.console_url("https://pai.cn-beijing.aliyuncs.com", JOB_ID) == (
        "https://pai.console.aliyun.com/?regionId=cn-beijing#/training/jobs/traindemo0001"
    )
    assert D.console_url("http://127.0.0.1:8765", JOB_ID) is None


_CHAIN_PROBE = """
import json
from airflow.sdk.definitions.connection import Connection
from airflow_training_provider.errors import PlatformAuthError
from airflow_training_provider.hooks.connection import PlatformConnection
from airflow_training_provider.hooks.transport import prepare_request
from airflow_training_provider.platforms.pai import PaiDialect
conn = Connection(conn_id="pai_t", conn_type="pai", extra=json.dumps({"region": "cn-beijing"}))
try:
    resolved = PlatformConnection.resolve(conn)
except PlatformAuthError as exc:
    print("refused:", exc)
else:
    d = PaiDialect()
    http = prepare_request(d, resolved.base_url, d.get_request("j"), resolved.credentials)
    print("signed:", resolved.credentials.source is not None, http.headers["Authorization"])
"""


@pytest.mark.parametrize("env_key", [None, "LTAIenv"])
def test_without_an_access_key_the_credential_chain_is_asked_and_its_failure_named(env_key, tmp_path):
    """Alibaba's chain reads the environment when it is imported: each case in a fresh process."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("ALIBABA_CLOUD_")}
    env.update(ALIBABA_CLOUD_ECS_METADATA_DISABLED="true", HOME=str(tmp_path))  # no ~/.aliyun, no ECS
    if env_key:
        env.update(ALIBABA_CLOUD_ACCESS_KEY_ID=env_key, ALIBABA_CLOUD_ACCESS_KEY_SECRET="env-secret")
    out = subprocess.run(
        [sys.executable, "-c", _CHAIN_PROBE], env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout
    if env_key is None:
        assert "refused:" in out and "login (AccessKey ID)" in out and "ALIBABA_CLOUD_ACCESS_KEY_ID" in out
    else:
        assert "signed: True ACS3-HMAC-SHA256 Credential=LTAIenv," in out


@pytest.mark.parametrize("token", [None, "sts-token"])
@pytest.mark.parametrize(
    "request_",
    [
        D.get_request(JOB_ID),
        D.cancel_request(JOB_ID, None),
        D.create_request(SPEC),
        D.list_request(["airflow-dag:d e", "airflow-run:manual__2025-03-01T10:00:00+00:00"]),
    ],
    ids=["get", "stop", "create", "list"],
)
def test_alibabas_signer_and_the_local_check_agree(request_, token):
    """What Alibaba's signer produces (the provider's requests) is exactly what the local platform
    recomputes from the wire — and a different secret gives a different signature."""
    from urllib.parse import parse_qsl, urlsplit

    credentials = Credentials(access_key_id="LTAIkey", secret_access_key="s3cret", session_token=token)
    http = prepare_request(D, "https://pai.cn-beijing.aliyuncs.com", request_, credentials)
    lower = {k.lower(): v for k, v in http.headers.items()}
    auth = acs3._AUTH.match(lower["authorization"])
    assert auth and auth["key"] == "LTAIkey"
    signed = auth["headers"].split(";")
    assert {"host", "x-acs-action", "x-acs-date", "x-acs-content-sha256"} <= set(signed)
    assert ("x-acs-security-token" in signed) is (token is not None)
    assert lower["x-acs-content-sha256"] == hashlib.sha256(http.body).hexdigest()
    url = urlsplit(http.url)
    canonical = acs3.canonical_request(
        http.method, url.path, parse_qsl(url.query), lower, signed, lower["x-acs-content-sha256"]
    )
    assert acs3.signature("s3cret", canonical) == auth["signature"]
    assert acs3.signature("wrong", canonical) != auth["signature"]


def _connection(**override):
    from airflow.sdk.definitions.connection import Connection

    values = {**CONNECTION, **override}
    extra = values.pop("extra", None)
    return Connection(conn_id="pai_t", extra=json.dumps(extra) if extra else None, **values)


# the local platform's answer for a stopped user-code job (docs/platforms/pai.md): the real API has
# no such field, so a real answer says nothing (None) and keeps only the checkpoint location
@pytest.mark.parametrize(
    ("field", "written", "final_id", "path", "text"),
    [
        (
            None,
            None,
            None,
            "oss://bucket/out/checkpoints/",
            "final checkpoint None (oss://bucket/out/checkpoints/)",
        ),
        (
            {"written": True, "files": ["checkpoint.json"], "at": 1740825000.0},
            True,
            "checkpoint.json",
            "oss://bucket/out/checkpoints/checkpoint.json",
            "final checkpoint written after the stop: oss://bucket/out/checkpoints/checkpoint.json",
        ),
        (
            {"written": False, "files": [], "at": None},
            False,
            None,
            "oss://bucket/out/checkpoints/",
            "no final checkpoint written after the stop; checkpoints at oss://bucket/out/checkpoints/",
        ),
    ],
    ids=["real", "written", "none-written"],
)
def test_a_stopped_job_says_whether_its_program_wrote_a_checkpoint_after_the_stop(
    field, written, final_id, path, text
):
    body = {**JOB, "Status": "Terminated", "ReasonCode": "JobStoppedByUser"}
    job = D.parse_job({**body, LOCAL_FINAL_CHECKPOINT_FIELD: field} if field else body)
    assert job.state is JobState.CANCELLED and job.final_checkpoint_written is written
    result = complete_cancel_result(CancelResult(job_id=job.id, state=JobState.STOPPING), job)
    assert (result.state, result.final_checkpoint_written) == (JobState.CANCELLED, written)
    assert (result.final_checkpoint_id, result.final_checkpoint_path) == (final_id, path)
    assert result.final_checkpoint_text() == text
    if written:
        assert job.final_checkpoint.created_at == datetime(2025, 3, 1, 10, 30, tzinfo=UTC)


def test_the_batch_status_read_lists_the_jobs_since_the_oldest_waiting_one_newest_first():
    request = D.status_batch_request(["a", "b"], None, datetime(2025, 3, 1, 10, 0, 30, 500000, tzinfo=UTC))
    assert (request.method, request.path, request.headers["x-acs-action"]) == (
        "GET",
        "/api/v1/trainingjobs",
        "ListTrainingJobs",
    )
    assert request.params == {
        "PageSize": 100,
        "PageNumber": 1,
        "SortBy": "GmtCreateTime",
        "Order": "DESC",
        "StartTime": "2025-03-01T10:00:30Z",
    }
    assert D.status_batch_request(["a"], "3").params["PageNumber"] == 3
    assert "StartTime" not in D.status_batch_request(["a"]).params  # PAI's 7 days
    assert D.batch_size >= 10_000 and D.batch_rows_complete is False


def test_a_batch_page_reads_its_rows_and_asks_the_next_page_while_it_is_full():
    row = {k: v for k, v in JOB.items() if k not in ("RequestId", "LatestMetrics", "Instances")}
    full = {"TrainingJobs": [{**row, "TrainingJobId": f"j{i}"} for i in range(100)], "TotalCount": 250}
    page = D.parse_status_batch(full, "2")
    assert len(page.jobs) == 100 and page.jobs[0].id == "j0" and page.jobs[0].state is JobState.RUNNING
    assert page.jobs[0].metrics == {}, "a list row has no LatestMetrics"
    assert page.next_page == "3"
    last = D.parse_status_batch({"TrainingJobs": [row], "TotalCount": 201}, "3")
    assert [j.id for j in last.jobs] == [JOB_ID] and last.next_page is None
    assert D.parse_status_batch({"TrainingJobs": [], "TotalCount": 0}).next_page is None
