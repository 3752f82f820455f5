"""Huawei Cloud ModelArts training jobs (API v2: project-scoped paths under ``/v2/{project_id}``,
SDK-HMAC-SHA256 signatures or an IAM token, ``{"error_code", "error_msg"}`` errors), served from the
same engine as every other platform."""

from __future__ import annotations

import re
from typing import Any

from fastapi import Request
from pydantic import BaseModel, Field

from airflow_training_platform.errors import ApiError, request_id
from airflow_training_platform.json_answers import JSONResponse
from airflow_training_platform.metering import Metering, PathRoutes
from airflow_training_platform.platforms.base import AppContext, LocalPlatform, platform_app, secret_setting
from airflow_training_platform.platforms.modelarts import obs
from airflow_training_platform.platforms.modelarts.routes import ROOT, build_router
from airflow_training_platform.platforms.modelarts.user_code import parse_image_commands
from airflow_training_platform.platforms.modelarts.wire import PLATFORM as NAME
from airflow_training_platform.quotas import QuotaState

#: the paths of its training API: ``/v2/<project_id>/training-jobs…``, ``…/training-job-searches`` and
#: the other ``/v2/<project_id>/training-*`` resources (names, flavors, engines, quotas, experiments...),
#: and the jobs' TMS tags ``/v2/<project_id>/modelarts-training-job/…``. What the router does not
#: serve is answered 501 ``ModelArts.2858`` (a TensorOne ``/v2/training/…`` path has no ``training-``)
_PATH = re.compile(r"^/v2/[^/]+/(training-[^/]+|modelarts-training-job)(/|$)")


class ModelArtsOptions(BaseModel):
    modelarts_stop_grace_seconds: float = Field(
        30.0, ge=0, description="after a terminate's SIGTERM, SIGKILL the trainer after this (s)"
    )
    modelarts_access_key: str | None = Field(
        None, description="access key (AK) requests must be signed with (unset: any well-formed signature)"
    )
    modelarts_secret_key: str | None = secret_setting("its secret key (SK)")
    modelarts_auth_token: str | None = secret_setting("IAM token accepted as X-Auth-Token (unset: any token)")
    modelarts_image_command: list[str] = Field(
        default_factory=list,
        description="IMAGE=COMMAND: a create whose algorithm.engine.image_url is IMAGE runs COMMAND "
        "locally under the training-container contract (needs --allow-user-code)",
    )


_CODES = {
    400: "ModelArts.0101",
    401: "APIGW.0301",
    403: "ModelArts.0203",
    404: "ModelArts.2762",
    429: "APIGW.0308",
    500: "ModelArts.0010",
    501: "ModelArts.2858",  # documented UnsupportedOperation, "Current operation not supported"
    503: "ModelArts.0011",
}


def render_error(request: Request, err: ApiError) -> JSONResponse:
    """Huawei Cloud errors: ``{"error_code", "error_msg", "request_id"}`` (``APIGW.*`` from the
    gateway: authentication and throttling)."""
    code = err.code if err.code and "." in err.code else _CODES.get(err.status, "ModelArts.0010")
    body = {"error_code": code, "error_msg": err.message, "request_id": request_id(request)}
    return JSONResponse(body, status_code=err.status, headers=err.headers)


def throttled(state: QuotaState) -> ApiError:
    """ModelArts' HTTP 429 ``ModelArts.2799`` (TooManyRequests) with ``Retry-After`` (s), as its
    status-code appendix says to retry."""
    return ApiError(
        429, "ModelArts.2799", "Too many requests.", headers={"Retry-After": str(state.retry_after())}
    )


def build(context: AppContext):
    s = context.settings
    key_pair = None
    if s.modelarts_access_key and s.modelarts_secret_key:
        key_pair = (s.modelarts_access_key, s.modelarts_secret_key)
    router = build_router(
        context.engine,
        s.engine_config().data_dir,
        s.modelarts_stop_grace_seconds,
        key_pair,
        s.modelarts_auth_token,
        allow_user_code=s.allow_user_code,
        image_commands=parse_image_commands(s.modelarts_image_command),
    )
    classes = {f"POST {ROOT}/training-jobs": "create", f"POST {ROOT}/training-job-searches": "read"}
    metering = Metering(NAME, PathRoutes(router, classes), throttled)
    modelarts_app = platform_app(
        "Huawei Cloud ModelArts (local)",
        router,
        render_error,
        context.faults,
        meter=context.meter,
        metering=metering,
    )
    obs_app = obs.build_app(s.engine_config().data_dir, key_pair, context.faults)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await (obs_app if obs.is_obs(scope) else modelarts_app)(scope, receive, send)

    return app


def serves(scope: dict[str, Any]) -> bool:
    """ModelArts' training paths (:data:`_PATH`), and OBS requests (signed ``OBS <AK>:<signature>``:
    a job's code being uploaded, :mod:`.obs`)."""
    return bool(_PATH.match(scope.get("path", ""))) or obs.is_obs(scope)


PLATFORM = LocalPlatform(
    name=NAME,
    build=build,
    match=serves,
    options=ModelArtsOptions,
)
