"""TensorOne v2 training REST API (``/v2/training/...``, bearer key, TensorOne's error envelope)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from airflow_training_platform.errors import ApiError, render_envelope
from airflow_training_platform.metering import Metering, PathRoutes, rate_limit_headers
from airflow_training_platform.platforms.base import AppContext, LocalPlatform, platform_app
from airflow_training_platform.platforms.tensorone.routes import PREFIX, build_router
from airflow_training_platform.platforms.tensorone.wire import PLATFORM as NAME
from airflow_training_platform.quotas import QuotaState


class TensorOneOptions(BaseModel):
    tensorone_cancel_wait_seconds: float = Field(
        5.0, ge=0, description="a cancel request waits this long for the trainer to exit before answering (s)"
    )


def throttled(state: QuotaState) -> ApiError:
    """TensorOne's 429 ``RATE_LIMIT_EXCEEDED`` with ``X-RateLimit-*`` and ``Retry-After`` (s)
    (docs.tensorone.ai/api-reference/rate-limits)."""
    retry_after = state.retry_after()
    quota = state.quota
    return ApiError(
        429,
        "RATE_LIMIT_EXCEEDED",
        f"Rate limit exceeded: at most {quota.limit} requests per {quota.window_seconds:g} s; "
        f"retry after {retry_after} s",
        {"limit": quota.limit, "window": quota.window_seconds, "retryAfter": retry_after},
        dict([*rate_limit_headers(state), ("Retry-After", str(retry_after))]),
    )


def build(context: AppContext):
    settings = context.settings
    router = build_router(context.engine, settings.api_key, settings.tensorone_cancel_wait_seconds)
    # a cancel is a POST here; TensorOne's documented write quota (PUT /training/*) covers it
    metering = Metering(
        NAME, PathRoutes(router, {f"POST {PREFIX}/jobs": "create"}), throttled, rate_limit_headers
    )
    return platform_app(
        "TensorOne (local)", router, render_envelope, context.faults, meter=context.meter, metering=metering
    )


PLATFORM = LocalPlatform(name=NAME, build=build, path_prefix=PREFIX, options=TensorOneOptions)
