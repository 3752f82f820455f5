"""The ModelArts job search (``POST /v2/{project_id}/training-job-searches``, ``ListTrainingJobs``) and
the event list's query (``GET …/training-jobs/{id}/events``, ``ListTrainingJobEvents``) over job
objects (pure functions, no I/O). Sources: ``docs/platforms/modelarts.md`` ("The job search",
"Events").

Every parameter is either implemented or refused, ``ModelArts.0101`` (HTTP 400) naming it — never
dropped, so a search never answers "no such jobs" for a filter the local platform cannot apply.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from airflow_training_platform.platforms.modelarts.wire import bad

# documented error codes (ModelArts API reference, "Error Codes")
UNSUPPORTED_SORT_BY = "ModelArts.2790"
UNSUPPORTED_CONDITION_KEY = "ModelArts.2807"
UNSUPPORTED_CONDITION_OPERATOR = "ModelArts.2808"
UNSUPPORTED_CONDITION_VALUE = "ModelArts.2809"
UNSUPPORTED_OPERATION = "ModelArts.2858"

LIMIT_DEFAULT = 10
"""``limit`` when a search gives none (the API says 1–50 and no default; 10 here)."""

LIMIT_MAX = 50
"""The most jobs on a search page (``limit``: "The value ranges from 1 to 50")."""

TAGS_WINDOW_SECONDS = 31 * 24 * 3600
"""A search by ``tags`` without a ``create_time`` filter covers the last 31 days (the SDK's
``JobSearches.tags``: "未传则默认最近 31 天")."""

MAX_TAG_CONDITIONS = 10
"""At most 10 ``tags`` conditions, and 10 values under one key."""

SEARCH_PARAMETERS = frozenset(
    {
        "offset",
        "limit",
        "sort_by",
        "order",
        "group_by",
        "workspace_id",
        "train_type",
        "tags",
        "host_ips",
        "filters",
    }
)
"""The search body's fields (SDK ``JobSearches``)."""

SORT_KEYS = ("create_time", "name")
ORDERS = ("asc", "desc")

#: filter key → (the job object's value it reads, the operators it takes)
FILTERS: dict[str, tuple[Callable[[dict[str, Any]], Any], tuple[str, ...]]] = {
    "phase": (lambda j: j["status"]["phase"], ("in", "not", "like")),
    "name": (lambda j: j["metadata"]["name"], ("in", "not", "like")),
    "kind": (lambda j: j["kind"], ("in", "not", "like")),
    "create_time": (lambda j: j["metadata"]["create_time"], ("between",)),
}

EVENT_PARAMETERS = frozenset(
    {"offset", "limit", "order", "start_time", "end_time", "level", "pattern", "source"}
)
"""The event list's query parameters (ListTrainingJobEvents, "Query Parameters")."""

EVENT_LEVELS = ("Info", "Error", "Warning")
EVENT_SOURCES = ("K8S", "Job", "Task")
EVENTS_LIMIT_DEFAULT = 50
EVENTS_LIMIT_MAX = 100
PATTERN_MAX = 256


def search(
    jobs: Sequence[dict[str, Any]],
    body: Mapping[str, Any],
    tms_tags: Callable[[str], Mapping[str, str]],
    now: float | None = None,
) -> dict[str, Any]:
    """One page of the search over ``jobs`` (the project's job objects, :func:`.wire.job_to_wire`).

    * ``offset`` is a **page number** from 0 ("Number of pages for querying jobs … 0: the query
      starts from the first page"), ``limit`` the page size (1–50): the page is
      ``matches[offset * limit : (offset + 1) * limit]``;
    * ``total``: every job of the project ("Total number of queried jobs of the current user");
      ``count``: the jobs matching the search ("Total number of jobs that meet the search criteria"),
      not the page's length;
    * ``sort_by`` ``create_time`` (default) or ``name``, ``order`` ``desc`` (default) or ``asc``;
    * ``filters``: ``[{key, operator, value: [str]}]`` with :data:`FILTERS` (``like``: the value is a
      substring; ``between``: ``create_time`` from ``value[0]`` to ``value[1]``, epoch ms, inclusive);
    * ``tags``: ``[{key, values}]`` TMS tags (``tms_tags(job_id)``): values under one key OR, keys
      AND, no values = the key is set; searched over the last 31 days unless ``create_time`` is filtered;
    * ``workspace_id``: given, only that workspace's jobs; ``train_type`` ``job`` (every local job is a
      custom job) or ``ftjob`` (none: no fine-tuning jobs here);
    * ``group_by`` other than empty and ``host_ips`` are refused (not implemented), as is any other field.

    Refusals use the documented codes: ``ModelArts.2790`` (``sort_by``), ``2807`` (a filter key),
    ``2808`` (an operator), ``2809`` (a ``between`` value), ``2858`` (``group_by``, ``host_ips``),
    else ``ModelArts.0101``.

    :param now: epoch seconds (default: now), for the tags' 31-day window.
    :raises ApiError: HTTP 400 naming the field that is unknown, invalid or not implemented.
    """
    for key in body:
        if key not in SEARCH_PARAMETERS:
            raise bad(key, "is not a parameter of the training job search")
    offset = _integer(body.get("offset"), "offset", 0, 0)
    limit = _integer(body.get("limit"), "limit", LIMIT_DEFAULT, 1)
    if limit > LIMIT_MAX:
        raise bad("limit", f"'{limit}' must be between 1 and {LIMIT_MAX}")
    sort_by = body.get("sort_by") or "create_time"
    if sort_by not in SORT_KEYS:
        raise bad(
            "sort_by",
            f"'{sort_by}' is not supported by the local platform ({', '.join(SORT_KEYS)})",
            UNSUPPORTED_SORT_BY,
        )
    order = body.get("order") or "desc"
    if order not in ORDERS:
        raise bad("order", f"'{order}' must be asc or desc")
    if body.get("group_by"):
        raise bad("group_by", "grouping is not implemented by the local platform", UNSUPPORTED_OPERATION)
    if body.get("host_ips"):
        raise bad(
            "host_ips", "searching by host IP is not implemented by the local platform", UNSUPPORTED_OPERATION
        )

    matches = list(jobs)
    if (workspace := body.get("workspace_id")) is not None:
        matches = [j for j in matches if j["metadata"]["workspace_id"] == str(workspace)]
    train_type = body.get("train_type")
    if train_type not in (None, "", "job", "ftjob"):
        raise bad("train_type", f"'{train_type}' must be job or ftjob")
    if train_type == "ftjob":
        matches = []
    filters = body.get("filters") or []
    if not isinstance(filters, list):
        raise bad("filters", "must be a list of {key, operator, value}")
    for index, rule in enumerate(filters):
        matches = _filtered(matches, rule, index)
    if tags := body.get("tags"):
        if not any(isinstance(r, dict) and r.get("key") == "create_time" for r in filters):
            since = ((now if now is not None else time.time()) - TAGS_WINDOW_SECONDS) * 1000
            matches = [j for j in matches if j["metadata"]["create_time"] >= since]
        wanted = _tag_conditions(tags)
        matches = [j for j in matches if _has_tags(tms_tags(j["metadata"]["id"]), wanted)]

    matches.sort(key=lambda j: (j["metadata"][sort_by], j["metadata"]["id"]), reverse=order == "desc")
    return {
        "total": len(jobs),
        "count": len(matches),
        "limit": limit,
        "offset": offset,
        "sort_by": sort_by,
        "order": order,
        "group_by": "",
        "workspace_id": str(body.get("workspace_id") or "0"),
        "ai_project": "default-ai-project",
        "items": matches[offset * limit : (offset + 1) * limit],
    }


def _filtered(jobs: list[dict[str, Any]], rule: Any, index: int) -> list[dict[str, Any]]:
    field = f"filters.{index}"
    if not isinstance(rule, dict) or not isinstance(rule.get("value"), list):
        raise bad(field, "must be {key, operator, value: [...]}")
    key, operator, values = rule.get("key"), rule.get("operator") or "in", [str(v) for v in rule["value"]]
    if key not in FILTERS:
        raise bad(
            f"{field}.key",
            f"'{key}' is not supported by the local platform ({', '.join(FILTERS)})",
            UNSUPPORTED_CONDITION_KEY,
        )
    read, operators = FILTERS[key]
    if operator not in operators:
        raise bad(
            f"{field}.operator",
            f"'{operator}' is not supported for {key} ({', '.join(operators)})",
            UNSUPPORTED_CONDITION_OPERATOR,
        )
    if operator == "in":
        return [j for j in jobs if read(j) in values]
    if operator == "not":
        return [j for j in jobs if read(j) not in values]
    if operator == "like":
        return [j for j in jobs if any(v in read(j) for v in values)]
    if len(values) != 2 or not all(v.isdigit() for v in values):
        raise bad(
            f"{field}.value", "between takes two times in epoch milliseconds", UNSUPPORTED_CONDITION_VALUE
        )
    low, high = int(values[0]), int(values[1])
    return [j for j in jobs if low <= read(j) <= high]


def _tag_conditions(raw: Any) -> dict[str, set[str]]:
    if not isinstance(raw, list) or len(raw) > MAX_TAG_CONDITIONS:
        raise bad("tags", f"must be a list of at most {MAX_TAG_CONDITIONS} {{key, values}}")
    wanted: dict[str, set[str]] = {}
    for index, condition in enumerate(raw):
        if (
            not isinstance(condition, dict)
            or not isinstance(condition.get("key"), str)
            or not condition["key"]
        ):
            raise bad(f"tags.{index}.key", "is required")
        values = condition.get("values") or []
        if not isinstance(values, list) or len(values) > MAX_TAG_CONDITIONS:
            raise bad(f"tags.{index}.values", f"must be a list of at most {MAX_TAG_CONDITIONS} strings")
        if condition["key"] in wanted:
            raise bad(f"tags.{index}.key", f"'{condition['key']}' is repeated")
        wanted[condition["key"]] = {str(v) for v in values if v not in (None, "")}
    return wanted


def _has_tags(tags: Mapping[str, str], wanted: Mapping[str, set[str]]) -> bool:
    return all(key in tags and (not values or tags[key] in values) for key, values in wanted.items())


def events(lines: Sequence[dict[str, Any]], query: Mapping[str, str]) -> dict[str, Any]:
    """The event list's answer over a job's events ``lines`` (oldest first, :func:`.wire.events_to_wire`)
    for the request's ``query``:

    * ``offset``: an item offset ("Offset of a data entry"), ``limit`` 1–100 (default 50),
      ``order`` ``desc`` (default: newest first) or ``asc``;
    * ``level`` (``Info``/``Error``/``Warning``), ``source`` (``K8S``/``Job``/``Task``) and ``pattern``
      (a text the message contains, at most 256 characters, case-sensitive) filter;
    * ``start_time`` and ``end_time`` (epoch ms, only together) keep the events between them, inclusive;
    * ``total`` counts the events that pass the filters (all pages).

    :raises ApiError: ``ModelArts.0101`` (HTTP 400) naming an unknown parameter or an invalid value.
    """
    for key in query:
        if key not in EVENT_PARAMETERS:
            raise bad(key, "is not a parameter of the training job events")
    offset = _integer(query.get("offset"), "offset", 0, 0)
    limit = _integer(query.get("limit"), "limit", EVENTS_LIMIT_DEFAULT, 1)
    if limit > EVENTS_LIMIT_MAX:
        raise bad("limit", f"'{limit}' must be at most {EVENTS_LIMIT_MAX}")
    order = query.get("order") or "desc"
    if order not in ORDERS:
        raise bad("order", f"'{order}' must be asc or desc")
    chosen = list(lines)
    if level := query.get("level"):
        if level not in EVENT_LEVELS:
            raise bad("level", f"'{level}' must be one of {', '.join(EVENT_LEVELS)}")
        chosen = [e for e in chosen if e["level"] == level]
    if source := query.get("source"):
        if source.upper() not in {s.upper() for s in EVENT_SOURCES}:
            raise bad("source", f"'{source}' must be one of {', '.join(EVENT_SOURCES)}")
        chosen = [e for e in chosen if e["source"].upper() == source.upper()]
    if pattern := query.get("pattern"):
        if len(pattern) > PATTERN_MAX:
            raise bad("pattern", f"must be at most {PATTERN_MAX} characters")
        chosen = [e for e in chosen if pattern in e["message"]]
    answer: dict[str, Any] = {}
    start, end = query.get("start_time"), query.get("end_time")
    if (start is None) != (end is None):
        raise bad("start_time" if start is None else "end_time", "start_time and end_time go together")
    if start is not None and end is not None:
        low, high = _integer(start, "start_time", 0, 0), _integer(end, "end_time", 0, 0)
        chosen = [e for e in chosen if low <= _epoch_ms(e["time"]) <= high]
        answer = {"start_time": _iso(low), "end_time": _iso(high)}
    if order == "desc":
        chosen.reverse()
    return {
        "total": len(chosen),
        "limit": limit,
        "offset": offset,
        "order": order,
        **answer,
        "events": chosen[offset : offset + limit],
    }


def _epoch_ms(iso_time: str) -> int:
    return int(datetime.fromisoformat(iso_time.replace("Z", "+00:00")).timestamp() * 1000)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _integer(raw: Any, field: str, default: int, lowest: int) -> int:
    if raw is None or raw == "":
        return default
    if isinstance(raw, bool):
        raise bad(field, f"'{raw}' is not an integer")
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise bad(field, f"'{raw}' is not an integer") from None
    if isinstance(raw, float) and raw != value:
        raise bad(field, f"'{raw}' is not an integer")
    if value < lowest:
        raise bad(field, f"'{raw}' must be at least {lowest}")
    return value
