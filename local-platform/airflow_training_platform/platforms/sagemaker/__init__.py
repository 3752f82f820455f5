"""AWS SageMaker training jobs (awsJson 1.1: ``POST /`` + ``X-Amz-Target: SageMaker.*``, SigV4,
``{"__type", "Message"}`` errors), served from the same engine as every other platform, the S3
object API over the directories its jobs read and write (:mod:`.s3`: path-style, REST-XML, SigV4
for ``s3``), and its jobs' output as CloudWatch Logs streams (:mod:`.cloudwatch_logs`:
``X-Amz-Target: Logs_20140328.*``, SigV4 for ``logs``, ``{"__type", "message"}`` errors)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from html import escape
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from airflow_training_platform.errors import ApiError, request_id
from airflow_training_platform.json_answers import JSONResponse
from airflow_training_platform.metering import Metered, Metering
from airflow_training_platform.platforms.base import AppContext, LocalPlatform, platform_app, secret_setting
from airflow_training_platform.platforms.sagemaker import cloudwatch_logs, s3
from airflow_training_platform.platforms.sagemaker.routes import (
    CONTENT_TYPE,
    build_router,
    is_sts,
)
from airflow_training_platform.platforms.sagemaker.script_mode import parse_image_commands
from airflow_training_platform.platforms.sagemaker.wire import PLATFORM as NAME
from airflow_training_platform.platforms.sagemaker.wire import TARGET_PREFIX
from airflow_training_platform.quotas import QuotaState


class SageMakerOptions(BaseModel):
    sagemaker_stop_grace_seconds: float = Field(
        120.0,
        ge=0,
        description="after StopTrainingJob's SIGTERM, SIGKILL the algorithm after this (s), like AWS",
    )
    sagemaker_region: str = Field(
        "us-east-1", description="the region in ARNs and the one SigV4 is checked for"
    )
    sagemaker_access_key_id: str | None = Field(
        None, description="access key id requests must be signed with (unset: any well-formed signature)"
    )
    sagemaker_secret_access_key: str | None = secret_setting("its secret")
    sagemaker_image_command: list[str] = Field(
        default_factory=list,
        description="IMAGE=COMMAND: a CreateTrainingJob with this TrainingImage runs COMMAND locally "
        "under the training-container contract (needs --allow-user-code)",
    )


def render_error(request: Request, err: ApiError) -> Response:
    """awsJson errors: ``{"__type": code, "Message": text}``; client errors are HTTP 400 (403 for auth).
    STS (query protocol) gets its XML ``ErrorResponse``, S3 its XML ``Error``, CloudWatch Logs
    ``{"__type": code, "message": text}`` (lower-case ``message``, as that service writes it)."""
    if s3.is_s3(request.scope):
        return s3.render_error(request, err)
    code = err.code if err.code and err.code[0].isupper() and "_" not in err.code else _CODES.get(err.status)
    headers = {**err.headers, "x-amzn-RequestId": request_id(request)}
    if cloudwatch_logs.is_logs(request.scope):
        return JSONResponse(
            {"__type": code or "InvalidParameterException", "message": err.message},
            status_code=err.status,
            headers=headers,
            media_type=CONTENT_TYPE,
        )
    if is_sts(request.headers.get("authorization", "")):
        xml = (
            f"<ErrorResponse><Error><Type>Sender</Type><Code>{escape(code or 'InvalidAction')}</Code>"
            f"<Message>{escape(err.message)}</Message></Error>"
            f"<RequestId>{escape(request_id(request))}</RequestId></ErrorResponse>"
        )
        return Response(xml, status_code=err.status, headers=headers, media_type="text/xml")
    return JSONResponse(
        {"__type": code or "ValidationException", "Message": err.message},
        status_code=err.status,
        headers=headers,
        media_type=CONTENT_TYPE,
    )


_CODES = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "UnknownOperationException",
    429: "ThrottlingException",
    500: "InternalFailure",
    503: "ServiceUnavailable",
}


def serves(scope: dict[str, Any]) -> bool:
    """An AWS-style ``POST /`` whose ``X-Amz-Target`` names a SageMaker operation, an STS call, a
    CloudWatch Logs call (its target or its signature's scope says ``logs``), or an S3 request (any
    method and path: its signature's scope says ``s3``)."""
    if s3.is_s3(scope) or cloudwatch_logs.is_logs(scope):
        return True
    if scope.get("method") != "POST" or scope.get("path") != "/":
        return False
    headers = dict(scope.get("headers", []))
    target = headers.get(b"x-amz-target", b"").decode("latin-1")
    # STS GetCallerIdentity (the aws connection's Test button) has no target: its signature says sts
    return target.startswith(TARGET_PREFIX) or (
        not target and b"/sts/aws4_request" in headers.get(b"authorization", b"")
    )


_JOB_IN_BODY = re.compile(
    rb'"(?:TrainingJobName|ResourceArn|logStreamName|logStreamNamePrefix)"\s*:\s*"'
    rb'(?:arn:[^"]*:training-job/)?([^"/\\]+)'
)
"""The job an awsJson body names: ``TrainingJobName``, the last part of a training job's
``ResourceArn`` (tags), or the job a log stream name (``<job>/algo-1-…``) starts with."""
_WRITES = ("Stop", "Delete", "AddTags", "Update")


def _job_in_body(body: bytes) -> str | None:
    match = _JOB_IN_BODY.search(body)
    return match.group(1).decode("utf-8", "replace") if match else None


def classify(scope: Mapping[str, Any]) -> Metered | None:
    """By ``X-Amz-Target``: ``Create*`` create; ``Stop*``, ``Delete*``, ``Update*``, ``AddTags``
    write; every other SageMaker operation and the CloudWatch Logs ones read. Named by the
    operation; the job from the body. S3 and STS are other services: ``None``."""
    if scope["method"] != "POST" or scope["path"] != "/" or s3.is_s3(scope):
        return None
    target = b""
    for name, value in scope["headers"]:
        if name == b"x-amz-target":
            target = value
            break
    operation = target.decode("latin-1").rpartition(".")[2]
    if cloudwatch_logs.is_logs(scope):
        return "read", operation or "(no operation)", _job_in_body
    if not operation:  # STS GetCallerIdentity
        return None
    cls = "create" if operation.startswith("Create") else "write" if operation.startswith(_WRITES) else "read"
    return cls, operation, _job_in_body


def throttled(state: QuotaState) -> ApiError:
    """AWS's throttle: HTTP 400 ``ThrottlingException`` "Rate exceeded", no ``Retry-After`` (botocore
    retries it by its own backoff); CloudWatch Logs answers the same code."""
    return ApiError(400, "ThrottlingException", "Rate exceeded")


def build(context: AppContext):
    s = context.settings
    key_pair = None
    if s.sagemaker_access_key_id and s.sagemaker_secret_access_key:
        key_pair = (s.sagemaker_access_key_id, s.sagemaker_secret_access_key)
    data_dir = s.engine_config().data_dir
    router = build_router(
        context.engine,
        data_dir,
        s.sagemaker_region,
        s.sagemaker_stop_grace_seconds,
        key_pair,
        allow_user_code=s.allow_user_code,
        image_commands=parse_image_commands(s.sagemaker_image_command),
    )
    # after SageMaker's POST /: S3 serves GET / (ListBuckets) and every /<bucket>[/<key>]
    router.include_router(s3.build_s3_router(data_dir, s.sagemaker_region, key_pair))
    metering = Metering(NAME, classify, throttled)
    return platform_app(
        "SageMaker (local)", router, render_error, context.faults, meter=context.meter, metering=metering
    )


PLATFORM = LocalPlatform(name=NAME, build=build, match=serves, options=SageMakerOptions)
