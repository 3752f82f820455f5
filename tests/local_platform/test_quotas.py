"""The local platform's API quotas and request counts (``/_local/quotas``, ``/_local/requests``):
each platform throttles past its quota the way that platform does — status, error body, retry
headers — and its official client sees a throttle; a throttled request never reaches the handler
(a throttled create creates nothing); windows reset; every request is counted per route, job and
class, ``/_local`` never."""

from __future__ import annotations

import time
import uuid

import boto3
import httpx
import pytest
import together
from alibabacloud_tea_openapi.exceptions import ClientException
from botocore.config import Config
from botocore.exceptions import ClientError
from huaweicloudsdkcore.exceptions.exceptions import ClientRequestException
from huaweicloudsdkmodelarts.v1 import model as m

from airflow_training_platform.cli import build_parser
from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.quotas import QuotaError, RequestMeter, parse_quotas
from airflow_training_platform.server import LocalPlatformServer
from tests.conftest import API_KEY, AWS_ACCESS_KEY_ID, MODELARTS_PROJECT_ID, server_options
from tests.local_platform import test_modelarts_api as modelarts
from tests.local_platform import test_pai_api as pai
from tests.local_platform.test_sagemaker_api import body as sagemaker_create_body

PLATFORMS = ("sagemaker", "modelarts", "tensorone", "pai", "together")
BEARER = {"Authorization": f"Bearer {API_KEY}"}
MINUTE = {"window_seconds": 60}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    srv = LocalPlatformServer(
        str(tmp_path_factory.mktemp("quotas")), gpus=1, seconds_per_epoch=0.2, **server_options()
    ).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def control(server) -> LocalPlatformControl:
    return LocalPlatformControl(server.url)


@pytest.fixture(scope="module")
def tensorone_job(server) -> str:
    """One TensorOne job, created before any quota."""
    answer = httpx.post(
        f"{server.url}/v2/training/jobs",
        headers=BEARER,
        json={"name": "q", "config": {"training": {"epochs": 1}}},
    )
    assert answer.status_code == 201, answer.text
    return answer.json()["jobId"]


@pytest.fixture
def quotas(control):
    """Set quotas for one test (counts reset); every quota is removed after it."""
    control.reset_requests()
    yield control.set_quotas
    control.clear_quotas()


def aws(server, service: str):
    """boto3's client, its own retries off: one call, one request."""
    return boto3.client(
        service,
        endpoint_url=server.url,
        region_name="us-east-1",
        aws_access_key_id=AWS_ACCESS_KEY_ID,
        aws_secret_access_key=API_KEY,
        config=Config(retries={"mode": "standard", "total_max_attempts": 1}),
    )


def test_tensorone_answers_429_with_its_rate_limit_headers_and_counts_each_request(
    server, control, quotas, tensorone_job
):
    quotas(
        {
            "tensorone": {
                "read": {"limit": 3, **MINUTE},
                "create": {"limit": 0, **MINUTE},
                "write": {"limit": 0, **MINUTE},
            }
        }
    )
    jobs_before = len(control.jobs(platform="tensorone"))
    url = f"{server.url}/v2/training/jobs"

    refused = httpx.post(url, headers=BEARER, json={"name": "never", "config": {"training": {"epochs": 1}}})
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"] == "RATE_LIMIT_EXCEEDED" and refused.json()["code"] == 429
    assert refused.headers["X-RateLimit-Limit"] == "0" and refused.headers["X-RateLimit-Remaining"] == "0"
    assert len(control.jobs(platform="tensorone")) == jobs_before, "a throttled create created a job"

    answers = [httpx.get(f"{url}/{tensorone_job}", headers=BEARER) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert [a.headers["X-RateLimit-Remaining"] for a in answers] == ["2", "1", "0", "0"]
    assert {a.headers["X-RateLimit-Limit"] for a in answers} == {"3"}
    assert {a.headers["X-RateLimit-Window"] for a in answers} == {"60"}
    throttled = answers[-1]
    reset = int(throttled.headers["X-RateLimit-Reset"])
    assert 0 < reset - time.time() <= 61 and 1 <= int(throttled.headers["Retry-After"]) <= 60
    assert throttled.json()["details"] == {
        "limit": 3,
        "window": 60.0,
        "retryAfter": int(throttled.headers["Retry-After"]),
    }
    assert "Retry-After" not in answers[0].headers

    cancel = httpx.post(f"{url}/{tensorone_job}/cancel", headers=BEARER, json={})  # a write
    assert cancel.status_code == 429 and cancel.headers["X-RateLimit-Limit"] == "0", cancel.text
    assert control.job(tensorone_job)["cancel_requests"] == [], "a throttled cancel reached the job"

    counts = control.requests()["tensorone"]
    assert counts == {
        "total": 6,
        "throttled": 3,
        "by_class": {"create": 1, "read": 4, "write": 1},
        "throttled_by_class": {"create": 1, "read": 1, "write": 1},
        "by_route": {
            "POST /v2/training/jobs": 1,
            "GET /v2/training/jobs/{job_id}": 4,
            "POST /v2/training/jobs/{job_id}/cancel": 1,
        },
        "by_job": {tensorone_job: 5},
    }
    read = control.quotas()["tensorone"]["read"]
    assert (read["limit"], read["used"], read["remaining"]) == (3, 3, 0) and abs(
        read["reset_at"] - reset
    ) <= 1


@pytest.mark.exclusive
def test_a_window_resets_after_its_seconds(server, control, quotas, tensorone_job):
    quotas({"tensorone": {"read": {"limit": 2, "window_seconds": 1.5}}})
    url = f"{server.url}/v2/training/jobs/{tensorone_job}"
    assert [httpx.get(url, headers=BEARER).status_code for _ in range(3)] == [200, 200, 429]
    reset_at = control.quotas()["tensorone"]["read"]["reset_at"]
    time.sleep(max(0.0, reset_at - time.time()) + 0.05)
    again = httpx.get(url, headers=BEARER)
    assert again.status_code == 200 and again.headers["X-RateLimit-Remaining"] == "1"
    assert control.quotas()["tensorone"]["read"]["used"] == 1


def test_sagemaker_throttles_with_400_throttling_exception_boto3_reads(server, control, quotas):
    quotas({"sagemaker": {"read": {"limit": 1, **MINUTE}, "create": {"limit": 0, **MINUTE}}})
    sm, logs, s3 = aws(server, "sagemaker"), aws(server, "logs"), aws(server, "s3")
    name = f"quota-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ClientError) as missing:  # the one read of the window: it reaches the handler
        sm.describe_training_job(TrainingJobName=name)
    assert missing.value.response["Error"]["Code"] == "ValidationException"
    for call in (
        lambda: sm.describe_training_job(TrainingJobName=name),
        lambda: sm.create_training_job(**sagemaker_create_body(name)),
        lambda: logs.get_log_events(
            logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=f"{name}/algo-1-1"
        ),
    ):
        with pytest.raises(ClientError) as throttled:
            call()
        response = throttled.value.response
        assert response["Error"] == {"Code": "ThrottlingException", "Message": "Rate exceeded"}, response
        assert response["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert "retry-after" not in response["ResponseMetadata"]["HTTPHeaders"]
    assert control.jobs(name=name) == [], "a throttled CreateTrainingJob created the job"
    s3.list_buckets()  # S3 and STS are other services: neither metered nor counted

    counts = control.requests()["sagemaker"]
    assert counts["by_route"] == {"DescribeTrainingJob": 2, "CreateTrainingJob": 1, "GetLogEvents": 1}
    assert counts["by_job"] == {name: 4}
    assert counts["by_class"] == {"read": 3, "create": 1} and counts["throttled_by_class"] == {
        "read": 2,
        "create": 1,
    }
    assert (counts["total"], counts["throttled"]) == (4, 3)


def test_pai_throttles_with_400_throttling_user_in_its_error_body(server, control, quotas):
    quotas({"pai": {"read": {"limit": 0, **MINUTE}, "create": {"limit": 0, **MINUTE}}})
    client = pai.client(server)
    with pytest.raises(ClientException) as read:  # Alibaba's client: no retries unless asked
        client.get_training_job("train-quota-1")
    assert (read.value.status_code, read.value.code) == (400, "Throttling.User")
    name = f"quota-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ClientException) as created:
        pai.create(client, name)
    assert created.value.code == "Throttling.User"
    assert control.jobs(platform="pai", name=name) == []

    raw = httpx.get(f"{server.url}/api/v1/trainingjobs/train-quota-1", headers={"Authorization": "any"})
    assert raw.status_code == 400
    assert raw.json()["Code"] == "Throttling.User"
    assert raw.json()["Message"] == "Request was denied due to user flow control."
    assert raw.json()["RequestId"] == raw.headers["X-Request-ID"]
    assert "x-acs-retry-after" not in raw.headers and "retry-after" not in raw.headers

    counts = control.requests()["pai"]
    assert counts["by_route"] == {"GET /api/v1/trainingjobs/{job_id}": 2, "POST /api/v1/trainingjobs": 1}
    assert counts["by_job"] == {"train-quota-1": 2}
    assert (counts["total"], counts["throttled"]) == (3, 3)


def test_modelarts_throttles_with_429_modelarts_2799_and_retry_after(server, control, quotas):
    quotas({"modelarts": {"read": {"limit": 0, **MINUTE}, "create": {"limit": 0, **MINUTE}}})
    client = modelarts.client(server)  # retry_times 0: Huawei's core gives up on the first 429
    with pytest.raises(ClientRequestException) as read:
        client.show_training_job_details(m.ShowTrainingJobDetailsRequest(training_job_id="quota-job"))
    assert read.value.status_code == 429
    with pytest.raises(ClientRequestException) as created:
        modelarts.create(client, f"quota-{uuid.uuid4().hex[:8]}")
    assert created.value.status_code == 429
    assert control.jobs(platform="modelarts") == []

    path = f"/v2/{MODELARTS_PROJECT_ID}/training-jobs/quota-job"
    raw = httpx.get(server.url + path, headers={"X-Auth-Token": "any"})
    assert raw.status_code == 429 and raw.json()["error_code"] == "ModelArts.2799"
    unmetered = httpx.delete(server.url + path, headers={"X-Auth-Token": "any"})  # writes: no quota
    assert unmetered.status_code == 404, unmetered.text
    assert 1 <= int(raw.headers["Retry-After"]) <= 60 and raw.json()["request_id"]

    counts = control.requests()["modelarts"]
    assert counts["by_route"] == {
        "GET /v2/{project_id}/training-jobs/{job_id}": 2,
        "POST /v2/{project_id}/training-jobs": 1,
        "DELETE /v2/{project_id}/training-jobs/{job_id}": 1,
    }
    assert counts["by_job"] == {"quota-job": 3}
    assert counts["by_class"] == {"read": 2, "create": 1, "write": 1} and counts["throttled"] == 3


def test_together_throttles_with_429_dynamic_request_limited_and_ratelimit_reset(server, control, quotas):
    quotas({"together": {"read": {"limit": 1, **MINUTE}, "write": {"limit": 0, **MINUTE}}})
    client = together.Together(api_key=API_KEY, base_url=server.url, max_retries=0, timeout=10)
    with pytest.raises(together.NotFoundError):
        client.fine_tuning.retrieve("ft-quota")
    with pytest.raises(together.RateLimitError) as read:
        client.fine_tuning.retrieve("ft-quota")
    assert read.value.status_code == 429
    with pytest.raises(together.RateLimitError):
        client.fine_tuning.cancel("ft-quota")

    raw = httpx.get(f"{server.url}/v1/fine-tunes/ft-quota/events", headers=BEARER)
    assert raw.status_code == 429
    error = raw.json()["error"]
    assert (error["type"], error["code"]) == ("dynamic_request_limited", "dynamic_request_limited")
    assert 1 <= int(raw.headers["x-ratelimit-reset"]) <= 60 and "retry-after" not in raw.headers

    counts = control.requests()["together"]
    assert counts["by_route"] == {
        "GET /v1/fine-tunes/{job_id}": 2,
        "POST /v1/fine-tunes/{job_id}/cancel": 1,
        "GET /v1/fine-tunes/{job_id}/events": 1,
    }
    assert counts["by_job"] == {"ft-quota": 4}
    assert counts["throttled_by_class"] == {"read": 2, "write": 1}


def test_local_endpoints_are_never_metered_nor_counted(server, control, quotas):
    quotas({name: {"read": {"limit": 0, **MINUTE}, "write": {"limit": 0, **MINUTE}} for name in PLATFORMS})
    for _ in range(3):
        assert httpx.get(f"{server.url}/_local/health").status_code == 200
        control.jobs()
        control.add_fault(path_prefix="/nowhere", status=503, count=0)
    control.clear_faults(path_prefix="/nowhere")
    assert control.requests() == {}


def test_quotas_are_replaced_listed_and_cleared_and_bad_ones_refused(server, control, quotas):
    shown = quotas({"tensorone": "documented", "pai": {"read": {"limit": 50, "window_seconds": 1}}})
    assert {c: (q["limit"], q["window_seconds"]) for c, q in shown["tensorone"].items()} == {
        "read": (500, 3600.0),
        "create": (10, 3600.0),
        "write": (50, 3600.0),
    }
    assert shown["pai"]["read"] == {
        "limit": 50,
        "window_seconds": 1.0,
        "used": 0,
        "remaining": 50,
        "reset_at": None,
    }
    assert set(quotas({"together": {"create": {"limit": 1, **MINUTE}}})) == {"together"}, "a PUT replaces"
    for bad, says in (
        ({"nowhere": {"read": {"limit": 1, **MINUTE}}}, "unknown platform"),
        ({"pai": {"reads": {"limit": 1, **MINUTE}}}, "unknown route class"),
        ({"pai": {"read": {"limit": -1, **MINUTE}}}, "pai.read.limit"),
        ({"pai": {"read": {"limit": 1, "window_seconds": 0}}}, "pai.read.window_seconds"),
        ({"pai": "documented"}, "no preset"),
    ):
        answer = httpx.put(f"{server.url}/_local/quotas", json=bad)
        assert answer.status_code == 400 and says in answer.json()["message"], answer.text
    control.clear_quotas()
    assert control.quotas() == {}


def test_the_setting_reads_compact_json_and_preset_forms_and_is_a_serve_flag():
    compact = parse_quotas("tensorone:read=500/3600,create=10/3600; sagemaker:read=20/1", PLATFORMS)
    assert {p: {c: (q.limit, q.window_seconds) for c, q in v.items()} for p, v in compact.items()} == {
        "tensorone": {"read": (500, 3600.0), "create": (10, 3600.0)},
        "sagemaker": {"read": (20, 1.0)},
    }
    assert parse_quotas("tensorone=documented", PLATFORMS)["tensorone"]["create"].limit == 10
    assert (
        parse_quotas('{"pai": {"write": {"limit": 5, "window_seconds": 2}}}', PLATFORMS)["pai"]["write"].limit
        == 5
    )
    assert parse_quotas(None, PLATFORMS) == {}
    for bad in ("tensorone:read=500", "tensorone:read=x/1", "gcp:read=1/1", "tensorone=nothing"):
        with pytest.raises(QuotaError):
            parse_quotas(bad, PLATFORMS)
    args = build_parser().parse_args(["serve", "--data-dir", "d", "--quotas", "tensorone=documented"])
    assert args.quotas == "tensorone=documented"


def test_fixed_windows_open_with_the_first_request_and_count_again_at_their_reset():
    now = [1000.0]
    meter = RequestMeter(parse_quotas("pai:read=2/10", PLATFORMS), clock=lambda: now[0])
    assert meter.quotas()["pai"]["read"]["reset_at"] is None
    states = []
    for at in (1000.0, 1004.0, 1009.9, 1010.0, 1011.0, 1011.5):
        now[0] = at
        states.append(meter.admit("pai", "read", "GET /x", None))
    assert [(s.throttled, s.remaining, s.reset_at) for s in states] == [
        (False, 1, 1010.0),
        (False, 0, 1010.0),
        (True, 0, 1010.0),
        (False, 1, 1020.0),  # a new window: opened by this request
        (False, 0, 1020.0),
        (True, 0, 1020.0),
    ]
    assert states[2].retry_after(now=1009.9) == 1 and states[5].retry_after(now=1011.5) == 9
    assert meter.admit("pai", "write", "PUT /x", "j") is None, "a class without a quota is only counted"
    now[0] = 1020.0
    assert meter.quotas()["pai"]["read"] == {
        "limit": 2,
        "window_seconds": 10.0,
        "used": 0,
        "remaining": 2,
        "reset_at": None,
    }
    counts = meter.requests()["platforms"]["pai"]
    assert (counts["total"], counts["throttled"], counts["by_job"]) == (7, 2, {"j": 1})
    meter.reset_requests()
    assert meter.requests() == {"platforms": {}}
