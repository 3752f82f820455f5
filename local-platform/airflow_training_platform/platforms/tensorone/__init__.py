"""TensorOne v2 training REST API (``/v2/training/...``, bearer key, TensorOne's error envelope)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from airflow_training_platform.errors import render_envelope
from airflow_training_platform.platforms.base import AppContext, LocalPlatform, platform_app
from airflow_training_platform.platforms.tensorone.routes import PREFIX, build_router
from airflow_training_platform.platforms.tensorone.wire import PLATFORM as NAME


class TensorOneOptions(BaseModel):
    tensorone_cancel_wait_seconds: float = Field(
        5.0, ge=0, description="a cancel request waits this long for the trainer to exit before answering (s)"
    )


def build(context: AppContext):
    settings = context.settings
    router = build_router(context.engine, settings.api_key, settings.tensorone_cancel_wait_seconds)
    return platform_app("TensorOne (local)", router, render_envelope, context.faults)


PLATFORM = LocalPlatform(name=NAME, build=build, path_prefix=PREFIX, options=TensorOneOptions)
