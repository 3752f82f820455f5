"""Request preparation, response classification and retry policy (pure logic)."""

from __future__ import annotations

import pytest
from tenacity import Retrying

from airflow_training_provider.errors import JobStateConflictError, TransientPlatformError
from airflow_training_provider.hooks.connection import base_url_of
from airflow_training_provider.hooks.transport import (
    PreparedRequests,
    RetryPolicy,
    decode_response,
    join_url,
    prepare_request,
    retry_after_seconds,
)
from airflow_training_provider.platforms.base import ApiRequest, Credentials, HttpRequest
from airflow_training_provider.platforms.tensorone import TensorOneDialect

D = TensorOneDialect()
GET = ApiRequest("GET", "/v2/training/jobs/j")
CREATE = ApiRequest("POST", "/v2/training/jobs", body={}, idempotent=False)


def test_ok_body_decoded():
    assert decode_response(D, GET, 200, {}, '{"a": 1}') == {"a": 1}


def test_a_body_is_decoded_from_bytes_and_an_error_text_from_bytes_too():
    assert decode_response(D, GET, 200, {}, b'{"a": "\xc3\xa9"}') == {"a": "é"}
    with pytest.raises(TransientPlatformError, match="malformed.*oops"):
        decode_response(D, GET, 200, {}, b"<html>oops \xff")
    with pytest.raises(JobStateConflictError, match="done"):
        decode_response(D, GET, 409, {}, b'{"error": "STATE_CONFLICT", "message": "done"}')


def test_a_bearer_request_polled_again_is_prepared_once_a_signed_one_every_time():
    from airflow_training_provider.platforms.sagemaker import SageMakerDialect

    bearer = PreparedRequests(D, "http://p", Credentials(api_key="k"))
    first = bearer(GET)
    assert bearer(GET) is first and first.headers["Authorization"] == "Bearer k"
    assert bearer(ApiRequest("GET", "/v2/training/jobs/j")) is not first  # another request object
    sagemaker = SageMakerDialect()
    signed = PreparedRequests(
        sagemaker,
        "http://p",
        Credentials(access_key_id="AKIDEXAMPLE", secret_access_key="s", region="us-east-1"),
    )
    describe = sagemaker.get_request("job-1")
    assert not signed.reusable and signed(describe) is not signed(describe)


def test_malformed_2xx_body_is_transient():
    with pytest.raises(TransientPlatformError, match="malformed"):
        decode_response(D, GET, 200, {}, "<html>oops")


def test_a_poll_body_is_read_by_the_request_reader_and_one_that_is_not_a_job_is_transient():
    from dataclasses import replace

    poll = replace(D.get_request("j"), reader=D.read_poll)
    job = decode_response(D, poll, 200, {}, b'{"jobId": "j", "status": "running", "checkpoints": [{}]}')
    assert (job.id, job.state.value, job.checkpoints) == ("j", "running", [])
    with pytest.raises(TransientPlatformError, match=r"malformed.*GET /v2/training/jobs/j.*validation error"):
        decode_response(D, poll, 200, {}, b'{"jobId": "j"}')  # JSON, but no status
    with pytest.raises(TransientPlatformError, match="malformed"):
        decode_response(D, poll, 200, {}, b"<html>oops")
    with pytest.raises(JobStateConflictError):  # an error answer is classified as before, unread
        decode_response(D, poll, 409, {}, b'{"error": "STATE_CONFLICT", "message": "done"}')


def test_429_is_transient_with_retry_after_and_not_processed():
    with pytest.raises(TransientPlatformError) as err:
        decode_response(
            D, GET, 429, {"Retry-After": "7"}, '{"error": "RATE_LIMIT_EXCEEDED", "message": "slow down"}'
        )
    assert (
        err.value.retry_after == 7.0 and err.value.sent is False and err.value.code == "RATE_LIMIT_EXCEEDED"
    )


@pytest.mark.parametrize("status", [500, 502, 503, 504, 408])
def test_5xx_transient(status):
    with pytest.raises(TransientPlatformError):
        decode_response(D, GET, status, {}, "")


def test_409_is_definite():
    with pytest.raises(JobStateConflictError):
        decode_response(D, GET, 409, {}, '{"error": "STATE_CONFLICT", "message": "done"}')


def test_retry_after_http_date_and_garbage():
    assert retry_after_seconds({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert retry_after_seconds({"Retry-After": "soon"}) is None
    assert retry_after_seconds({}) is None


FAST = RetryPolicy(initial_backoff=0.0, max_backoff=0.0, max_attempts=4)


def _run(request, errors, policy=FAST):
    calls = []

    def fn():
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return "ok"

    kwargs = policy.tenacity_kwargs(request)
    kwargs["sleep"] = lambda s: None
    result = Retrying(**kwargs)(fn)
    return result, len(calls)


def test_idempotent_call_retries_transient_errors():
    assert _run(GET, [TransientPlatformError("503"), TransientPlatformError("reset")]) == ("ok", 3)


def test_create_not_resent_after_it_may_have_landed():
    with pytest.raises(TransientPlatformError):
        _run(CREATE, [TransientPlatformError("read timeout", sent=True)])


def test_create_resent_when_it_surely_did_not_land():
    assert _run(CREATE, [TransientPlatformError("refused", sent=False)]) == ("ok", 2)


def test_wait_honours_retry_after():
    policy = RetryPolicy(initial_backoff=0.0, max_backoff=0.0, max_attempts=3)
    waits = []
    kwargs = policy.tenacity_kwargs(GET)
    kwargs["sleep"] = waits.append
    attempts = iter([TransientPlatformError("429", retry_after=3.5)])

    def fn():
        exc = next(attempts, None)
        if exc:
            raise exc
        return "ok"

    assert Retrying(**kwargs)(fn) == "ok"
    assert waits == [3.5]


def test_budget_retries_for_seconds_not_attempts():
    kwargs = FAST.tenacity_kwargs(ApiRequest("GET", "/x", budget=0.0))
    kwargs["sleep"] = lambda s: None
    with pytest.raises(TransientPlatformError):  # a zero budget: the first failure ends it
        Retrying(**kwargs)(lambda: (_ for _ in ()).throw(TransientPlatformError("503")))


@pytest.mark.parametrize(
    ("base", "path", "params", "url"),
    [
        ("http://h:1", "/v2/jobs", None, "http://h:1/v2/jobs"),
        ("http://h:1/", "/v2/jobs", None, "http://h:1/v2/jobs"),
        ("https://h/api/", "v2/jobs", None, "https://h/api/v2/jobs"),
        ("http://h", "/", None, "http://h/"),
        (
            "http://h",
            "/j",
            [("tag", "a:b"), ("tag", "c d"), ("limit", 100)],
            "http://h/j?tag=a%3Ab&tag=c+d&limit=100",
        ),
        ("http://h", "/j", {"includeMetrics": True}, "http://h/j?includeMetrics=true"),
    ],
)
def test_join_url(base, path, params, url):
    assert join_url(base, path, params) == url


@pytest.mark.parametrize(
    ("host", "schema", "port", "url"),
    [
        (None, None, None, "https://default.example"),
        ("", "", None, "https://default.example"),
        ("http://127.0.0.1:8765", None, None, "http://127.0.0.1:8765"),
        ("http://127.0.0.1:8765/", None, None, "http://127.0.0.1:8765"),
        ("127.0.0.1", None, 8765, "http://127.0.0.1:8765"),
        ("localhost:8765", None, None, "http://localhost:8765"),
        ("api.example.com", None, None, "https://api.example.com"),
        ("api.example.com", "http", 8080, "http://api.example.com:8080"),
        ("api.example.com", "airflow", None, "https://api.example.com"),  # URI path, not a scheme
        ("https://api.example.com/prefix/", None, 443, "https://api.example.com:443/prefix"),
        ("https://api.example.com:9000", None, 443, "https://api.example.com:9000"),
    ],
)
def test_base_url_of_every_connection_form(host, schema, port, url):
    assert base_url_of(host, schema, port, "https://default.example/") == url


class _Signing(TensorOneDialect):
    """Records what it was asked to sign."""

    seen: list[HttpRequest] = []

    def authenticate(self, request, credentials):
        self.seen.append(request)
        return {"Authorization": f"Sig {credentials.access_key_id}:{len(request.body)}"}


def test_prepare_request_signs_the_exact_bytes_sent():
    dialect = _Signing()
    request = ApiRequest(
        "POST", "/", body={"b": 1, "a": [1, 2]}, params={"x": "1"}, headers={"X-Amz-Target": "S.Op"},
        content_type="application/x-amz-json-1.1",
    )  # fmt: skip
    http = prepare_request(dialect, "https://h/", request, Credentials(access_key_id="AK"))
    assert http.url == "https://h/?x=1"
    assert http.body == b'{"b":1,"a":[1,2]}'
    assert http.headers["Content-Type"] == "application/x-amz-json-1.1"
    assert http.headers["X-Amz-Target"] == "S.Op"
    assert http.headers["Authorization"] == "Sig AK:17"
    seen = dialect.seen[-1]
    assert seen.body is http.body and seen.timestamp.tzinfo is not None


def test_get_has_no_body_and_no_content_type():
    http = prepare_request(D, "http://h", GET, Credentials(api_key="k"))
    assert http.body == b"" and "Content-Type" not in http.headers
    assert http.headers["Authorization"] == "Bearer k"


def test_every_prepared_request_names_the_provider_unless_the_platform_sets_its_own():
    from airflow_training_provider.hooks.transport import USER_AGENT

    assert USER_AGENT.startswith("airflow-training-provider/")
    assert prepare_request(D, "http://h", GET, Credentials(api_key="k")).headers["User-Agent"] == USER_AGENT
    own = ApiRequest("GET", "/x", headers={"User-Agent": "vendor-sdk/1"})
    assert (
        prepare_request(D, "http://h", own, Credentials(api_key="k")).headers["User-Agent"] == "vendor-sdk/1"
    )


def test_the_version_is_unknown_when_the_provider_was_never_installed(monkeypatch):
    import importlib.metadata

    from airflow_training_provider.hooks import transport

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert transport.provider_version() == "unknown"
