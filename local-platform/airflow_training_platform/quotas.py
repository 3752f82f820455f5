"""API quotas and request counts of the local platform (local-only; off by default).

Real platforms meter their APIs per account: TensorOne documents 500 reads, 10 job creations and
50 other writes per hour for its training API and answers 429 past them; SageMaker, PAI, ModelArts
and Together throttle too, each in its own shape. The local platform can do the same, so a client's
polling can be measured against a quota, not an unlimited loopback server.

A quota is ``limit`` requests per ``window_seconds`` for one *route class* of one platform:

* ``read``: gets, lists, searches, describes, events, logs, metrics, checkpoints;
* ``create``: job creation;
* ``write``: every other mutation (stop/cancel, delete, tags).

Windows are fixed, as TensorOne's ``X-RateLimit-Window`` and unix ``X-RateLimit-Reset`` say: a
window opens with the first request after the previous one closed and the count starts again at
its reset. A request past the limit is throttled in its platform's own format before it reaches
the handler (nothing is created or cancelled); each platform module classifies its requests and
renders its throttle (:mod:`.metering`). ``/_local`` is never metered.

Quotas are set at start by the ``quotas`` setting (``serve --quotas``), compact or JSON::

    tensorone:read=500/3600,create=10/3600,write=50/3600;sagemaker:read=20/1
    tensorone=documented                      # a named preset: TensorOne's documented limits
    {"tensorone": {"read": {"limit": 500, "window_seconds": 3600}}, "pai": "documented"}

and at run time over ``PUT /_local/quotas`` (the JSON form; it replaces every quota and opens new
windows), ``GET /_local/quotas`` (each quota with ``used``, ``remaining`` and ``reset_at`` of its
current window) and ``DELETE /_local/quotas``.

Every request a platform serves is counted, metered or not (``GET /_local/requests``, reset by
``DELETE /_local/requests``): per platform its ``total``, ``throttled``, ``by_class``,
``throttled_by_class``, ``by_route`` (the SageMaker operation, else ``METHOD /route/template``) and
``by_job`` (where the request names a job). Counting is one lock and a few dict increments.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

ROUTE_CLASSES = ("read", "create", "write")
"""The route classes a quota is set for."""

PRESETS: dict[str, dict[str, dict[str, tuple[int, float]]]] = {
    # docs.tensorone.ai/api-reference/rate-limits: GET /training/* 500/h, POST /training/jobs 10/h,
    # PUT /training/* 50/h (a cancel is the write this API has)
    "documented": {"tensorone": {"read": (500, 3600.0), "create": (10, 3600.0), "write": (50, 3600.0)}},
}
"""Named quota sets per platform: ``PRESETS[name][platform][route class] = (limit, window seconds)``.
Only TensorOne publishes numbers; the other platforms have no ``documented`` preset."""


class QuotaError(ValueError):
    """A quota specification that cannot be read (its text says why)."""


@dataclass(frozen=True)
class Quota:
    """``limit`` requests (0 or more) per ``window_seconds`` (> 0) of one route class."""

    limit: int
    window_seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {"limit": self.limit, "window_seconds": self.window_seconds}


Quotas = dict[str, dict[str, Quota]]
"""Platform name → route class → :class:`Quota`."""


def parse_quotas(spec: str | dict[str, Any] | None, platforms: Iterable[str]) -> Quotas:
    """Read a quota specification: the compact text, JSON text, or its parsed JSON (see the module
    doc); ``platforms``: the names a quota may be set for. :raises QuotaError: naming what is wrong."""
    known = tuple(platforms)
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        return {}
    if isinstance(spec, str) and spec.lstrip().startswith("{"):
        try:
            spec = json.loads(spec)
        except ValueError as exc:
            raise QuotaError(f"not JSON: {exc}") from None
    entries = _compact(spec) if isinstance(spec, str) else spec
    if not isinstance(entries, dict):
        raise QuotaError("expected an object of platform → {route class: {limit, window_seconds}}")
    quotas: Quotas = {}
    for platform, classes in entries.items():
        if platform not in known:
            raise QuotaError(f"unknown platform {platform!r} (one of {', '.join(known)})")
        if isinstance(classes, str):
            quotas[platform] = _preset(classes, platform)
            continue
        if not isinstance(classes, dict):
            raise QuotaError(
                f"{platform}: expected {{route class: {{limit, window_seconds}}}} or a preset name"
            )
        quotas[platform] = {name: _quota(platform, name, value) for name, value in classes.items()}
    return quotas


def _compact(text: str) -> dict[str, Any]:
    """``tensorone:read=500/3600,create=10/3600;pai:read=50/1`` or ``tensorone=documented``."""
    out: dict[str, Any] = {}
    for entry in filter(None, (e.strip() for e in text.replace("\n", ";").split(";"))):
        if ":" not in entry and "=" in entry:  # platform=PRESET
            platform, preset = (p.strip() for p in entry.split("=", 1))
            out[platform] = preset
            continue
        platform, sep, rest = entry.partition(":")
        if not sep:
            raise QuotaError(f"{entry!r}: expected PLATFORM:CLASS=LIMIT/SECONDS[,...] or PLATFORM=PRESET")
        classes: dict[str, Any] = {}
        for item in filter(None, (i.strip() for i in rest.split(","))):
            name, eq, value = item.partition("=")
            limit, slash, window = value.partition("/")
            if not eq or not slash:
                raise QuotaError(f"{platform.strip()}: {item!r}: expected CLASS=LIMIT/SECONDS")
            try:
                classes[name.strip()] = {"limit": int(limit), "window_seconds": float(window)}
            except ValueError:
                raise QuotaError(f"{platform.strip()}: {item!r}: LIMIT and SECONDS must be numbers") from None
        out[platform.strip()] = classes
    return out


def _preset(name: str, platform: str) -> dict[str, Quota]:
    preset = PRESETS.get(name, {}).get(platform)
    if preset is None:
        have = sorted(p for p, sets in PRESETS.items() if platform in sets)
        raise QuotaError(f"{platform}: no preset {name!r} (presets for it: {have or 'none'})")
    return {cls: Quota(limit, window) for cls, (limit, window) in preset.items()}


def _quota(platform: str, name: str, value: Any) -> Quota:
    if name not in ROUTE_CLASSES:
        raise QuotaError(f"{platform}: unknown route class {name!r} (one of {', '.join(ROUTE_CLASSES)})")
    if not isinstance(value, dict) or set(value) - {"limit", "window_seconds"}:
        raise QuotaError(f"{platform}.{name}: expected {{limit, window_seconds}}")
    limit, window = value.get("limit"), value.get("window_seconds")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise QuotaError(f"{platform}.{name}.limit: must be an integer, 0 or more")
    if not isinstance(window, int | float) or isinstance(window, bool) or not 0 < window < math.inf:
        raise QuotaError(f"{platform}.{name}.window_seconds: must be a number of seconds above 0")
    return Quota(limit, float(window))


@dataclass(frozen=True)
class QuotaState:
    """A metered request's quota after it was counted: ``remaining`` requests (0 or more) in the
    window that resets at ``reset_at`` (unix seconds); ``throttled``: this request was refused."""

    quota: Quota
    remaining: int
    reset_at: float
    throttled: bool

    def retry_after(self, now: float | None = None) -> int:
        """Whole seconds until the window resets (at least 1): what ``Retry-After`` says."""
        return max(1, math.ceil(self.reset_at - (time.time() if now is None else now)))


class _Counts:
    """One platform's request counts (mutated under :class:`RequestMeter`'s lock)."""

    __slots__ = ("by_class", "by_job", "by_route", "throttled", "throttled_by_class", "total")

    def __init__(self) -> None:
        self.total = 0
        self.throttled = 0
        self.by_class: dict[str, int] = {}
        self.throttled_by_class: dict[str, int] = {}
        self.by_route: dict[str, int] = {}
        self.by_job: dict[str, int] = {}

    def as_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "throttled": self.throttled,
            "by_class": dict(self.by_class),
            "throttled_by_class": dict(self.throttled_by_class),
            "by_route": dict(self.by_route),
            "by_job": dict(self.by_job),
        }


class RequestMeter:
    """The platform's quotas and request counts, shared by every emulated platform (thread-safe).

    ``clock``: unix seconds (``time.time``; tests may pass another)."""

    def __init__(self, quotas: Quotas | None = None, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._quotas: Quotas = {}
        self._windows: dict[tuple[str, str], list[float]] = {}  # (platform, class) → [reset_at, used]
        self._counts: dict[str, _Counts] = {}
        self.set_quotas(quotas or {})

    # -- quotas ------------------------------------------------------------------------------------
    def set_quotas(self, quotas: Quotas) -> None:
        """Replace every quota; every window starts anew."""
        with self._lock:
            self._quotas = {p: dict(classes) for p, classes in quotas.items() if classes}
            self._windows = {}

    def quotas(self) -> dict[str, Any]:
        """Each quota with its current window: ``{platform: {class: {limit, window_seconds, used,
        remaining, reset_at}}}`` (``reset_at`` unix seconds, ``None`` before a window opened)."""
        now = self._clock()
        out: dict[str, Any] = {}
        with self._lock:
            for platform, classes in self._quotas.items():
                for cls, quota in classes.items():
                    reset_at, used = self._windows.get((platform, cls), (0.0, 0))
                    if now >= reset_at:  # no window open: the next request opens one
                        reset_at, used = None, 0
                    out.setdefault(platform, {})[cls] = {
                        **quota.as_dict(),
                        "used": int(used),
                        "remaining": max(0, quota.limit - int(used)),
                        "reset_at": reset_at,
                    }
        return out

    # -- the per-request path ----------------------------------------------------------------------
    def admit(self, platform: str, cls: str, route: str, job_id: str | None) -> QuotaState | None:
        """Count one request and draw it from its quota: ``None`` when its class is not metered,
        else its :class:`QuotaState` (``throttled``: refuse it)."""
        with self._lock:
            counts = self._counts.get(platform)
            if counts is None:
                counts = self._counts[platform] = _Counts()
            counts.total += 1
            counts.by_class[cls] = counts.by_class.get(cls, 0) + 1
            counts.by_route[route] = counts.by_route.get(route, 0) + 1
            if job_id is not None:
                counts.by_job[job_id] = counts.by_job.get(job_id, 0) + 1
            classes = self._quotas.get(platform)
            quota = classes.get(cls) if classes else None
            if quota is None:
                return None
            now = self._clock()
            window = self._windows.get((platform, cls))
            if window is None or now >= window[0]:
                window = self._windows[(platform, cls)] = [now + quota.window_seconds, 0]
            if window[1] >= quota.limit:
                counts.throttled += 1
                counts.throttled_by_class[cls] = counts.throttled_by_class.get(cls, 0) + 1
                return QuotaState(quota, 0, window[0], True)
            window[1] += 1
            return QuotaState(quota, quota.limit - int(window[1]), window[0], False)

    # -- counts ------------------------------------------------------------------------------------
    def requests(self) -> dict[str, Any]:
        """``{"platforms": {name: {total, throttled, by_class, throttled_by_class, by_route, by_job}}}``."""
        with self._lock:
            return {"platforms": {name: counts.as_dict() for name, counts in self._counts.items()}}

    def reset_requests(self) -> None:
        """Forget every count (the quotas' windows go on)."""
        with self._lock:
            self._counts = {}
