"""ModelArts training-job operations (API v2) over the local engine (``docs/platforms/modelarts.md``),
every request checked against its SDK-HMAC-SHA256 signature or IAM token (:mod:`.signing`).

``POST /v2/{project_id}/training-jobs`` (create, 201), ``GET …/training-jobs/{id}`` (show; 404 for an
unknown one), ``POST …/training-jobs/{id}/actions`` (``{"action_type": "terminate"}``, 202; 400 for
a job that has ended), ``DELETE …/training-jobs/{id}`` (202), ``POST …/training-job-searches``
(search) and ``GET …/training-jobs/{id}/events``. A job belongs to the project it was created in.
With ``--allow-user-code`` a create naming the user's code runs it (:mod:`.user_code`).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from airflow_training_platform.engine import (
    USER_CODE_REFUSED,
    InvalidJobSpec,
    JobNotFound,
    StateConflict,
    TrainingEngine,
)
from airflow_training_platform.errors import ApiError
from airflow_training_platform.platforms.modelarts import user_code, wire
from airflow_training_platform.platforms.modelarts.signing import verify

ROOT = "/v2/{project_id}"


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
    router = APIRouter(tags=["modelarts"])

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
        rec = record(project_id, job_id)
        if rec["state"] in wire.ALIVE:
            raise ApiError(
                400, "ModelArts.2768", "A running training job cannot be deleted; terminate it first."
            )
        return Response(status_code=202)

    @router.post(ROOT + "/training-job-searches")
    async def search(request: Request, project_id: str) -> JSONResponse:
        body = json_body(await checked(request))
        if not isinstance(body, dict):
            raise wire.bad("body", "must be a JSON object")
        records = [r for r in engine.list(wire.PLATFORM) if _project(r) == project_id]
        return JSONResponse(wire.search(records, body))

    @router.get(ROOT + "/training-jobs/{job_id}/events")
    async def events(request: Request, project_id: str, job_id: str) -> JSONResponse:
        await checked(request)
        rec = record(project_id, job_id)
        q = request.query_params
        offset, limit = _int(q.get("offset"), "offset", 0, 0), _int(q.get("limit"), "limit", 50, 1)
        if limit > 100:
            raise wire.bad("limit", f"'{limit}' must be at most 100")
        order = q.get("order") or "desc"
        lines = wire.events_to_wire(rec)
        if level := q.get("level"):
            lines = [e for e in lines if e["level"] == level]
        if order == "desc":
            lines.reverse()
        return JSONResponse(
            {
                "total": len(lines),
                "limit": limit,
                "offset": offset,
                "order": order,
                "events": lines[offset : offset + limit],
            }  # fmt: skip
        )

    return router


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
