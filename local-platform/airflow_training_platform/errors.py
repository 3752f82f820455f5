"""API errors of the local platform and how each sub-application renders them.

Handlers raise :class:`ApiError`; each platform's sub-application renders it in that platform's
wire format with its own :data:`Renderer` (:func:`install_error_handlers`). The default renderer,
used by TensorOne and the ``/_local`` endpoints, is TensorOne's envelope
(``docs/platforms/tensorone.md``)::

    {"error": CODE, "message": str, "code": http_status, "details": {...},
     "request_id": "req_...", "timestamp": ISO-8601}
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_training_platform.formatting import iso, new_request_id
from airflow_training_platform.json_answers import JSONResponse

log = logging.getLogger(__name__)

STATUS_CODES = {
    400: "VALIDATION_ERROR",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "RESOURCE_NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "STATE_CONFLICT",
    422: "SEMANTIC_ERROR",
    429: "RATE_LIMIT_EXCEEDED",
    500: "INTERNAL_ERROR",
    501: "NOT_IMPLEMENTED",
    502: "BAD_GATEWAY",
    503: "SERVICE_UNAVAILABLE",
}
"""Default error code per HTTP status."""


class ApiError(Exception):
    """An error answered with the envelope: ``status`` (HTTP int), ``code`` (e.g. ``"STATE_CONFLICT"``),
    ``message`` (str), ``details`` (dict), optional extra response ``headers``."""

    def __init__(
        self,
        status: int,
        code: str | None,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.code = code or STATUS_CODES.get(status, "ERROR")
        self.message = message
        self.details = details or {}
        self.headers = headers or {}


Renderer = Callable[[Request, ApiError], JSONResponse]
"""Turns an :class:`ApiError` into a response for one platform's wire format."""


def request_id(request: Request) -> str:
    """The request's id (set by the app middleware; generated if missing)."""
    rid = getattr(request.state, "request_id", None)
    if rid is None:
        rid = request.state.request_id = new_request_id()
    return rid


def render_envelope(request: Request, err: ApiError) -> JSONResponse:
    """Default renderer: the TensorOne error envelope."""
    body = {
        "error": err.code,
        "message": err.message,
        "code": err.status,
        "details": err.details,
        "request_id": request_id(request),
        "timestamp": iso(time.time()),
    }
    return JSONResponse(body, status_code=err.status, headers=err.headers)


def _field_of(loc: tuple | list) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or (str(loc[0]) if loc else "body")


def install_error_handlers(app: FastAPI, render: Renderer = render_envelope) -> None:
    """Route every error of ``app`` (ApiError, request validation, HTTP errors, unhandled exceptions)
    through ``render``. FastAPI's 422 request validation errors become 400 VALIDATION_ERROR with
    ``details.field`` naming the first bad field."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return render(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {
                "field": "body" if e.get("type") == "json_invalid" else _field_of(e.get("loc", ())),
                "location": (e.get("loc") or ["body"])[0],
                "message": e.get("msg"),
            }
            for e in exc.errors()
        ]
        first = errors[0] if errors else {"field": "body", "message": "invalid request"}
        msg = f"Invalid value for '{first['field']}': {first['message']}"
        return render(
            request, ApiError(400, "VALIDATION_ERROR", msg, {"field": first["field"], "errors": errors})
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return render(request, ApiError(exc.status_code, None, str(exc.detail), headers=exc.headers))

    @app.exception_handler(Exception)
    async def _unhandled(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return render(request, ApiError(500, "INTERNAL_ERROR", f"{type(exc).__name__}: {exc}"))
