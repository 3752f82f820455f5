"""The provider's dialects read each local platform throttle answer (:mod:`airflow_training_platform.quotas`,
rendered by the emulator's own code, headers case-insensitive as the hooks' HTTP clients give them)
as a :class:`TransientPlatformError` that was not processed (``sent=False``: even a create may be
sent again), waiting what the answer's header says where it says it. Pure logic, no I/O."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from starlette.requests import Request

from airflow_training_platform.platforms import modelarts as local_modelarts
from airflow_training_platform.platforms import pai as local_pai
from airflow_training_platform.platforms import sagemaker as local_sagemaker
from airflow_training_platform.platforms import tensorone as local_tensorone
from airflow_training_platform.platforms import together as local_together
from airflow_training_platform.platforms.together.wire import render_error as render_together
from airflow_training_platform.quotas import Quota, QuotaState
from airflow_training_provider.errors import TransientPlatformError
from airflow_training_provider.platforms.modelarts import ModelArtsDialect
from airflow_training_provider.platforms.pai import PaiDialect
from airflow_training_provider.platforms.sagemaker import SageMakerDialect
from airflow_training_provider.platforms.tensorone import TensorOneDialect
from airflow_training_provider.platforms.together import TogetherDialect

WAIT = 42  # seconds until the window resets


def answer(throttled, render, path: str = "/", headers: dict[str, str] | None = None):
    """The emulator's throttle answer: (status, headers, JSON body, text)."""
    state = QuotaState(Quota(10, 3600.0), 0, time.time() + WAIT - 0.5, throttled=True)
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {"type": "http", "method": "POST", "path": path, "query_string": b"", "headers": raw, "state": {}}
    response = render(Request(scope), throttled(state))
    text = bytes(response.body).decode()
    return response.status_code, httpx.Headers(response.raw_headers), json.loads(text), text


CASES = {
    "tensorone": (
        TensorOneDialect(),
        local_tensorone.throttled,
        local_tensorone.render_envelope,
        {},
        429,
        WAIT,
    ),
    "sagemaker": (SageMakerDialect(), local_sagemaker.throttled, local_sagemaker.render_error, {}, 400, None),
    "sagemaker-logs": (
        SageMakerDialect(),
        local_sagemaker.throttled,
        local_sagemaker.render_error,
        {"X-Amz-Target": "Logs_20140328.GetLogEvents"},
        400,
        None,
    ),
    "pai": (PaiDialect(), local_pai.throttled, local_pai.render_error, {}, 400, None),
    "modelarts": (ModelArtsDialect(), local_modelarts.throttled, local_modelarts.render_error, {}, 429, WAIT),
    "together": (TogetherDialect(), local_together.throttled, render_together, {}, 429, WAIT),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_dialect_reads_the_local_throttle_as_transient_and_not_processed(case):
    dialect, throttled, render, headers, status, retry_after = CASES[case]
    code, got_headers, body, text = answer(throttled, render, headers=headers)
    assert code == status
    err = dialect.classify_error(code, got_headers, body, text)
    assert isinstance(err, TransientPlatformError), (case, type(err), err)
    assert err.sent is False, "a throttled request was not processed: it may be sent again"
    assert err.retry_after == retry_after


def test_together_reads_x_ratelimit_reset_as_seconds_only_without_retry_after():
    d = TogetherDialect()
    body = {
        "error": {
            "message": "slow down",
            "type": "dynamic_request_limited",
            "code": "dynamic_request_limited",
        }
    }
    assert d.classify_error(429, {"x-ratelimit-reset": "7"}, body).retry_after == 7.0
    assert d.classify_error(429, {"x-ratelimit-reset": "7", "Retry-After": "3"}, body).retry_after == 3.0
    assert d.classify_error(429, {"x-ratelimit-reset": "soon"}, body).retry_after is None
    assert d.classify_error(429, {}, body).retry_after is None
