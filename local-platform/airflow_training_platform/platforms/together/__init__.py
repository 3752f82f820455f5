"""Together AI fine-tuning API (``/v1/fine-tunes/...``, bearer key, OpenAI-style error body)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from airflow_training_platform.platforms.base import AppContext, LocalPlatform, platform_app
from airflow_training_platform.platforms.together.routes import PREFIX, build_router
from airflow_training_platform.platforms.together.wire import PLATFORM as NAME
from airflow_training_platform.platforms.together.wire import render_error


class TogetherOptions(BaseModel):
    together_balance_usd: float | None = Field(
        None,
        ge=0,
        description="Together account balance in USD; jobs are cancelled (billing_limit) when it runs out "
        "(default unlimited)",
    )


def build(context: AppContext):
    settings = context.settings
    router = build_router(context.engine, settings.api_key, settings.together_balance_usd)
    return platform_app("Together AI (local)", router, render_error, context.faults)


PLATFORM = LocalPlatform(name=NAME, build=build, path_prefix=PREFIX, options=TogetherOptions)
