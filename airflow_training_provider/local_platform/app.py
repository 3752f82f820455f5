"""FastAPI application of the local training platform.

``create_app(settings)`` mounts the platform routers (TensorOne v2 under ``/v2/training``, Together AI
under ``/v1/fine-tunes`` with its own error body) over one
:class:`~airflow_training_provider.local_platform.engine.TrainingEngine` and local-only endpoints
(no auth):

* ``GET /_local/health`` → ``{"status": "ok"}``
* ``GET /_local/jobs`` → ``{"jobs": [full engine records]}`` (state history, cancel_requests with
  ``received_at``, submit time, checkpoint files, events, pids, …: for tests and benchmarks)
* ``GET /_local/jobs/{job_id}`` → one full record (404 if unknown)
* ``GET /_local/settings`` → the effective settings (api key redacted)
* ``POST|GET|DELETE /_local/faults`` → HTTP fault injection rules (see :mod:`.faults`)

The engine starts in the app lifespan and is shut down (every trainer child killed) when it ends.
"""

from __future__ import annotations

import dataclasses
import os
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request

from airflow_training_provider.local_platform.engine import EngineConfig, JobNotFound, TrainingEngine
from airflow_training_provider.local_platform.errors import ApiError, install_error_handlers
from airflow_training_provider.local_platform.faults import FaultInjector, FaultRule
from airflow_training_provider.local_platform.formatting import new_request_id
from airflow_training_provider.local_platform.routers import tensorone, together, together_wire


@dataclass
class PlatformSettings:
    """Server options.

    data_dir: where job directories and checkpoints go (created if missing).
    gpus: simulated GPUs (concurrent job slots). usd_per_gpu_hour: price (USD).
    seconds_per_epoch: default trainer pacing (s) for jobs that do not set it.
    grace_seconds: graceful-cancel grace before SIGKILL (s).
    cancel_wait_seconds: how long a cancel request waits for the trainer to exit before answering (s).
    cancel_delay_seconds: test option, every cancel sleeps this long before acting (s).
    api_key: required API key; None accepts any non-empty key.
    max_log_lines: trainer lines kept per job.
    together_balance_usd: Together account balance (USD) shared by its jobs; None = unlimited.
    """

    data_dir: str
    gpus: int = 1
    usd_per_gpu_hour: float = 2.50
    seconds_per_epoch: float = 1.0
    grace_seconds: float = 10.0
    cancel_wait_seconds: float = 5.0
    cancel_delay_seconds: float = 0.0
    api_key: str | None = None
    max_log_lines: int = 2000
    together_balance_usd: float | None = None

    def engine_config(self) -> EngineConfig:
        """The engine part of these settings."""
        return EngineConfig(
            data_dir=os.path.abspath(self.data_dir),
            gpus=self.gpus,
            usd_per_gpu_hour=self.usd_per_gpu_hour,
            seconds_per_epoch=self.seconds_per_epoch,
            grace_seconds=self.grace_seconds,
            cancel_delay_seconds=self.cancel_delay_seconds,
            max_log_lines=self.max_log_lines,
        )


def create_app(settings: PlatformSettings, engine: TrainingEngine | None = None) -> FastAPI:
    """Build the app. ``engine`` defaults to a new engine from ``settings``; the app's lifespan starts it
    and shuts it down (the engine is also reachable as ``app.state.engine``)."""
    engine = engine or TrainingEngine(settings.engine_config())
    faults = FaultInjector()

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        engine.start()
        try:
            yield
        finally:
            engine.shutdown()

    app = FastAPI(title="Local training platform", lifespan=lifespan)
    app.state.engine = engine
    app.state.settings = settings
    app.state.faults = faults
    install_error_handlers(app, [(together.PREFIX, together_wire.render_error)])
    app.middleware("http")(faults.middleware)

    @app.middleware("http")
    async def _request_id(request: Request, call_next):
        request.state.request_id = new_request_id()
        response = await call_next(request)
        response.headers["X-Request-ID"] = request.state.request_id
        return response

    app.include_router(
        tensorone.build_router(
            engine, api_key=settings.api_key, cancel_wait_seconds=settings.cancel_wait_seconds
        )
    )
    app.include_router(
        together.build_router(engine, api_key=settings.api_key, balance_usd=settings.together_balance_usd)
    )

    @app.get("/_local/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/_local/settings")
    def show_settings() -> dict[str, Any]:
        data = dataclasses.asdict(settings)
        data["api_key"] = "***" if settings.api_key else None
        return data

    @app.get("/_local/jobs")
    def all_jobs() -> dict[str, Any]:
        return {"jobs": engine.list()}

    @app.get("/_local/jobs/{job_id}")
    def one_job(job_id: str) -> dict[str, Any]:
        try:
            return engine.get(job_id)
        except JobNotFound:
            raise ApiError(404, "RESOURCE_NOT_FOUND", f"job '{job_id}' not found") from None

    @app.post("/_local/faults", status_code=201)
    def add_fault(rule: FaultRule) -> dict[str, Any]:
        return faults.add(rule).model_dump()

    @app.get("/_local/faults")
    def list_faults() -> dict[str, Any]:
        return {"faults": faults.list()}

    @app.delete("/_local/faults")
    def clear_faults(path_prefix: str | None = None) -> dict[str, Any]:
        faults.clear(path_prefix)
        return {"faults": faults.list()}

    return app
