"""TensorOne v2 training REST API over the local engine (``docs/platforms/tensorone.md``).

Endpoints (all need ``Authorization: Bearer <key>`` or ``Authorization: <key>``):

* ``POST /v2/training/jobs`` → 201 create response
* ``GET /v2/training/jobs?status=&tag=&limit=&offset=`` → ``{jobs, totalCount, limit, offset}``
* ``GET /v2/training/jobs/{jobId}?includeMetrics=&includeLogs=&logLines=`` → job object
* ``POST /v2/training/jobs/{jobId}/cancel`` → 200 cancel response (409 STATE_CONFLICT if terminal)
* ``GET /v2/training/jobs/{jobId}/checkpoints?includeMetrics=&sortBy=&sortOrder=&limit=``

Field shapes are built in :mod:`.tensorone_wire`; errors use the envelope of :mod:`..errors`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query

from airflow_training_platform.auth import bearer_auth
from airflow_training_platform.engine import (
    InvalidJobSpec,
    JobNotFound,
    StateConflict,
    TrainingEngine,
)
from airflow_training_platform.errors import ApiError
from airflow_training_platform.json_answers import RawJSONRoute
from airflow_training_platform.platforms.tensorone import wire

PREFIX = "/v2/training"


def _not_found(job_id: str) -> ApiError:
    return ApiError(404, "RESOURCE_NOT_FOUND", f"Training job '{job_id}' not found", {"jobId": job_id})


def build_router(
    engine: TrainingEngine, api_key: str | None = None, cancel_wait_seconds: float = 5.0
) -> APIRouter:
    """Return the TensorOne router bound to ``engine``.

    api_key: required key, or None to accept any non-empty key.
    cancel_wait_seconds: how long the cancel handler waits for the trainer to exit before answering
        (``cancelled`` if it exited in time, else ``cancelling``).
    """
    router = APIRouter(
        route_class=RawJSONRoute,
        prefix=PREFIX,
        dependencies=[Depends(bearer_auth(api_key))],
        tags=["tensorone"],
    )

    def record(job_id: str) -> dict[str, Any]:
        try:
            return engine.get(job_id, platform=wire.PLATFORM)
        except JobNotFound:
            raise _not_found(job_id) from None

    @router.post("/jobs", status_code=201)
    def create_job(body: Annotated[Any, Body()] = None) -> dict[str, Any]:
        spec, fields = wire.parse_create(body)
        try:
            rec = engine.submit(spec)
        except InvalidJobSpec as exc:
            field = fields.get(exc.field, exc.field)
            raise ApiError(
                400, "VALIDATION_ERROR", f"Invalid value for '{field}': {exc}", {"field": field}
            ) from None
        return wire.create_response(rec)

    @router.get("/jobs")
    def list_jobs(
        status: Annotated[
            list[str] | None, Query(description="state filter; repeat or comma-separate")
        ] = None,
        tag: Annotated[list[str] | None, Query(description="tag filter; repeat, all must match")] = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 50,
        offset: Annotated[int, Query(ge=0)] = 0,
        includeMetrics: bool = True,
    ) -> dict[str, Any]:
        wanted = {s.strip() for value in status or [] for s in value.split(",") if s.strip()}
        unknown = sorted(wanted - set(wire.STATUSES))
        if unknown:
            raise ApiError(
                400,
                "VALIDATION_ERROR",
                f"Invalid value for 'status': {unknown}",
                {"field": "status", "allowed": list(wire.STATUSES)},
            )
        # only the jobs in the statuses asked are snapshotted (a coalesced poll lists the live ones)
        states = (
            [state for state in wire.ENGINE_STATES if wire.status_of(state) in wanted] if wanted else None
        )
        recs = list(reversed(engine.list(platform=wire.PLATFORM, tags=tag or (), states=states)))
        page = recs[offset : offset + limit]
        return {
            "jobs": [wire.job_to_wire(r, include_metrics=includeMetrics) for r in page],
            "totalCount": len(recs),
            "limit": limit,
            "offset": offset,
        }

    @router.get("/jobs/{jobId}")
    def get_job(
        job_id: Annotated[str, Path(alias="jobId")],
        includeMetrics: bool = True,
        includeLogs: bool = False,
        logLines: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        return wire.job_to_wire(record(job_id), includeMetrics, includeLogs, logLines)

    @router.post("/jobs/{jobId}/cancel")
    def cancel_job(
        job_id: Annotated[str, Path(alias="jobId")], body: Annotated[Any, Body()] = None
    ) -> dict[str, Any]:
        kwargs = wire.parse_cancel(body)
        try:
            engine.cancel(job_id, platform=wire.PLATFORM, request=body, **kwargs)
        except JobNotFound:
            raise _not_found(job_id) from None
        except StateConflict as exc:
            raise ApiError(
                409,
                "STATE_CONFLICT",
                f"Training job '{job_id}' cannot be cancelled: it is already {wire.status_of(exc.state)}",
                {"jobId": job_id, "status": wire.status_of(exc.state)},
            ) from None
        engine.wait_for_terminal(job_id, cancel_wait_seconds)
        return wire.cancel_response(record(job_id))

    @router.get("/jobs/{jobId}/checkpoints")
    def list_checkpoints(
        job_id: Annotated[str, Path(alias="jobId")],
        includeMetrics: bool = True,
        sortBy: str = "createdAt",
        sortOrder: str = "asc",
        limit: Annotated[int, Query(ge=1, le=100)] = 100,
    ) -> dict[str, Any]:
        return wire.checkpoints_response(record(job_id), sortBy, sortOrder, limit, includeMetrics)

    return router
