"""HTTP fault injection for tests of clients' retry / idempotency logic (local-only).

Rules are added with ``POST /_local/faults`` (body = :class:`FaultRule` fields), listed with
``GET /_local/faults`` and cleared with ``DELETE /_local/faults`` (``?path_prefix=P``: only P's
rules; ``?id=I``: only rule ``I``, the ``id`` the POST answered). A rule matches requests by method and path prefix
(and ``path_suffix``, e.g. ``/events`` for every job's events endpoint; or ``path``, exactly that path, e.g. a
list route and not its jobs under it), and optionally by a header value
(``header``/``header_value``, e.g. AWS's ``X-Amz-Target``) and a text in the body
(``body_contains``, e.g. a job name), so an RPC-style API with one path can be faulted per call
and per job. ``/_local`` paths are never faulted. A rule fires ``count`` times (-1 = forever):

* ``delay_seconds``: sleep before answering (simulates a slow platform / client timeouts);
* ``status``: answer with this HTTP status and an error in the platform's own format instead of the
  real response (``code`` is its error code, e.g. ``ThrottlingException``; ``Retry-After`` header if
  ``retry_after`` is set);
* ``phase``: ``"before"`` (default) the request never reaches the handler; ``"after"`` the handler runs
  (the job *is* created / cancelled) but the client gets the error, i.e. a lost response;
* ``body``: answer with this raw text instead (status ``status`` or 200), e.g. a malformed
  ``<html>`` page where JSON is expected;
* ``set_fields``: the handler runs and its JSON answer is served with these fields replaced (one
  malformed row in a job list, say). A key is a dotted path into the body; a step may pick a list
  item by one of its fields, ``data[id=ft-1].created_at``, or by position, ``data.0``. A path the
  answer does not have leaves it as it is.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import uuid
from typing import Any, Literal

from fastapi import Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from airflow_training_platform.errors import ApiError, Renderer


class FaultRule(BaseModel):
    """One fault rule; see the module doc. ``id`` names it; ``fired`` counts how often it fired."""

    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])
    method: str | None = None
    path_prefix: str = "/"
    status: int | None = Field(None, ge=400, le=599)
    count: int = 1
    delay_seconds: float = Field(0.0, ge=0, le=600)
    retry_after: float | None = None
    phase: Literal["before", "after"] = "before"
    message: str = "Injected fault"
    code: str | None = None
    body: str | None = None
    header: str | None = None
    header_value: str | None = None
    body_contains: str | None = None
    path_suffix: str | None = None
    path: str | None = None
    set_fields: dict[str, Any] | None = None
    fired: int = 0

    def matches(self, method: str, path: str, headers: Any, body: bytes) -> bool:
        if self.count == 0 or (self.method and self.method.upper() != method):
            return False
        if not path.startswith(self.path_prefix) or not path.endswith(self.path_suffix or ""):
            return False
        if self.path is not None and path != self.path:
            return False
        if self.header and (headers.get(self.header) or "") != (self.header_value or ""):
            return False
        return not self.body_contains or self.body_contains.encode() in body


class FaultInjector:
    """Holds the rules and applies them as an HTTP middleware (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []

    def add(self, rule: FaultRule) -> FaultRule:
        """Append a rule; returns it."""
        with self._lock:
            self._rules.append(rule)
        return rule

    def list(self) -> list[dict[str, Any]]:
        """All rules (including spent ones) as dicts."""
        with self._lock:
            return [r.model_dump() for r in self._rules]

    def clear(self, path_prefix: str | None = None, rule_id: str | None = None) -> None:
        """Remove every rule, or only the rules for exactly ``path_prefix``, or only rule ``rule_id``."""
        with self._lock:
            if rule_id is not None:
                self._rules = [r for r in self._rules if r.id != rule_id]
            elif path_prefix is not None:
                self._rules = [r for r in self._rules if r.path_prefix != path_prefix]
            else:
                self._rules = []

    def _take(self, request: Request, body: bytes) -> FaultRule | None:
        if request.url.path.startswith("/_local"):
            return None
        with self._lock:
            for rule in self._rules:
                if not rule.matches(request.method, request.url.path, request.headers, body):
                    continue
                if rule.count > 0:
                    rule.count -= 1
                rule.fired += 1
                return rule.model_copy()
        return None

    def middleware(self, render: Renderer):
        """A Starlette ``http`` middleware applying the first matching rule, rendering injected
        errors with ``render`` (the platform's own error format)."""

        async def apply(request: Request, call_next) -> Response:
            needs_body = any(r.body_contains for r in self._rules)
            rule = self._take(request, await request.body() if needs_body else b"")
            if rule is None:
                return await call_next(request)
            return await self._apply(rule, request, call_next, render)

        return apply

    async def _apply(self, rule: FaultRule, request: Request, call_next, render: Renderer) -> Response:
        if rule.delay_seconds:
            await asyncio.sleep(rule.delay_seconds)
        if rule.body is not None:
            return Response(rule.body, status_code=rule.status or 200, media_type="application/json")
        if rule.set_fields:
            return await _rewritten(await call_next(request), rule.set_fields)
        if rule.status is None:
            return await call_next(request)
        if rule.phase == "after":
            response = await call_next(request)
            async for _chunk in response.body_iterator:  # let the real response finish, then drop it
                pass
        else:
            # read the request's body first: answered before it was read (a PUT sent with "Expect:
            # 100-continue", as botocore sends PutObject), the connection would take the client's
            # retry on it for that body, and answer it a bare 400
            await request.body()
        headers = {"Retry-After": str(int(rule.retry_after))} if rule.retry_after is not None else None
        return render(request, ApiError(rule.status, rule.code, rule.message, {"injected": True}, headers))


async def _rewritten(response: Response, fields: dict[str, Any]) -> Response:
    """``response`` with ``fields`` (dotted path → value) set in its JSON body; as it was if the body
    is not JSON."""
    raw = b"".join([chunk async for chunk in response.body_iterator])
    headers = {
        k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "content-type")
    }
    try:
        body = json.loads(raw)
    except ValueError:
        return Response(
            raw, status_code=response.status_code, headers=headers, media_type=response.media_type
        )
    for path, value in fields.items():
        set_field(body, path, value)
    return Response(
        json.dumps(body), status_code=response.status_code, headers=headers, media_type="application/json"
    )


_STEP = re.compile(r"^(?P<key>[^\[\]]+)(?:\[(?P<field>[^=\]]+)=(?P<value>[^\]]*)\])?$")


def set_field(body: Any, path: str, value: Any) -> bool:
    """Set the field at dotted ``path`` of JSON ``body`` to ``value`` (see :class:`FaultRule`'s
    ``set_fields``); whether the body has that path."""
    *parents, leaf = path.split(".")
    node = body
    for step in parents:
        node = _step(node, step)
        if node is None:
            return False
    if isinstance(node, dict):
        node[leaf] = value
        return True
    if isinstance(node, list) and leaf.isdigit() and int(leaf) < len(node):
        node[int(leaf)] = value
        return True
    return False


def _step(node: Any, step: str) -> Any:
    match = _STEP.match(step)
    if match is None:
        return None
    key = match["key"]
    if isinstance(node, dict):
        node = node.get(key)
    elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
        node = node[int(key)]
    else:
        return None
    if match["field"] is not None:
        wanted = (match["field"], match["value"])
        items = node if isinstance(node, list) else []
        node = next((x for x in items if isinstance(x, dict) and str(x.get(wanted[0])) == wanted[1]), None)
    return node
