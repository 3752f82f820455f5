"""Response classification and retry policy (pure logic)."""

from __future__ import annotations

import pytest
from tenacity import Retrying

from airflow_training_provider.errors import JobStateConflictError, TransientPlatformError
from airflow_training_provider.hooks.transport import RetryPolicy, decode_response, retry_after_seconds
from airflow_training_provider.platforms.base import ApiRequest
from airflow_training_provider.platforms.tensorone import TensorOneDialect

D = TensorOneDialect()
GET = ApiRequest("GET", "/v2/training/jobs/j")
CREATE = ApiRequest("POST", "/v2/training/jobs", json={}, idempotent=False)


def test_ok_body_decoded():
    assert decode_response(D, GET, 200, {}, '{"a": 1}') == {"a": 1}


def test_malformed_2xx_body_is_transient():
    with pytest.raises(TransientPlatformError, match="malformed"):
        decode_response(D, GET, 200, {}, "<html>oops")


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
