"""SageMaker training-job operations over the local engine: one ``POST /`` dispatched on
``X-Amz-Target`` (``docs/platforms/sagemaker.md``), every request checked against AWS Signature
Version 4 (:mod:`.sigv4`).

Operations: ``CreateTrainingJob`` (``ResourceInUse`` for a name that exists), ``DescribeTrainingJob``
(``ValidationException`` "Requested resource not found." for an unknown one), ``StopTrainingJob``
(``{}``; ``ValidationException`` "... is in status Stopped." for a job that ended),
``ListTrainingJobs`` and ``Search`` (``Resource=TrainingJob``; :mod:`.search`: every documented
filter, sort and page parameter, or a ``ValidationException`` naming it), ``AddTags``,
``ListTags``, ``DeleteTags``. Also STS ``GetCallerIdentity`` (query protocol, XML), which the Amazon
provider's connection Test button calls (with ``service_config.sts.endpoint_url`` set to here), and
CloudWatch Logs' ``DescribeLogStreams`` and ``GetLogEvents`` (``X-Amz-Target: Logs_20140328.*``,
:mod:`.cloudwatch_logs`) over the jobs' output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from html import escape
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from airflow_training_platform.engine import (
    USER_CODE_REFUSED,
    InvalidJobSpec,
    JobNotFound,
    StateConflict,
    TrainingEngine,
)
from airflow_training_platform.errors import ApiError
from airflow_training_platform.json_answers import JSONResponse, RawJSONRoute
from airflow_training_platform.platforms.common import tags_of
from airflow_training_platform.platforms.sagemaker import cloudwatch_logs, script_mode, search, wire
from airflow_training_platform.platforms.sagemaker.sigv4 import verify

CONTENT_TYPE = "application/x-amz-json-1.1"
OPERATIONS = ("CreateTrainingJob", "DescribeTrainingJob", "StopTrainingJob", "ListTrainingJobs", "Search",
              "AddTags", "ListTags", "DeleteTags")  # fmt: skip
"""The SageMaker operations served (``X-Amz-Target: SageMaker.<name>``); any other is answered
``UnknownOperationException`` (HTTP 400), as AWS answers a target it does not know: among the
training job operations, ``DeleteTrainingJob``, ``UpdateTrainingJob`` and
``ListTrainingJobsForHyperParameterTuningJob`` are not served."""
_NOT_FOUND = "Requested resource not found."
_TERMINAL = ("succeeded", "failed", "cancelled")


def build_router(
    engine: TrainingEngine,
    data_dir: str,
    region: str,
    stop_grace_seconds: float,
    key_pair: tuple[str, str] | None,
    allow_user_code: bool = False,
    image_commands: dict[str, str] | None = None,
) -> APIRouter:
    """The router: ``key_pair`` (access key id, secret) to verify signatures with, or ``None`` to
    accept any signed request; ``allow_user_code``: run script-mode jobs and mapped images
    (``image_commands``: ``TrainingImage`` → local command), else refuse them."""
    images = dict(image_commands or {})
    router = APIRouter(route_class=RawJSONRoute, tags=["sagemaker"])
    logs = cloudwatch_logs.CloudWatchLogs(engine, region).operations

    def record(name: Any) -> dict[str, Any]:
        try:
            return engine.get(str(name), platform=wire.PLATFORM)
        except JobNotFound:
            raise ApiError(400, "ValidationException", _NOT_FOUND) from None

    def by_arn(resource_arn: Any) -> dict[str, Any]:
        name = str(resource_arn or "").rsplit("/", 1)[-1]
        matches = [r for r in engine.list(wire.PLATFORM) if r["job_id"].lower() == name]
        if not matches:
            raise ApiError(400, "ValidationException", _NOT_FOUND)
        return matches[0]

    def create(body: dict[str, Any]) -> dict[str, Any]:
        user_code = script_mode.is_user_code(body, images)
        if user_code and not allow_user_code:  # before anything is read or laid out
            raise ApiError(400, "ValidationException", USER_CODE_REFUSED)
        spec = wire.parse_create(body, data_dir, stop_grace_seconds, user_code=user_code)
        if user_code:
            spec.program = script_mode.parse_user_code(body, data_dir, region, images)
        try:
            rec = engine.submit(spec)
        except StateConflict:
            raise ApiError(
                400,
                "ResourceInUse",
                "Training job names must be unique within an AWS account and region, and a training job "
                f"with this name already exists ({wire.arn(spec.name, region)})",
            ) from None
        except InvalidJobSpec as exc:
            raise wire.bad(exc.field, str(exc)) from None
        return {"TrainingJobArn": wire.arn(rec["job_id"], region)}

    def describe(body: dict[str, Any]) -> dict[str, Any]:
        return wire.job_to_wire(record(body.get("TrainingJobName")), region)

    def stop(body: dict[str, Any]) -> dict[str, Any]:
        name = str(body.get("TrainingJobName"))
        rec = record(name)
        if rec["state"] in _TERMINAL or rec["state"] == "stopping":
            status = wire.job_to_wire(rec, region)["TrainingJobStatus"]
            raise ApiError(
                400,
                "ValidationException",
                f"The request was rejected because the training job is in status {status}.",
            )
        try:  # SageMaker always sends SIGTERM and waits (stop grace) for the algorithm to save its state
            engine.cancel(
                name,
                reason="StopTrainingJob",
                create_final_checkpoint=True,
                platform=wire.PLATFORM,
                request=body,
            )
        except StateConflict as exc:
            raise ApiError(
                400, "ValidationException", f"The training job is in status {exc.state}."
            ) from None
        return {}

    def list_jobs(body: dict[str, Any]) -> dict[str, Any]:
        return search.list_training_jobs(engine, region, body)

    def search_jobs(body: dict[str, Any]) -> dict[str, Any]:
        return search.search(engine, region, body)

    def add_tags(body: dict[str, Any]) -> dict[str, Any]:
        rec = by_arn(body.get("ResourceArn"))
        new = {t["Key"]: t.get("Value", "") for t in body.get("Tags") or []}
        kept = [t for t in tags_of(rec) if t["Key"] not in new]
        engine.set_tags(
            rec["job_id"], [f"{t['Key']}:{t['Value']}" for t in kept] + [f"{k}:{v}" for k, v in new.items()]
        )
        return {"Tags": [{"Key": k, "Value": v} for k, v in new.items()]}

    def list_tags(body: dict[str, Any]) -> dict[str, Any]:
        return {"Tags": tags_of(by_arn(body.get("ResourceArn")))}

    def delete_tags(body: dict[str, Any]) -> dict[str, Any]:
        rec = by_arn(body.get("ResourceArn"))
        gone = set(body.get("TagKeys") or [])
        engine.set_tags(
            rec["job_id"], [f"{t['Key']}:{t['Value']}" for t in tags_of(rec) if t["Key"] not in gone]
        )
        return {}

    operations: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "CreateTrainingJob": create,
        "DescribeTrainingJob": describe,
        "StopTrainingJob": stop,
        "ListTrainingJobs": list_jobs,
        "Search": search_jobs,
        "AddTags": add_tags,
        "ListTags": list_tags,
        "DeleteTags": delete_tags,
    }
    assert tuple(operations) == OPERATIONS

    @router.post("/")
    async def dispatch(request: Request) -> Response:
        raw = await request.body()
        verify(request, raw, key_pair)
        target = request.headers.get("x-amz-target", "")
        if not target and is_sts(request.headers.get("authorization", "")):
            return caller_identity(request, raw)
        if cloudwatch_logs.is_logs(request.scope):  # reads log files: off the event loop
            read = logs.get(target.removeprefix(cloudwatch_logs.TARGET_PREFIX))
            if not target.startswith(cloudwatch_logs.TARGET_PREFIX) or read is None:
                raise ApiError(400, "UnknownOperationException", f"Unknown operation {target}")
            return JSONResponse(await run_in_threadpool(read, _json_body(raw)), media_type=CONTENT_TYPE)
        operation = operations.get(target.removeprefix(wire.TARGET_PREFIX))
        if not target.startswith(wire.TARGET_PREFIX) or operation is None:
            raise ApiError(400, "UnknownOperationException", f"Unknown operation {target}")
        return JSONResponse(operation(_json_body(raw)), media_type=CONTENT_TYPE)

    return router


def _json_body(raw: bytes) -> dict[str, Any]:
    """An awsJson request body: a JSON object (empty: ``{}``). :raises ApiError: ``SerializationException``."""
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        raise ApiError(
            400, "SerializationException", "Start of structure or map found where not expected."
        ) from None
    if not isinstance(body, dict):
        raise ApiError(400, "SerializationException", "the request body must be a JSON object")
    return body


def is_sts(authorization: str) -> bool:
    """A request signed for the ``sts`` service (its SigV4 credential scope says so)."""
    return "/sts/aws4_request" in authorization


def caller_identity(request: Request, raw: bytes) -> Response:
    """STS ``GetCallerIdentity`` (``Action=GetCallerIdentity``, form-encoded) → its XML answer."""
    form = parse_qs(raw.decode("utf-8", "replace"))
    if form.get("Action") != ["GetCallerIdentity"]:
        raise ApiError(400, "InvalidAction", f"Could not find operation {form.get('Action')} for STS")
    key = re.search(r"Credential=([^/]+)/", request.headers.get("authorization", ""))
    user = escape(key.group(1) if key else "local")
    xml = (
        '<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
        f"<GetCallerIdentityResult><Arn>arn:aws:iam::{wire.ACCOUNT}:user/local</Arn>"
        f"<UserId>{user}</UserId><Account>{wire.ACCOUNT}</Account></GetCallerIdentityResult>"
        "<ResponseMetadata><RequestId>local</RequestId></ResponseMetadata></GetCallerIdentityResponse>"
    )
    return Response(xml, media_type="text/xml")
