"""PaiStudio training-job operations over the local engine (``docs/platforms/pai.md``), every
request checked against its signature (ACS3-HMAC-SHA256 or ROA HMAC-SHA1).

``POST /api/v1/trainingjobs`` (CreateTrainingJob), ``GET /api/v1/trainingjobs/{id}``
(GetTrainingJob; ``EntityNotExist.TrainingJob`` 404 for an unknown one), ``PUT …/{id}/stop``
(StopTrainingJob; ``TrainingJobStatusNotAllowed`` 400 for a job that has ended),
``GET /api/v1/trainingjobs`` (ListTrainingJobs: ``Labels`` as a JSON map, ``Status``,
``TrainingJobName``, ``TrainingJobId``, ``WorkspaceId``, ``AlgorithmName``/``AlgorithmProvider``,
``SortBy``/``Order``, ``PageNumber``/``PageSize``, and ``StartTime``/``EndTime`` bounding the
creation time, by default the last 7 days as on PAI), ``GET …/{id}/events`` and
``GET …/{id}/metrics`` (paged, ``StartTime``/``EndTime``), ``GET …/{id}/latestmetrics``,
``GET …/{id}/errorinfo``, ``GET …/{id}/logs`` (ListTrainingJobLogs, :mod:`.logs`). Every answer
carries a ``RequestId``. Signatures: ACS3-HMAC-SHA256 (:mod:`.acs3`) or the older ROA HMAC-SHA1
(:mod:`.roa_v1`, what ``alipai`` sends).

Honest refusals: a query parameter a route does not apply is 400 ``InvalidParameter`` naming it
(:func:`_only`); the client's other training-job operations reach the platform app's catch-all,
501 ``NotImplemented`` (:func:`..base.platform_app`).
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request

from airflow_training_platform.engine import (
    USER_CODE_REFUSED,
    InvalidJobSpec,
    JobNotFound,
    StateConflict,
    TrainingEngine,
)
from airflow_training_platform.errors import ApiError, request_id
from airflow_training_platform.json_answers import JSONResponse, RawJSONRoute
from airflow_training_platform.platforms.pai import acs3, logs, roa_v1, user_code, wire

PATH = "/api/v1/trainingjobs"
_TERMINAL = ("succeeded", "failed", "cancelled")
#: ListTrainingJobs without ``StartTime`` lists the jobs created in the last 7 days (PAI's default)
LIST_WINDOW_SECONDS = 7 * 24 * 3600
#: ListTrainingJobs' query parameters served (the API reference's, less ``IsTempAlgo``, refused)
LIST_PARAMETERS = (
    "AlgorithmName",
    "AlgorithmProvider",
    "StartTime",
    "EndTime",
    "Labels",
    "Order",
    "PageNumber",
    "PageSize",
    "SortBy",
    "Status",
    "TrainingJobId",
    "TrainingJobName",
    "WorkspaceId",
)
_EXACT_FILTERS = (
    "AlgorithmName",
    "AlgorithmProvider",
    "Status",
    "TrainingJobName",
    "WorkspaceId",
    "TrainingJobId",
)
#: ``SortBy`` values: the job's time, name, id and status fields
_SORTABLE = ("GmtCreateTime", "GmtModifiedTime", "TrainingJobName", "TrainingJobId", "Status")


def build_router(
    engine: TrainingEngine,
    data_dir: str,
    stop_grace_seconds: float,
    key_pair: tuple[str, str] | None,
    allow_user_code: bool = False,
    image_commands: dict[str, str] | None = None,
) -> APIRouter:
    """The router: ``key_pair`` (AccessKey id, secret) to verify signatures with, or ``None`` to
    accept any well-formed signed request; ``allow_user_code``: run jobs with user code
    (:mod:`.user_code`; ``image_commands``: ``AlgorithmSpec.Image`` → local command), else refuse them."""
    images = dict(image_commands or {})
    router = APIRouter(route_class=RawJSONRoute, tags=["pai"])

    async def checked(request: Request) -> bytes:
        body = await request.body()
        if roa_v1.is_roa_v1(request.headers.get("authorization", "")):  # alipai's HMAC-SHA1
            roa_v1.verify(request, key_pair)
        else:
            acs3.verify(request, body, key_pair)
        return body

    def answer(request: Request, payload: dict[str, Any]) -> JSONResponse:
        return JSONResponse({**payload, "RequestId": request_id(request)})

    def record(job_id: str) -> dict[str, Any]:
        try:
            return engine.get(job_id, platform=wire.PLATFORM)
        except JobNotFound:
            raise ApiError(
                404, "EntityNotExist.TrainingJob", f"The training job {job_id} does not exist."
            ) from None

    @router.post(PATH)
    async def create(request: Request) -> JSONResponse:
        raw = await checked(request)
        _only(request)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            raise wire.bad("body", "is not valid JSON") from None
        is_user_code = isinstance(body, dict) and user_code.is_user_code(body, images)
        if is_user_code and not allow_user_code:  # before anything is read or laid out
            raise ApiError(400, "InvalidParameter", USER_CODE_REFUSED)
        spec = wire.parse_create(body, data_dir, stop_grace_seconds, user_code=is_user_code)
        if is_user_code:
            spec.program = user_code.parse_user_code(body, data_dir, images)
        try:
            rec = engine.submit(spec)
        except InvalidJobSpec as exc:
            raise wire.bad(exc.field, str(exc)) from None
        return answer(request, {"TrainingJobId": rec["job_id"]})

    @router.get(PATH)
    async def list_jobs(request: Request) -> JSONResponse:
        await checked(request)
        q = _only(request, *LIST_PARAMETERS)
        end = _time(q.get("EndTime"), "EndTime", time.time())
        start = _time(q.get("StartTime"), "StartTime", end - LIST_WINDOW_SECONDS)
        records = engine.list(wire.PLATFORM, created_between=(start, end))  # only those snapshotted
        jobs = [wire.job_to_wire(r) for r in records]
        if labels := q.get("Labels"):
            try:
                wanted = json.loads(labels)
            except ValueError:
                raise wire.bad("Labels", "must be a JSON object of label keys and values") from None
            if not isinstance(wanted, dict):
                raise wire.bad("Labels", "must be a JSON object of label keys and values")
            jobs = [j for j in jobs if _has_labels(j, wanted)]
        for key in _EXACT_FILTERS:
            if value := q.get(key):
                jobs = [j for j in jobs if str(j.get(key)) == value]
        sort_key = q.get("SortBy") or "GmtCreateTime"
        if sort_key not in _SORTABLE:
            raise wire.bad("SortBy", f"'{sort_key}' is not one of {', '.join(_SORTABLE)}")
        jobs.sort(key=lambda j: str(j.get(sort_key) or ""), reverse=_order(q, "DESC") == "DESC")
        page, size = (
            _positive(q.get("PageNumber"), "PageNumber", 1),
            _positive(q.get("PageSize"), "PageSize", 20),
        )
        if size > 1000:
            raise wire.bad("PageSize", f"'{size}' must be at most 1000")
        selected = jobs[(page - 1) * size : page * size]
        return answer(request, {"TrainingJobs": selected, "TotalCount": len(jobs)})

    @router.get(PATH + "/{job_id}")
    async def get_job(request: Request, job_id: str) -> JSONResponse:
        await checked(request)
        _only(request)
        return answer(request, wire.job_to_wire(record(job_id)))

    @router.put(PATH + "/{job_id}/stop")
    async def stop(request: Request, job_id: str) -> JSONResponse:
        await checked(request)
        _only(request)
        rec = record(job_id)
        if rec["state"] in _TERMINAL or rec["state"] == "stopping":
            status = wire.status_of(rec)[0]
            raise ApiError(
                400,
                "TrainingJobStatusNotAllowed",
                f"The training job {job_id} is {status} and cannot be stopped.",
            )
        try:  # PAI terminates the containers: SIGTERM, then SIGKILL after the grace period
            engine.cancel(
                job_id,
                reason="StopTrainingJob",
                create_final_checkpoint=True,
                platform=wire.PLATFORM,
                request={},
            )
        except StateConflict as exc:
            raise ApiError(400, "TrainingJobStatusNotAllowed", f"The training job is {exc.state}.") from None
        return answer(request, {})

    @router.get(PATH + "/{job_id}/events")
    async def events(request: Request, job_id: str) -> JSONResponse:
        await checked(request)
        q = _only(request, "StartTime", "EndTime", "PageNumber", "PageSize")
        rec = record(job_id)
        start, end = _time(q.get("StartTime"), "StartTime", 0.0), _time(q.get("EndTime"), "EndTime", math.inf)
        lines = wire.events_to_wire(
            {**rec, "events": [e for e in rec["events"] if start <= e["created_at"] <= end]}
        )
        page = _positive(q.get("PageNumber"), "PageNumber", 1)
        size = _positive(q.get("PageSize"), "PageSize", 100)
        return answer(
            request, {"Events": lines[(page - 1) * size : page * size], "TotalCount": str(len(lines))}
        )

    @router.get(PATH + "/{job_id}/metrics")
    async def metrics(request: Request, job_id: str) -> JSONResponse:
        await checked(request)
        q = _only(request, "Name", "Order", "StartTime", "EndTime", "PageNumber", "PageSize")
        rows = wire.metrics_to_wire(record(job_id))
        if name := q.get("Name"):
            rows = [r for r in rows if r["Name"] == name]
        start, end = _time(q.get("StartTime"), "StartTime", 0.0), _time(q.get("EndTime"), "EndTime", math.inf)
        rows = [r for r in rows if start <= _time(r["Timestamp"], "Timestamp", 0.0) <= end]
        if _order(q, "ASC") == "DESC":
            rows.reverse()
        page, size = (
            _positive(q.get("PageNumber"), "PageNumber", 1),
            _positive(q.get("PageSize"), "PageSize", 50),
        )
        return answer(request, {"Metrics": rows[(page - 1) * size : page * size], "TotalCount": len(rows)})

    @router.get(PATH + "/{job_id}/latestmetrics")
    async def latest_metrics(request: Request, job_id: str) -> JSONResponse:
        await checked(request)
        _only(request)  # Names: its format is not documented, so it is refused rather than guessed
        return answer(request, {"Metrics": wire.job_to_wire(record(job_id))["LatestMetrics"]})

    @router.get(PATH + "/{job_id}/logs")
    async def list_logs(request: Request, job_id: str) -> JSONResponse:
        await checked(request)
        q = _only(request, "StartTime", "EndTime", "InstanceId", "WorkerId", "PageNumber", "PageSize")
        rec = record(job_id)
        since = _time(q.get("StartTime"), "StartTime", rec["started_at"]) if q.get("StartTime") else None
        until = _time(q.get("EndTime"), "EndTime", 0.0) if q.get("EndTime") else None
        page = logs.list_logs(
            engine,
            rec,
            page=_positive(q.get("PageNumber"), "PageNumber", 1),
            size=_positive(q.get("PageSize"), "PageSize", logs.PAGE_SIZE),
            since=since,
            until=until,
            instance=q.get("InstanceId") or q.get("WorkerId") or None,
        )
        return answer(request, page)

    @router.get(PATH + "/{job_id}/errorinfo")
    async def error_info(request: Request, job_id: str) -> JSONResponse:
        await checked(request)
        _only(request)
        rec = record(job_id)
        status, code, message = wire.status_of(rec)
        info = (
            {"Code": code, "Message": message, "AdditionalInfo": rec.get("error") or ""}
            if status == "Failed"
            else {}
        )
        return answer(request, {"ErrorInfo": info})

    return router


def _only(request: Request, *implemented: str) -> Any:
    """The request's query, once every parameter in it is one this route implements.

    :raises ApiError: 400 ``InvalidParameter`` naming the first other one: a filter the local
        platform does not apply would otherwise answer as if it had matched.
    """
    for key in request.query_params:
        if key not in implemented:
            raise wire.bad(
                key, "is not supported by the local training platform (see docs/local-platform.md)"
            )
    return request.query_params


def _order(query: Any, default: str) -> str:
    order = (query.get("Order") or default).upper()
    if order not in ("ASC", "DESC"):
        raise wire.bad("Order", f"'{query.get('Order')}' is not ASC or DESC")
    return order


def _has_labels(job: dict[str, Any], wanted: dict[str, Any]) -> bool:
    have = {label["Key"]: label["Value"] for label in job["Labels"]}
    return all(have.get(k) == str(v) for k, v in wanted.items())


def _time(raw: str | None, field: str, default: float) -> float:
    """A query time (UTC ISO 8601, ``2025-03-01T10:00:00Z``) as UNIX seconds; ``default`` if absent."""
    if not raw:
        return default
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise wire.bad(field, f"'{raw}' is not a UTC time like 2025-03-01T10:00:00Z") from None
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()


def _positive(raw: str | None, field: str, default: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise wire.bad(field, f"'{raw}' is not an integer") from None
    if value < 1:
        raise wire.bad(field, f"'{raw}' must be at least 1")
    return value
