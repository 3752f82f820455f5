"""Together AI fine-tuning API over the local engine (``docs/platforms/together.md``).

Endpoints (all need ``Authorization: Bearer <key>`` or ``Authorization: <key>``):

* ``POST /v1/fine-tunes`` → 200 truncated job, status ``pending`` (402 ``insufficient_balance`` once the
  account balance is used up)
* ``GET /v1/fine-tunes[?x_airflow_tag=...]`` → ``{"data": [truncated jobs]}``, oldest first; every
  ``x_airflow_tag`` (local extension) must be on the job
* ``GET /v1/fine-tunes/{id}`` → job object with its events embedded
* ``POST /v1/fine-tunes/{id}/cancel`` (any body ignored) → truncated job, at once: ``cancel_requested``
  while the trainer stops (then ``cancelled``), or ``cancelled`` for a job not started yet. A job that
  already ended is a **400** ``job_not_cancellable`` ("... cannot be cancelled: it is already
  completed"), not an unchanged 200: the caller can tell "nothing was cancelled" from "cancelled"
  (Together does not document this answer; the provider's dialect reads it as a state conflict).
* ``DELETE /v1/fine-tunes/{id}[?force=]`` → ``{"message"}``: the job is gone (a later GET is a 404
  ``not_found``); a job that has not ended is a **400** ``job_not_deletable`` (cancel it first: Together
  does not document deleting a running job). ``force`` is deprecated and unused, as Together says.
* ``GET /v3/whoami`` (the CLI asks it before every command) and ``GET /v1/whoami`` → the local
  account's project API key (:mod:`.identity`)
* ``GET /v1/fine-tunes/{id}/events`` → ``{"data": [events]}``, oldest first, lower-case types
* ``GET /v1/fine-tunes/{id}/checkpoints`` → ``{"data": [checkpoints]}``, lowest step first
* ``GET /v1/fine-tunes/{id}/metrics[?global_step_from&global_step_to&logged_at_from&logged_at_to&resolution]``
  → ``{"metrics": [rows]}``, oldest first (rows: :func:`.wire.metrics_to_wire`)
* ``GET /v1/fine-tunes/models/limits?model_name=`` → the model's limits (the same for every model)
* ``POST /v1/fine-tunes/estimate-price`` → ``{"estimation_available": true, "estimated_total_price",
  "allowed_to_proceed", ["user_limit"]}`` (USD; from the local price, see the engine's billing)

The official client (``together.Together(base_url=<server>/v1)``) asks for the limits and the price
estimate before every ``fine_tuning.create``.

Lifecycle: ``pending`` → ``queued`` → ``running`` → ``compressing`` → ``uploading`` → ``completed``
(engine: pending → queued → starting/running → finalizing stages → succeeded). Events:
``job_pending, job_start, model_download_complete, training_data_download_complete, [wandb_init],
training_start, (epoch_complete, checkpoint_save)..., training_complete, model_compressing,
model_uploading, job_complete``. Platform-initiated cancels (a bad ``wandb_key``; the account balance,
``balance_usd``, running out: ``billing_limit``) end in ``cancel_requested``, ``job_stopped``,
``cancelled``. Field shapes and the error body are in :mod:`.together_wire`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query

from airflow_training_platform.auth import bearer_auth
from airflow_training_platform.engine import (
    BudgetExhausted,
    InvalidJobSpec,
    JobNotFound,
    StateConflict,
    TrainingEngine,
)
from airflow_training_platform.errors import ApiError
from airflow_training_platform.json_answers import RawJSONRoute
from airflow_training_platform.platforms.together import identity, wire

PREFIX = "/v1/fine-tunes"
WHOAMI_PATHS = ("/v3/whoami", "/v1/whoami")
"""Where the account's identity is asked: the CLI calls ``/v3/whoami``, older clients ``/v1/whoami``."""
USER_CANCEL_MESSAGE = "Cancel requested by user"


def _not_found(job_id: str) -> ApiError:
    return ApiError(404, "NOT_FOUND", f"Fine-tune job {job_id} not found", {"field": "id"})


def build_router(
    engine: TrainingEngine, api_key: str | None = None, balance_usd: float | None = None
) -> APIRouter:
    """Return the Together router bound to ``engine``.

    api_key: required key, or None to accept any non-empty key.
    balance_usd: the account balance in USD shared by all Together jobs (None = unlimited); when
        their cost reaches it the engine cancels the unfinished ones (``billing_limit``).
    """
    auth = [Depends(bearer_auth(api_key))]
    router = APIRouter(route_class=RawJSONRoute, prefix=PREFIX, dependencies=auth, tags=["together"])
    if balance_usd is not None:
        engine.set_budget(
            wire.PLATFORM, balance_usd, wire.BILLING_CANCEL_MESSAGE, wire.billing_events(balance_usd)
        )

    def record(job_id: str) -> dict[str, Any]:
        try:
            return engine.get(job_id, platform=wire.PLATFORM)
        except JobNotFound:
            raise _not_found(job_id) from None

    def lookup(name: str) -> dict[str, Any] | None:
        try:
            return engine.get(name, platform=wire.PLATFORM)
        except JobNotFound:
            matches = [r for r in engine.list(wire.PLATFORM) if wire.model_output_name(r) == name]
            return matches[-1] if matches else None

    # Registered before "/{job_id}": "models" is not a job id.
    @router.get("/models/limits")
    def model_limits(model_name: Annotated[str, Query(min_length=1)]) -> dict[str, Any]:
        return wire.model_limits(model_name)

    @router.post("/estimate-price")
    def estimate_price(body: Annotated[Any, Body()] = None) -> dict[str, Any]:
        _, n_epochs = wire.parse_estimate(body)
        return wire.estimate_to_wire(engine.estimate_price(wire.PLATFORM, n_epochs))

    @router.post("")
    def create_job(body: Annotated[Any, Body()] = None) -> dict[str, Any]:
        spec, fields = wire.parse_create(body, lookup)
        try:
            rec = engine.submit(spec)
        except InvalidJobSpec as exc:
            raise wire.bad(fields.get(exc.field, exc.field), str(exc)) from None
        except BudgetExhausted as exc:
            raise ApiError(402, "INSUFFICIENT_BALANCE", f"Insufficient balance: {exc}") from None
        return wire.job_to_wire(rec, embed_events=False)

    @router.get("")
    def list_jobs(
        x_airflow_tag: Annotated[
            list[str] | None, Query(description="local extension: tag filter; repeat, all must match")
        ] = None,
    ) -> dict[str, Any]:
        tags = set(x_airflow_tag or [])
        recs = [r for r in engine.list(platform=wire.PLATFORM) if tags.issubset(r["tags"])]
        return {"data": [wire.job_to_wire(r, embed_events=False) for r in recs]}

    @router.get("/{job_id}")
    def get_job(job_id: Annotated[str, Path()]) -> dict[str, Any]:
        return wire.job_to_wire(record(job_id))

    @router.post("/{job_id}/cancel")
    def cancel_job(job_id: Annotated[str, Path()]) -> dict[str, Any]:
        try:
            rec = engine.cancel(
                job_id,
                reason=USER_CANCEL_MESSAGE,
                platform=wire.PLATFORM,
                message=USER_CANCEL_MESSAGE,
            )
        except JobNotFound:
            raise _not_found(job_id) from None
        except StateConflict:
            status = wire.status_of(record(job_id))
            raise ApiError(
                400,
                "JOB_NOT_CANCELLABLE",
                f"Fine-tune job {job_id} cannot be cancelled: it is already {status}",
                {"field": "id"},
            ) from None
        return wire.job_to_wire(rec, embed_events=False)

    @router.delete("/{job_id}")
    def delete_job(
        job_id: Annotated[str, Path()],
        force: Annotated[bool | None, Query(deprecated=True, description="deprecated and unused")] = None,
    ) -> dict[str, Any]:
        try:
            engine.delete(job_id, platform=wire.PLATFORM)
        except JobNotFound:
            raise _not_found(job_id) from None
        except StateConflict:
            status = wire.status_of(record(job_id))
            raise ApiError(
                400,
                "JOB_NOT_DELETABLE",
                f"Fine-tune job {job_id} cannot be deleted while it is {status}: cancel it first",
                {"field": "id"},
            ) from None
        return {"message": f"Fine-tune job {job_id} deleted"}

    @router.get("/{job_id}/events")
    def list_events(job_id: Annotated[str, Path()]) -> dict[str, Any]:
        return {"data": wire.events_to_wire(record(job_id))}

    @router.get("/{job_id}/checkpoints")
    def list_checkpoints(job_id: Annotated[str, Path()]) -> dict[str, Any]:
        return {"data": wire.checkpoints_to_wire(record(job_id))}

    @router.get("/{job_id}/metrics")
    def list_metrics(
        job_id: Annotated[str, Path()],
        global_step_from: Annotated[int | None, Query()] = None,
        global_step_to: Annotated[int | None, Query()] = None,
        logged_at_from: Annotated[datetime | None, Query()] = None,
        logged_at_to: Annotated[datetime | None, Query()] = None,
        resolution: Annotated[int | None, Query(ge=1)] = None,
    ) -> dict[str, Any]:
        rows = wire.metrics_to_wire(
            record(job_id),
            step_from=global_step_from,
            step_to=global_step_to,
            at_from=logged_at_from.timestamp() if logged_at_from else None,
            at_to=logged_at_to.timestamp() if logged_at_to else None,
            resolution=resolution,
        )
        return {"metrics": rows}

    top = APIRouter(route_class=RawJSONRoute, tags=["together"])
    for path in WHOAMI_PATHS:
        top.add_api_route(path, identity.whoami, methods=["GET"], dependencies=auth)
    top.include_router(router)
    return top
