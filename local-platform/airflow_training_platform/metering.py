"""Metering of each platform's requests (:mod:`.quotas`): an ASGI middleware in every platform's
sub-application that classifies a request, counts it and draws it from its quota, answering a
throttled one in the platform's own format before it reaches the handler.

A platform describes its metering with a :class:`Metering`: its ``classify`` (route class, route
name and job of a request; :class:`PathRoutes` does it from a router's own templates by method and
path), the ``throttled`` error it answers past a quota and, where the platform sends them on every
metered answer (TensorOne's ``X-RateLimit-*``), ``headers``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter
from fastapi.routing import APIRoute
from starlette.requests import Request

from airflow_training_platform.errors import ApiError, Renderer
from airflow_training_platform.quotas import ROUTE_CLASSES, QuotaState, RequestMeter

JobOf = str | Callable[[bytes], str | None] | None
"""The job a request names: its id, ``None``, or a function of the request body that finds it
(SageMaker's ``TrainingJobName``: the body is read only then)."""

Metered = tuple[str, str, JobOf]
"""What :attr:`Metering.classify` says of a request: (route class, route name, job)."""


@dataclass(frozen=True)
class Metering:
    """How one platform is metered.

    :ivar platform: its name (the engine's ``platform`` of its jobs), e.g. ``"tensorone"``.
    :ivar classify: ``classify(scope) -> Metered | None`` (``None``: another service on the same
        sub-application, e.g. S3 or STS, neither metered nor counted).
    :ivar throttled: ``throttled(state) -> ApiError``, the platform's answer past a quota.
    :ivar headers: ``headers(state) -> [(name, value)]`` added to every answer of a metered class
        that was not throttled (``None``: none).
    """

    platform: str
    classify: Callable[[Mapping[str, Any]], Metered | None]
    throttled: Callable[[QuotaState], ApiError]
    headers: Callable[[QuotaState], list[tuple[str, str]]] | None = None


class MeteringMiddleware:
    """ASGI middleware counting and throttling the requests of one platform (see the module doc);
    throttle errors are rendered by ``render``, the platform's error format."""

    def __init__(self, app: Any, meter: RequestMeter, metering: Metering, render: Renderer):
        self.app = app
        self.platform = metering.platform
        self.meter = meter
        self.metering = metering
        self.render = render

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        metered = self.metering.classify(scope) if scope["type"] == "http" else None
        if metered is None:
            await self.app(scope, receive, send)
            return
        cls, route, job = metered
        if callable(job):
            body, receive = await _buffered(receive)
            job = job(body)
        state = self.meter.admit(self.platform, cls, route, job)
        if state is None:
            await self.app(scope, receive, send)
        elif state.throttled:
            response = self.render(Request(scope, receive), self.metering.throttled(state))
            await response(scope, receive, send)
        elif self.metering.headers is None:
            await self.app(scope, receive, send)
        else:
            extra = [
                (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.metering.headers(state)
            ]

            async def send_with_headers(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    message = {**message, "headers": [*message.get("headers", ()), *extra]}
                await send(message)

            await self.app(scope, receive, send_with_headers)


async def _buffered(receive: Any) -> tuple[bytes, Any]:
    """Read the whole request body; returns it and a ``receive`` that gives it to the app again."""
    chunks: list[bytes] = []
    first: dict[str, Any] | None = None
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away: the app hears it
            first = message
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    replay = [first or {"type": "http.request", "body": body, "more_body": False}]

    async def again() -> dict[str, Any]:
        return replay.pop() if replay else await receive()

    return body, again


_JOB_PARAMETERS = ("job_id", "jobId")
"""Path parameters that name a job (the templates show them as ``{job_id}``)."""


class PathRoutes:
    """Classifies requests by method and path against ``router``'s routes (its templates, tried in
    order as the router tries them). A route's class is ``classes[route name]`` if given, else
    ``read`` for GET and HEAD and ``write`` for any other method. A request no route matches is
    ``METHOD (not served)`` (the platform answers it 501), classed by its method the same way.

    Route names are ``METHOD /template`` with the job parameter shown as ``{job_id}``, e.g.
    ``GET /v2/training/jobs/{job_id}``. :raises ValueError: a name in ``classes`` the router lacks."""

    def __init__(self, router: APIRouter, classes: Mapping[str, str] | None = None) -> None:
        classes = dict(classes or {})
        self._routes: dict[str, list[tuple[re.Pattern[str], str, str]]] = {}
        names: set[str] = set()
        for route in router.routes:
            if not isinstance(route, APIRoute):
                continue
            template = route.path
            for param in _JOB_PARAMETERS[1:]:
                template = template.replace("{" + param + "}", "{job_id}")
            for method in sorted(route.methods or ()):
                name = f"{method} {template}"
                names.add(name)
                cls = classes.get(name) or _by_method(method)
                self._routes.setdefault(method, []).append((route.path_regex, name, cls))
        if set(classes) - names or not set(classes.values()) <= set(ROUTE_CLASSES):
            raise ValueError(f"route classes {classes} name a route the router lacks or no class")

    def __call__(self, scope: Mapping[str, Any]) -> Metered:
        method, path = scope["method"], scope["path"]
        for regex, name, cls in self._routes.get(method, ()):
            match = regex.match(path)
            if match is not None:
                params = match.groupdict()
                return cls, name, params.get("job_id") or params.get("jobId")
        return _by_method(method), f"{method} (not served)", None


def _by_method(method: str) -> str:
    return "read" if method in ("GET", "HEAD") else "write"


def rate_limit_headers(state: QuotaState) -> list[tuple[str, str]]:
    """``X-RateLimit-Limit``, ``-Remaining``, ``-Reset`` (unix seconds) and ``-Window`` (seconds),
    as TensorOne sends them."""
    return [
        ("X-RateLimit-Limit", str(state.quota.limit)),
        ("X-RateLimit-Remaining", str(state.remaining)),
        ("X-RateLimit-Reset", str(math.ceil(state.reset_at))),
        ("X-RateLimit-Window", str(int(state.quota.window_seconds))),
    ]
