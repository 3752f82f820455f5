"""The local training platform as one ASGI application.

``create_app(settings)`` builds one sub-application per emulated platform
(:data:`~.platforms.LOCAL_PLATFORMS`: TensorOne under ``/v2/training``, Together AI under
``/v1/fine-tunes``...) over one :class:`~.engine.TrainingEngine`, each with its own routes, wire
format and error rendering, and a control app with local-only endpoints (no auth):

* ``GET /_local/health`` → ``{"status": "ok"}``
* ``GET /_local/jobs[?tag=...&tag=...&platform=...]`` → ``{"jobs": [full engine records]}`` (those
  carrying every ``tag``, of ``platform``) (state history, cancel_requests with
  ``received_at``, submit time, checkpoint files, events, pids, …: for tests and benchmarks)
* ``GET /_local/jobs/{job_id}`` → one full record (404 if unknown)
* ``POST /_local/jobs/{job_id}/cancel`` → "the console": a person cancels the job outside Airflow,
  whatever its platform (body ``{"reason", "create_final_checkpoint"}``, both optional; 409 if it
  already ended); answers the record
* ``POST /_local/jobs/{job_id}/backdate`` → move its creation time back (body ``{"seconds"}``),
  for tests of job lists bounded in time; answers the record
* ``GET /_local/settings`` → the effective settings (api key redacted)
* ``POST|GET|DELETE /_local/faults`` → HTTP fault injection rules (see :mod:`.faults`)
* ``GET /_local/quotas`` → ``{"quotas": {platform: {class: {limit, window_seconds, used, remaining,
  reset_at}}}}``; ``PUT /_local/quotas`` (body ``{platform: {class: {limit, window_seconds}} or a
  preset name}``) replaces them, opening new windows; ``DELETE /_local/quotas`` removes them all
  (see :mod:`.quotas`; 400 ``INVALID_REQUEST`` naming what is wrong)
* ``GET /_local/requests`` → ``{"platforms": {platform: {total, throttled, by_class,
  throttled_by_class, by_route, by_job}}}``: every request each platform received (throttled ones
  too); ``DELETE /_local/requests`` resets the counts. ``/_local`` itself is neither metered nor counted
* any other path no platform serves → 501 ``NOT_IMPLEMENTED`` (an API it does not emulate: refused,
  never a "not found" a client could read as a missing job)

The engine starts in the control app's lifespan and is shut down (every trainer child killed) when
it ends. ``app.state`` (on the control app, and the returned app's ``state``) holds ``engine``,
``settings``, ``faults`` and ``meter``.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request

from airflow_training_platform.dispatch import PlatformDispatcher
from airflow_training_platform.engine import JobNotFound, StateConflict, TrainingEngine
from airflow_training_platform.errors import ApiError, install_error_handlers
from airflow_training_platform.faults import FaultInjector, FaultRule
from airflow_training_platform.json_answers import JSONResponse, RawJSONRoute
from airflow_training_platform.platforms import LOCAL_PLATFORMS, AppContext
from airflow_training_platform.platforms.base import NOT_IMPLEMENTED_METHODS
from airflow_training_platform.quotas import QuotaError, RequestMeter, parse_quotas
from airflow_training_platform.settings import CommonSettings


def create_app(settings: CommonSettings, engine: TrainingEngine | None = None) -> PlatformDispatcher:
    """Build the platform. ``engine`` defaults to a new engine from ``settings``."""
    engine = engine or TrainingEngine(settings.engine_config())
    faults = FaultInjector()
    meter = RequestMeter(settings.parsed_quotas())
    control = _control_app(engine, settings, faults, meter)
    context = AppContext(engine, settings, faults, meter)
    app = PlatformDispatcher([(p, p.build(context)) for p in LOCAL_PLATFORMS], control)
    app.state = control.state
    return app


def _control_app(
    engine: TrainingEngine, settings: CommonSettings, faults: FaultInjector, meter: RequestMeter
) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        engine.start()
        try:
            yield
        finally:
            engine.shutdown()

    app = FastAPI(title="Local training platform", lifespan=lifespan, default_response_class=JSONResponse)
    app.router.route_class = RawJSONRoute  # NaN reaches the client as NaN, not null
    app.state.engine = engine
    app.state.settings = settings
    app.state.faults = faults
    app.state.meter = meter
    install_error_handlers(app)

    @app.get("/_local/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/_local/settings")
    def show_settings() -> dict[str, Any]:
        return settings.shown()

    @app.get("/_local/jobs")
    def all_jobs(
        tag: Annotated[list[str] | None, Query()] = None, platform: str | None = None
    ) -> dict[str, Any]:
        return {"jobs": engine.list(platform=platform, tags=tag or ())}

    @app.get("/_local/jobs/{job_id}")
    def one_job(job_id: str) -> dict[str, Any]:
        try:
            return engine.get(job_id)
        except JobNotFound:
            raise ApiError(404, "RESOURCE_NOT_FOUND", f"job '{job_id}' not found") from None

    @app.post("/_local/jobs/{job_id}/cancel")
    def console_cancel(job_id: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        body = body or {}
        try:
            return engine.cancel(
                job_id,
                reason=body.get("reason", "stopped from the console"),
                create_final_checkpoint=bool(body.get("create_final_checkpoint", True)),
                request=body,
            )
        except JobNotFound:
            raise ApiError(404, "RESOURCE_NOT_FOUND", f"job '{job_id}' not found") from None
        except StateConflict as exc:
            raise ApiError(409, "STATE_CONFLICT", f"job '{job_id}' is already {exc.state}") from None

    @app.post("/_local/jobs/{job_id}/backdate")
    def backdate(job_id: str, body: dict[str, Any]) -> dict[str, Any]:
        seconds = body.get("seconds")
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
            raise ApiError(400, "INVALID_REQUEST", "'seconds' must be a number of seconds, 0 or more")
        try:
            return engine.backdate(job_id, float(seconds))
        except JobNotFound:
            raise ApiError(404, "RESOURCE_NOT_FOUND", f"job '{job_id}' not found") from None

    @app.post("/_local/faults", status_code=201)
    def add_fault(rule: FaultRule) -> dict[str, Any]:
        return faults.add(rule).model_dump()

    @app.get("/_local/faults")
    def list_faults() -> dict[str, Any]:
        return {"faults": faults.list()}

    @app.delete("/_local/faults")
    def clear_faults(path_prefix: str | None = None, id: str | None = None) -> dict[str, Any]:
        faults.clear(path_prefix, id)
        return {"faults": faults.list()}

    @app.get("/_local/quotas")
    def show_quotas() -> dict[str, Any]:
        return {"quotas": meter.quotas()}

    @app.put("/_local/quotas")
    def set_quotas(body: dict[str, Any]) -> dict[str, Any]:
        try:
            meter.set_quotas(parse_quotas(body, [p.name for p in LOCAL_PLATFORMS]))
        except QuotaError as exc:
            raise ApiError(400, "INVALID_REQUEST", str(exc)) from None
        return {"quotas": meter.quotas()}

    @app.delete("/_local/quotas")
    def clear_quotas() -> dict[str, Any]:
        meter.set_quotas({})
        return {"quotas": meter.quotas()}

    @app.get("/_local/requests")
    def request_counts() -> dict[str, Any]:
        return meter.requests()

    @app.delete("/_local/requests")
    def reset_request_counts() -> dict[str, Any]:
        meter.reset_requests()
        return meter.requests()

    @app.api_route("/{path:path}", methods=NOT_IMPLEMENTED_METHODS, include_in_schema=False)
    def not_served(request: Request, path: str) -> None:
        # an API the local platform does not emulate (IAM, ECR, …): refused, not "not found"
        raise ApiError(
            501,
            "NOT_IMPLEMENTED",
            f"{request.method} {request.url.path} is served by no platform the local training "
            "platform emulates; see docs/local-platform.md for what it serves",
        )

    return app
