"""Together AI fine-tuning API (``/v1/fine-tunes/...``, bearer key, OpenAI-style error body), and the
account's identity (``/v3/whoami``) the CLI asks for before every command."""

from __future__ import annotations

from pydantic import BaseModel, Field

from airflow_training_platform.errors import ApiError
from airflow_training_platform.metering import Metering, PathRoutes
from airflow_training_platform.platforms.base import AppContext, LocalPlatform, platform_app
from airflow_training_platform.platforms.together.routes import PREFIX, WHOAMI_PATHS, build_router
from airflow_training_platform.platforms.together.wire import PLATFORM as NAME
from airflow_training_platform.platforms.together.wire import RATE_LIMITED, render_error
from airflow_training_platform.quotas import QuotaState


class TogetherOptions(BaseModel):
    together_balance_usd: float | None = Field(
        None,
        ge=0,
        description="Together account balance in USD; jobs are cancelled (billing_limit) when it runs out "
        "(default unlimited)",
    )


def throttled(state: QuotaState) -> ApiError:
    """Together's 429 ``dynamic_request_limited`` (above the account's rate), with
    ``x-ratelimit-reset``: the seconds to wait before retrying (docs.together.ai/docs/rate-limits)."""
    return ApiError(
        429,
        RATE_LIMITED,
        f"You have exceeded the rate limit of {state.quota.limit} requests per "
        f"{state.quota.window_seconds:g} s for this endpoint class. Please slow down.",
        headers={"x-ratelimit-reset": str(state.retry_after())},
    )


def build(context: AppContext):
    settings = context.settings
    router = build_router(context.engine, settings.api_key, settings.together_balance_usd)
    classes = {f"POST {PREFIX}": "create", f"POST {PREFIX}/estimate-price": "read"}  # a price is a read
    metering = Metering(NAME, PathRoutes(router, classes), throttled)
    return platform_app(
        "Together AI (local)", router, render_error, context.faults, meter=context.meter, metering=metering
    )


DOWNLOAD_PREFIX = "/v1/finetune/"
"""Together's model download (``GET /v1/finetune/download``): not served, so answered 501 here in
Together's error format rather than by the control app's 404."""


API_PREFIXES = ("/v1/", "/v3/")
"""Together's whole API (files, models, inference, projects…): what the local platform does not
serve of it is answered 501 in Together's error format, e.g. the CLI's ``files upload``."""


def serves(scope: dict) -> bool:
    """The fine-tuning paths, the model download and the whoami paths, and the rest of Together's
    API under ``/v1/`` and ``/v3/`` (asked after every other platform: theirs are more specific)."""
    path = scope.get("path", "")
    return path.startswith((PREFIX, DOWNLOAD_PREFIX, *API_PREFIXES)) or path in WHOAMI_PATHS


PLATFORM = LocalPlatform(name=NAME, build=build, match=serves, options=TogetherOptions)
