"""What an emulated platform is on the local training platform: one sub-application with its own
routes, wire translation and error rendering, over the shared engine, plus the settings it adds.

The dispatcher (:mod:`..dispatch`) sends each request to the first platform that :meth:`serves` it:
by path prefix (``/v2/training``), or by a predicate on the request (an AWS-style ``POST /`` with an
``X-Amz-Target`` header).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel, Field

from airflow_training_platform.engine import TrainingEngine
from airflow_training_platform.errors import ApiError, Renderer, install_error_handlers, request_id
from airflow_training_platform.faults import FaultInjector
from airflow_training_platform.json_answers import JSONResponse
from airflow_training_platform.metering import Metering, MeteringMiddleware
from airflow_training_platform.quotas import RequestMeter


def secret_setting(description: str) -> Any:
    """An optional setting that is a secret (a key's secret, a token): declared so, the settings
    never show it back (``/_local/settings`` redacts it)."""
    return Field(None, description=description, json_schema_extra={"secret": True})


@dataclass(frozen=True)
class AppContext:
    """What a platform's sub-application is built from: the shared engine, the settings (an instance
    of the composed settings model, so ``settings.<platform>_<option>`` is there), the fault rules
    and the request meter (quotas and request counts, :mod:`..quotas`)."""

    engine: TrainingEngine
    settings: Any
    faults: FaultInjector
    meter: RequestMeter = field(default_factory=RequestMeter)


@dataclass(frozen=True)
class LocalPlatform:
    """One emulated platform.

    :ivar name: the engine's ``platform`` of its jobs, e.g. ``"tensorone"``.
    :ivar build: ``build(context) -> FastAPI``, the platform's sub-application.
    :ivar path_prefix: the paths it serves, when it is told apart by path.
    :ivar match: ``match(scope) -> bool`` for the requests it serves, when the path is not enough.
    :ivar options: a pydantic model of its settings; field names start with ``<name>_`` (they become
        ``--<name>-<option>`` CLI flags and ``LocalPlatformServer`` options).
    """

    name: str
    build: Callable[[AppContext], FastAPI]
    path_prefix: str | None = None
    match: Callable[[dict[str, Any]], bool] | None = None
    options: type[BaseModel] | None = None

    def serves(self, scope: dict[str, Any]) -> bool:
        if self.match is not None:
            return self.match(scope)
        return self.path_prefix is not None and scope.get("path", "").startswith(self.path_prefix)


NOT_IMPLEMENTED_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def platform_app(
    title: str,
    router: APIRouter,
    render: Renderer,
    faults: FaultInjector,
    not_implemented_code: str | None = None,
    meter: RequestMeter | None = None,
    metering: Metering | None = None,
) -> FastAPI:
    """A platform's sub-application: ``router``'s routes, every error rendered by ``render``, fault
    injection (errors in the same format) and an ``X-Request-ID`` on every answer.

    ``meter`` and ``metering`` (the platform's :class:`~..metering.Metering`): every request is
    counted and drawn from its quota before fault injection and the handler; a throttled one is
    answered in the same format and goes no further (:mod:`..quotas`).

    A request the router does not serve (an operation of the real API the local platform lacks, or
    a method a path does not take) is answered 501 in the platform's own error format (its code for
    501, or ``not_implemented_code``), never a 404 that would read as "this job does not exist"."""
    app = FastAPI(
        title=title, openapi_url=None, docs_url=None, redoc_url=None, default_response_class=JSONResponse
    )
    install_error_handlers(app, render)
    app.middleware("http")(faults.middleware(render))
    if meter is not None and metering is not None:  # outside the faults: a throttled request is
        # never faulted nor handled
        app.add_middleware(MeteringMiddleware, meter=meter, metering=metering, render=render)

    @app.middleware("http")
    async def _request_id(request: Request, call_next):
        rid = request_id(request)
        response = await call_next(request)
        response.headers["X-Request-ID"] = rid
        return response

    app.include_router(router)

    @app.api_route("/{path:path}", methods=NOT_IMPLEMENTED_METHODS, include_in_schema=False)
    async def _not_implemented(request: Request, path: str):
        raise ApiError(
            501,
            not_implemented_code,
            f"{request.method} {request.url.path} is not implemented by the local training platform "
            f"({title}); see docs/local-platform.md for what it serves",
        )

    return app
