"""ModelArts training-job operations (API v2) over the local engine (``docs/platforms/modelarts.md``),
every request checked against its SDK-HMAC-SHA256 signature or IAM token (:mod:`.signing`).

``POST /v2/{project_id}/training-jobs`` (create, 201), ``GET …/training-jobs/{id}`` (show; 404 for an
unknown one), ``POST …/training-jobs/{id}/actions`` (``{"action_type": "terminate"}``, 202; 400 for
a job that has ended), ``DELETE …/training-jobs/{id}`` (202, the job is gone; 400 while it runs),
``POST …/training-job-searches`` (search, :mod:`.search`), ``GET …/training-jobs/{id}/events``
(:func:`.search.events`), a task's logs (:mod:`.logs`:
``GET …/training-jobs/{id}/tasks/{task_id}/logs/preview``, ``…/logs/url`` and the file it links to,
``GET …/training-jobs/{id}/logs/{task_id}``), its resource metrics
(``GET …/training-jobs/{id}/metrics/{task_id}``) and the jobs' TMS tags (:mod:`.tags`). A job belongs
to the project it was created in. Every other training-job route of the API is answered 501
(``ModelArts.2858``) by the platform app. With ``--allow-user-code`` a create naming the user's code
runs it (:mod:`.user_code`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response

from airflow_training_platform.engine import (
    USER_CODE_REFUSED,
    InvalidJobSpec,
    JobNotFound,
    StateConflict,
    TrainingEngine,
)
from airflow_training_platform.errors import ApiError
from airflow_training_platform.json_answers import JSONResponse, RawJSONRoute
from airflow_training_platform.platforms.modelarts import logs, search, user_code, wire
from airflow_training_platform.platforms.modelarts.signing import verify
from airflow_training_platform.platforms.modelarts.tags import TmsTags, add_tag_routes

ROOT = "/v2/{project_id}"
TASK_LOGS = ROOT + "/training-jobs/{job_id}/tasks/{task_id}/logs"

RESOURCE_METRICS = ("cpuUsage", "memUsage", "gpuUtil", "gpuMemUsage", "npuUtil", "npuMemUsage")
"""The resource metrics a task's metrics route reports (ShowTrainingJobMetrics, ``metric``)."""

LOG_URL_SECONDS = 3600
"""How long a ``…/logs/url`` link stays valid (s); Huawei calls it temporary without a number."""


def build_router(
    engine: TrainingEngine,
    data_dir: str,
    stop_grace_seconds: float,
    key_pair: tuple[str, str] | None,
    token: str | None,
    allow_user_code: bool = False,
    image_commands: dict[str, str] | None = None,
) -> APIRouter:
    """The router: ``key_pair`` (access key, secret key) to verify signatures with and ``token`` to
    accept as ``X-Auth-Token``; ``None`` accepts any well-formed signature (or token).
    ``allow_user_code``: run ``code_dir`` + ``boot_file`` jobs and mapped custom images
    (``image_commands``: ``engine.image_url`` → local command), else refuse them."""
    images = dict(image_commands or {})
    router = APIRouter(route_class=RawJSONRoute, tags=["modelarts"])
    tms_tags = TmsTags()
    link_key = secrets.token_bytes(32)  # signs the log links of this server's life, like a presigned URL

    def link_signature(path: str, expires: int) -> str:
        return hmac.new(link_key, f"{path}\n{expires}".encode(), hashlib.sha256).hexdigest()

    async def checked(request: Request) -> bytes:
        body = await request.body()
        verify(request, body, key_pair, token)
        return body

    def record(project_id: str, job_id: str) -> dict[str, Any]:
        try:
            rec = engine.get(job_id, platform=wire.PLATFORM)
        except JobNotFound:
            rec = None
        if rec is None or _project(rec) != project_id:
            raise ApiError(404, "ModelArts.2762", f"The training job {job_id} does not exist.")
        return rec

    def json_body(raw: bytes) -> Any:
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            raise wire.bad("body", "is not valid JSON") from None

    @router.post(ROOT + "/training-jobs")
    async def create(request: Request, project_id: str) -> JSONResponse:
        body = json_body(await checked(request))
        runs_user_code = user_code.is_user_code(body, images)
        if runs_user_code and not allow_user_code:  # before anything is read or laid out
            raise wire.bad("algorithm", USER_CODE_REFUSED)
        spec = wire.parse_create(body, project_id, data_dir, stop_grace_seconds, user_code=runs_user_code)
        if runs_user_code:
            spec.program = user_code.parse_user_code(body, data_dir, images)
        try:
            rec = engine.submit(spec)
        except InvalidJobSpec as exc:  # the engine names its own field: name the request's
            field = {"gpu_count": "spec.resource.node_count", "dataset": "algorithm.inputs"}.get(
                exc.field, exc.field
            )
            raise wire.bad(field, str(exc).replace("gpu_count", "node_count")) from None
        return JSONResponse(wire.job_to_wire(rec), status_code=201)

    @router.get(ROOT + "/training-jobs/{job_id}")
    async def show(request: Request, project_id: str, job_id: str) -> JSONResponse:
        await checked(request)
        return JSONResponse(wire.job_to_wire(record(project_id, job_id)))

    @router.post(ROOT + "/training-jobs/{job_id}/actions")
    async def action(request: Request, project_id: str, job_id: str) -> JSONResponse:
        body = json_body(await checked(request))
        if not isinstance(body, dict) or body.get("action_type") != "terminate":
            raise wire.bad("action_type", f"'{(body or {}).get('action_type')}' is not supported (terminate)")
        rec = record(project_id, job_id)
        if rec["state"] not in wire.ALIVE:
            phase = wire.job_to_wire(rec)["status"]["phase"]
            raise ApiError(400, "ModelArts.2767", f"The training job in phase {phase} cannot be terminated.")
        try:  # ModelArts stops the containers: SIGTERM, then SIGKILL after the grace period
            engine.cancel(
                job_id, reason="terminate", create_final_checkpoint=True, platform=wire.PLATFORM, request=body
            )
        except StateConflict as exc:
            raise ApiError(
                400, "ModelArts.2767", f"The training job in state {exc.state} cannot be terminated."
            ) from None
        return JSONResponse(wire.job_to_wire(record(project_id, job_id)), status_code=202)

    @router.delete(ROOT + "/training-jobs/{job_id}")
    async def delete(request: Request, project_id: str, job_id: str) -> Response:
        await checked(request)
        record(project_id, job_id)
        try:  # Huawei documents no answer for a live job: refused rather than stopped behind the caller
            engine.delete(job_id, platform=wire.PLATFORM)
        except StateConflict:
            raise ApiError(
                400, "ModelArts.2768", "A running training job cannot be deleted; terminate it first."
            ) from None
        tms_tags.remove(job_id)
        return Response(status_code=202)

    def project_records(project_id: str) -> list[dict[str, Any]]:
        return [r for r in engine.list(wire.PLATFORM) if _project(r) == project_id]

    @router.post(ROOT + "/training-job-searches")
    async def job_search(request: Request, project_id: str) -> JSONResponse:
        body = json_body(await checked(request))
        if not isinstance(body, dict):
            raise wire.bad("body", "must be a JSON object")
        jobs = [wire.job_to_wire(r) for r in project_records(project_id)]
        return JSONResponse(search.search(jobs, body, tms_tags.of))

    @router.get(ROOT + "/training-jobs/{job_id}/events")
    async def events(request: Request, project_id: str, job_id: str) -> JSONResponse:
        await checked(request)
        lines = wire.events_to_wire(record(project_id, job_id))
        return JSONResponse(search.events(lines, request.query_params))

    @router.get(ROOT + "/training-jobs/{job_id}/metrics/{task_id}")
    async def metrics(request: Request, project_id: str, job_id: str, task_id: str) -> JSONResponse:
        await checked(request)
        record(project_id, job_id)
        if task_id not in wire.TASKS:
            raise wire.bad(
                "task_id", f"'{task_id}' is not a task of training job {job_id} ({', '.join(wire.TASKS)})"
            )
        # no resource usage is sampled locally: every series is empty, not made up
        return JSONResponse({"metrics": [{"metric": name, "value": []} for name in RESOURCE_METRICS]})

    add_tag_routes(
        router,
        tms_tags,
        checked,
        record,
        lambda project_id: [r["job_id"] for r in project_records(project_id)],
    )

    @router.get(TASK_LOGS + "/preview")
    async def log_preview(request: Request, project_id: str, job_id: str, task_id: str) -> JSONResponse:
        await checked(request)
        lines = logs.task_lines(engine, record(project_id, job_id), task_id)
        return JSONResponse(logs.preview(logs.log_text(lines)))

    @router.get(TASK_LOGS + "/url")
    async def log_url(request: Request, project_id: str, job_id: str, task_id: str) -> JSONResponse:
        await checked(request)
        logs.task_lines(engine, record(project_id, job_id), task_id)  # the job and task exist
        path = _log_file_path(project_id, job_id, task_id)
        expires = int(time.time()) + LOG_URL_SECONDS
        base = str(request.base_url).rstrip("/")
        query = f"Expires={expires}&Signature={link_signature(path, expires)}"
        return JSONResponse({"obs_url": f"{base}{path}?{query}"})

    @router.get(TASK_LOGS + "/file/{file_name}")
    async def log_file(
        request: Request, project_id: str, job_id: str, task_id: str, file_name: str
    ) -> Response:
        # the link is its own credential (no request signature), valid until Expires
        q = request.query_params
        expires = _int(q.get("Expires"), "Expires", 0, 0)
        wanted = link_signature(_log_file_path(project_id, job_id, task_id), expires)
        if expires < time.time() or not hmac.compare_digest(wanted, q.get("Signature") or ""):
            raise ApiError(403, "ModelArts.0203", "The log link is invalid or has expired.")
        if file_name != logs.log_file_name(job_id, task_id):
            raise wire.bad("file_name", f"'{file_name}' is not the log of task {task_id}")
        lines = logs.task_lines(engine, record(project_id, job_id), task_id)
        return PlainTextResponse(logs.log_text(lines))

    @router.get(ROOT + "/training-jobs/{job_id}/logs/{task_id}")
    async def aom_lines(request: Request, project_id: str, job_id: str, task_id: str) -> JSONResponse:
        await checked(request)
        lines = logs.task_lines(engine, record(project_id, job_id), task_id)
        q = request.query_params
        count = _int(q.get("lines"), "lines", logs.AOM_LINES_DEFAULT, 1)
        return JSONResponse(logs.aom_lines(lines, q.get("base_line"), count, q.get("order") or "desc"))

    return router


def _log_file_path(project_id: str, job_id: str, task_id: str) -> str:
    """Where the local platform serves a task's whole log (the ``…/logs/url`` link's path)."""
    name = logs.log_file_name(job_id, task_id)
    return f"/v2/{project_id}/training-jobs/{job_id}/tasks/{task_id}/logs/file/{name}"


def _project(rec: dict[str, Any]) -> str | None:
    return (rec.get("labels") or {}).get("project_id")


def _int(raw: str | None, field: str, default: int, lowest: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise wire.bad(field, f"'{raw}' is not an integer") from None
    if value < lowest:
        raise wire.bad(field, f"'{raw}' must be at least {lowest}")
    return value
