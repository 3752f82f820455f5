"""Alibaba Cloud PAI training jobs (PaiStudio 2022-01-12: ROA paths under ``/api/v1/trainingjobs``,
ACS3-HMAC-SHA256 or ROA HMAC-SHA1 signatures, ``{"Code", "Message", "RequestId"}`` errors), served
from the same engine as every other platform; and OSS ``PutObject`` (:mod:`.oss`) for alipai's
code uploads."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from pydantic import BaseModel, Field

from airflow_training_platform.errors import ApiError, request_id
from airflow_training_platform.json_answers import JSONResponse
from airflow_training_platform.metering import Metering, PathRoutes
from airflow_training_platform.platforms.base import AppContext, LocalPlatform, platform_app, secret_setting
from airflow_training_platform.platforms.pai import oss
from airflow_training_platform.platforms.pai.logs import INSTANCE_NOT_FOUND
from airflow_training_platform.platforms.pai.routes import PATH, build_router
from airflow_training_platform.platforms.pai.user_code import parse_image_commands
from airflow_training_platform.platforms.pai.wire import PLATFORM as NAME
from airflow_training_platform.quotas import QuotaState


class PaiOptions(BaseModel):
    pai_stop_grace_seconds: float = Field(
        30.0, ge=0, description="after StopTrainingJob's SIGTERM, SIGKILL the trainer after this (s)"
    )
    pai_access_key_id: str | None = Field(
        None, description="AccessKey id requests must be signed with (unset: any well-formed signature)"
    )
    pai_access_key_secret: str | None = secret_setting("its secret")
    pai_image_command: list[str] = Field(
        default_factory=list,
        description="IMAGE=COMMAND: a CreateTrainingJob whose AlgorithmSpec.Image is IMAGE runs COMMAND "
        "locally under PAI's user-code contract (needs --allow-user-code)",
    )


_CODES = {
    400: "InvalidParameter",
    403: "Forbidden",
    404: "EntityNotExist",
    429: "Throttling.User",
    500: "InternalError",
    501: "NotImplemented",
    503: "ServiceUnavailable",
}


def render_error(request: Request, err: ApiError) -> JSONResponse:
    """Alibaba OpenAPI errors: ``{"Code", "Message", "RequestId"}``; throttling carries
    ``x-acs-retry-after`` in milliseconds (from a fault's ``Retry-After`` seconds)."""
    # the local platform's generic codes (VALIDATION_ERROR, …) become PAI's; PAI's own pass through,
    # TRAINING_JOB_INSTANCE_NOT_FOUND (upper-case as PAI spells it) among them
    own = err.code and (not err.code.isupper() or err.code == INSTANCE_NOT_FOUND)
    code = err.code if own else _CODES.get(err.status, "InternalError")
    headers = {k: v for k, v in err.headers.items() if k.lower() != "retry-after"}
    if (seconds := err.headers.get("Retry-After")) is not None:
        headers["x-acs-retry-after"] = str(int(float(seconds) * 1000))
    rid = request_id(request)
    body = {"Code": code, "Message": err.message, "RequestId": rid, "HostId": request.url.hostname or ""}
    return JSONResponse(body, status_code=err.status, headers=headers)


def throttled(state: QuotaState) -> ApiError:
    """Alibaba's flow control: HTTP 400 ``Throttling.User`` "Request was denied due to user flow
    control." (no retry-after header: PaiStudio documents none)."""
    return ApiError(400, "Throttling.User", "Request was denied due to user flow control.")


def build(context: AppContext):
    s = context.settings
    key_pair = None
    if s.pai_access_key_id and s.pai_access_key_secret:
        key_pair = (s.pai_access_key_id, s.pai_access_key_secret)
    router = build_router(
        context.engine,
        s.engine_config().data_dir,
        s.pai_stop_grace_seconds,
        key_pair,
        allow_user_code=s.allow_user_code,
        image_commands=parse_image_commands(s.pai_image_command),
    )
    metering = Metering(NAME, PathRoutes(router, {f"POST {PATH}": "create"}), throttled)
    pai_app = platform_app(
        "Alibaba Cloud PAI (local)",
        router,
        render_error,
        context.faults,
        meter=context.meter,
        metering=metering,
    )
    oss_app = oss.build_app(s.engine_config().data_dir, key_pair, context.faults)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await (oss_app if oss.is_oss(scope) else pai_app)(scope, receive, send)

    return app


def serves(scope: dict[str, Any]) -> bool:
    """PaiStudio's training-job paths, and OSS requests (signed ``OSS <id>:<signature>``: alipai
    uploading a job's code, :mod:`.oss`)."""
    return scope.get("path", "").startswith(PATH) or oss.is_oss(scope)


PLATFORM = LocalPlatform(name=NAME, build=build, match=serves, options=PaiOptions)
