"""``ListTrainingJobs`` and ``Search`` (``Resource=TrainingJob``) over the engine's records.

Every parameter, property and operator AWS documents for these two calls is either honoured or
refused with a ``ValidationException`` naming it: never silently ignored, so a filter the local
platform cannot apply never reads as "no such jobs" (``docs/platforms/sagemaker.md``, "Listing and
searching jobs"; the service model's ``ListTrainingJobsRequest``, ``SearchRequest``,
``SearchExpression``, ``Filter``, ``NestedFilters`` and ``TrainingJob`` shapes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from airflow_training_platform.engine import JobNotFound, TrainingEngine
from airflow_training_platform.errors import ApiError
from airflow_training_platform.platforms.common import tags_of
from airflow_training_platform.platforms.sagemaker import wire

# ----------------------------------------------------------------------------- ListTrainingJobs
_LIST_PARAMETERS = frozenset({
    "NextToken", "MaxResults", "CreationTimeAfter", "CreationTimeBefore", "LastModifiedTimeAfter",
    "LastModifiedTimeBefore", "NameContains", "StatusEquals", "SortBy", "SortOrder",
})  # fmt: skip
# documented, but nothing local has a warm pool or a training plan: refused rather than matching nothing
_LIST_UNSUPPORTED = frozenset({"WarmPoolStatusEquals", "TrainingPlanArnEquals"})
_LIST_SORT = {"CreationTime": "CreationTime", "Name": "TrainingJobName", "Status": "TrainingJobStatus"}
_STATUSES = ("InProgress", "Completed", "Failed", "Stopping", "Stopped", "Deleting")
_SUMMARY_KEYS = ("TrainingJobName", "TrainingJobArn", "CreationTime", "TrainingEndTime",
                 "LastModifiedTime", "TrainingJobStatus", "SecondaryStatus")  # fmt: skip
_TIME_RANGES: dict[str, tuple[str, Callable[[float, float], bool]]] = {
    "CreationTimeAfter": ("CreationTime", lambda a, b: a > b),
    "CreationTimeBefore": ("CreationTime", lambda a, b: a < b),
    "LastModifiedTimeAfter": ("LastModifiedTime", lambda a, b: a > b),
    "LastModifiedTimeBefore": ("LastModifiedTime", lambda a, b: a < b),
}


def list_training_jobs(engine: TrainingEngine, region: str, body: dict[str, Any]) -> dict[str, Any]:
    """``ListTrainingJobs``: ``{"TrainingJobSummaries": [{TrainingJobName, TrainingJobArn,
    CreationTime, TrainingEndTime?, LastModifiedTime, TrainingJobStatus, SecondaryStatus}],
    "NextToken"?}``, sorted by ``SortBy`` (``CreationTime`` by default; ``Name``, ``Status``) in
    ``SortOrder`` (``Ascending`` by default, as AWS documents), then paged (``MaxResults`` 1–100,
    default 100; ``NextToken``). Filters: ``NameContains``, ``StatusEquals``, ``CreationTimeAfter``/
    ``Before``, ``LastModifiedTimeAfter``/``Before`` (epoch seconds on the wire).

    :raises ApiError: ``ValidationException`` naming a parameter that is unknown, unsupported
        (``WarmPoolStatusEquals``, ``TrainingPlanArnEquals``) or out of its range.
    """
    _refuse_unknown(body, _LIST_PARAMETERS, _LIST_UNSUPPORTED, "ListTrainingJobs")
    sort_by = _enum(body, "SortBy", tuple(_LIST_SORT), "CreationTime")
    descending = _enum(body, "SortOrder", ("Ascending", "Descending"), "Ascending") == "Descending"
    status = _enum(body, "StatusEquals", _STATUSES, None)
    jobs = [wire.job_to_wire(r, region) for r in engine.list(wire.PLATFORM)]
    if status is not None:
        jobs = [j for j in jobs if j["TrainingJobStatus"] == status]
    if (text := body.get("NameContains")) is not None:
        if not isinstance(text, str):
            raise wire.bad("nameContains", f"'{text}' failed to satisfy constraint: must be a string")
        jobs = [j for j in jobs if text in j["TrainingJobName"]]
    for key, (field, keep) in _TIME_RANGES.items():
        if (value := body.get(key)) is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise wire.bad(
                    key[0].lower() + key[1:], f"'{value}' failed to satisfy constraint: a timestamp"
                )
            jobs = [j for j in jobs if keep(j[field], float(value))]
    jobs.sort(key=lambda j: (j[_LIST_SORT[sort_by]], j["CreationTime"]), reverse=descending)
    page, token = paged(jobs, body)
    out: dict[str, Any] = {"TrainingJobSummaries": [{k: j[k] for k in _SUMMARY_KEYS if k in j} for j in page]}
    if token is not None:
        out["NextToken"] = token
    return out


# ----------------------------------------------------------------------------- Search
_SEARCH_PARAMETERS = frozenset({"Resource", "SearchExpression", "SortBy", "SortOrder", "NextToken",
                                "MaxResults", "CrossAccountFilterOption", "VisibilityConditions"})  # fmt: skip
_EXPRESSION_KEYS = frozenset({"Filters", "NestedFilters", "SubExpressions", "Operator"})
_MAX_ELEMENTS = 20  # "A SearchExpression can contain up to twenty elements"
_OPERATORS = ("Equals", "NotEquals", "GreaterThan", "GreaterThanOrEqualTo", "LessThan",
              "LessThanOrEqualTo", "Contains", "Exists", "NotExists", "In")  # fmt: skip
_ORDERING = ("GreaterThan", "GreaterThanOrEqualTo", "LessThan", "LessThanOrEqualTo")
# the TrainingJob record's properties (SearchRecord.TrainingJob), by the kind the filter compares as
_PROPERTIES = frozenset({
    "TrainingJobName", "TrainingJobArn", "TuningJobArn", "LabelingJobArn", "AutoMLJobArn",
    "ModelArtifacts", "TrainingJobStatus", "SecondaryStatus", "FailureReason", "HyperParameters",
    "AlgorithmSpecification", "RoleArn", "InputDataConfig", "OutputDataConfig", "ResourceConfig",
    "WarmPoolStatus", "VpcConfig", "StoppingCondition", "CreationTime", "TrainingStartTime",
    "TrainingEndTime", "LastModifiedTime", "SecondaryStatusTransitions", "FinalMetricDataList",
    "EnableNetworkIsolation", "EnableInterContainerTrafficEncryption", "EnableManagedSpotTraining",
    "CheckpointConfig", "TrainingTimeInSeconds", "BillableTimeInSeconds", "DebugHookConfig",
    "ExperimentConfig", "DebugRuleConfigurations", "TensorBoardOutputConfig",
    "DebugRuleEvaluationStatuses", "OutputModelPackageArn", "ModelPackageConfig", "ProfilerConfig",
    "Environment", "RetryStrategy", "Tags", "Metrics",
})  # fmt: skip
_TIMESTAMPS = frozenset({"CreationTime", "TrainingStartTime", "TrainingEndTime", "LastModifiedTime",
                         "SecondaryStatusTransitions.StartTime", "SecondaryStatusTransitions.EndTime",
                         "FinalMetricDataList.Timestamp", "DebugRuleEvaluationStatuses.LastModifiedTime"})  # fmt: skip
_NUMBERS = frozenset({"ResourceConfig.InstanceCount", "ResourceConfig.VolumeSizeInGB",
                      "ResourceConfig.KeepAlivePeriodInSeconds", "StoppingCondition.MaxRuntimeInSeconds",
                      "StoppingCondition.MaxWaitTimeInSeconds", "StoppingCondition.MaxPendingTimeInSeconds",
                      "TrainingTimeInSeconds", "BillableTimeInSeconds", "FinalMetricDataList.Value",
                      "RetryStrategy.MaximumRetryAttempts", "InputDataConfig.ShuffleConfig.Seed"})  # fmt: skip
_LISTS = frozenset({"InputDataConfig", "SecondaryStatusTransitions", "FinalMetricDataList",
                    "AlgorithmSpecification.MetricDefinitions", "DebugHookConfig.CollectionConfigurations",
                    "DebugRuleConfigurations", "DebugRuleEvaluationStatuses", "ResourceConfig.InstanceGroups"})  # fmt: skip


def search(engine: TrainingEngine, region: str, body: dict[str, Any]) -> dict[str, Any]:
    """``Search`` with ``Resource=TrainingJob``: ``{"Results": [{"TrainingJob": <DescribeTrainingJob
    answer + Tags>}], "TotalHits": {"Value": n, "Relation": "EqualTo"}, "NextToken"?}``.

    ``SearchExpression``: ``Filters`` (``Name``, ``Operator`` — ``Equals`` when only a ``Value`` is
    given —, ``Value``) on top-level and dotted nested properties (a list property matches when any
    element does), ``HyperParameters.<name>`` (numbers compare as numbers when both sides are),
    ``Metrics.<name>`` (``FinalMetricDataList``, numeric), ``Tags.<key>``; ``NestedFilters`` (one
    element of the list property satisfies all its filters); ``SubExpressions``; ``Operator``
    ``And`` (default) or ``Or``; at most 20 elements; one ``Contains``. Text properties take
    ``Equals``, ``NotEquals``, ``Contains``, ``In`` (comma-delimited), ``Exists``, ``NotExists``;
    numbers and timestamps (``Value`` ISO 8601 ``YYYY-mm-ddTHH:MM:SS``, UTC, or epoch seconds) the
    comparisons, ``Equals``, ``NotEquals``, ``Exists``, ``NotExists``. ``SortBy`` any property
    (default ``LastModifiedTime``; jobs without it last), ``SortOrder`` (default ``Descending``),
    ``MaxResults`` 1–100 (default 100), ``NextToken``.

    A top-level ``TrainingJobName`` ``Equals``/``In`` or ``Tags.<key>`` ``Equals`` (in an ``And``)
    narrows the jobs before any is rendered: looked up by name, or by the engine's tag index.

    :raises ApiError: ``ValidationException`` naming the resource, parameter, property, operator
        or value it cannot honour.
    """
    _refuse_unknown(body, _SEARCH_PARAMETERS, frozenset(), "Search")
    if body.get("Resource") != "TrainingJob":
        raise ApiError(
            400,
            "ValidationException",
            f"Resource {body.get('Resource')!r} is not supported by the local training platform: "
            "only Resource=TrainingJob is",
        )
    if body.get("CrossAccountFilterOption") not in (None, "SameAccount"):
        raise _invalid("CrossAccountFilterOption=CrossAccount is not supported: there are no other accounts")
    if body.get("VisibilityConditions"):
        raise _invalid("VisibilityConditions is not supported by the local training platform")
    expression = body.get("SearchExpression")
    predicate: Callable[[dict[str, Any]], bool] = lambda job: True  # noqa: E731
    if expression is not None:
        counts = {"elements": 0, "Contains": 0}
        predicate = _expression(expression, counts)
        if counts["elements"] > _MAX_ELEMENTS:
            raise _invalid(f"A SearchExpression can contain up to {_MAX_ELEMENTS} elements")
        if counts["Contains"] > 1:
            raise _invalid("'CONTAINS' operator usage limit of 1 exceeded.")
    sort_by = body.get("SortBy", "LastModifiedTime")
    _property(sort_by, "SortBy")
    descending = _enum(body, "SortOrder", ("Ascending", "Descending"), "Descending") == "Descending"
    jobs = [
        job
        for rec in _candidates(engine, expression)
        if predicate(job := {**wire.job_to_wire(rec, region), "Tags": tags_of(rec)})
    ]
    present = [j for j in jobs if _sort_value(j, sort_by) is not None]
    present.sort(key=lambda j: _sort_value(j, sort_by), reverse=descending)
    ordered = present + [j for j in jobs if _sort_value(j, sort_by) is None]
    page, token = paged(ordered, body)
    out: dict[str, Any] = {
        "Results": [{"TrainingJob": j} for j in page],
        "TotalHits": {"Value": len(ordered), "Relation": "EqualTo"},
    }
    if token is not None:
        out["NextToken"] = token
    return out


def _candidates(engine: TrainingEngine, expression: Any) -> list[dict[str, Any]]:
    """The records the expression can match: by name or by tag when a top-level ``And`` filter
    says so (the later issue's coalesced polls search many jobs by name or tag), else all."""
    if not isinstance(expression, dict):
        return engine.list(wire.PLATFORM)
    if expression.get("Operator") == "Or" and set(expression) <= {"SubExpressions", "Operator"}:
        # an OR of name lookups (the provider's coalesced polls: In filters of up to 1,024 chars)
        subs = expression.get("SubExpressions") or []
        named = [_named(sub) for sub in subs if isinstance(sub, dict)]
        if subs and len(named) == len(subs) and all(n is not None for n in named):
            return _by_name(engine, [name for names in named for name in names or []])
        return engine.list(wire.PLATFORM)
    if expression.get("Operator", "And") != "And":
        return engine.list(wire.PLATFORM)
    for flt in expression.get("Filters") or []:
        name, op, value = flt.get("Name"), flt.get("Operator", "Equals"), str(flt.get("Value", ""))
        if name == "TrainingJobName" and op in ("Equals", "In"):
            return _by_name(engine, [value] if op == "Equals" else _split(value))
        if isinstance(name, str) and name.startswith("Tags.") and op == "Equals":
            return engine.list(wire.PLATFORM, tags=[f"{name.removeprefix('Tags.')}:{value}"])
    return engine.list(wire.PLATFORM)


def _named(expression: dict[str, Any]) -> list[str] | None:
    """The names an expression of one ``TrainingJobName`` Equals/In filter looks up, else ``None``."""
    filters = expression.get("Filters") or []
    if set(expression) - {"Filters", "Operator"} or len(filters) != 1 or not isinstance(filters[0], dict):
        return None
    flt = filters[0]
    op, value = flt.get("Operator", "Equals"), str(flt.get("Value", ""))
    if flt.get("Name") != "TrainingJobName" or op not in ("Equals", "In"):
        return None
    return [value] if op == "Equals" else _split(value)


def _by_name(engine: TrainingEngine, names: list[str]) -> list[dict[str, Any]]:
    found = []
    for job_name in dict.fromkeys(names):
        try:
            found.append(engine.get(job_name, platform=wire.PLATFORM))
        except JobNotFound:
            pass
    return found


def _expression(expression: Any, counts: dict[str, int]) -> Callable[[dict[str, Any]], bool]:
    if not isinstance(expression, dict):
        raise _invalid("SearchExpression must be an object")
    if unknown := sorted(set(expression) - _EXPRESSION_KEYS):
        raise _invalid(f"SearchExpression does not take {', '.join(unknown)}")
    combine = {"And": all, "Or": any}.get(expression.get("Operator", "And"))
    if combine is None:
        raise _invalid(f"SearchExpression.Operator {expression.get('Operator')!r} must be And or Or")
    parts: list[Callable[[dict[str, Any]], bool]] = []
    for flt in _list_of(expression, "Filters"):
        counts["elements"] += 1
        parts.append(_filter(flt, counts, None))
    for nested in _list_of(expression, "NestedFilters"):
        counts["elements"] += 1
        parts.append(_nested(nested, counts))
    for sub in _list_of(expression, "SubExpressions"):
        counts["elements"] += 1
        parts.append(_expression(sub, counts))
    if not parts:
        raise _invalid("A SearchExpression must have at least one Filter, NestedFilter or SubExpression")
    return lambda job: combine(part(job) for part in parts)


def _nested(nested: Any, counts: dict[str, int]) -> Callable[[dict[str, Any]], bool]:
    if not isinstance(nested, dict) or set(nested) - {"NestedPropertyName", "Filters"}:
        raise _invalid("NestedFilters takes NestedPropertyName and Filters")
    prop = nested.get("NestedPropertyName")
    if prop not in _LISTS:
        raise _invalid(f"NestedPropertyName {prop!r} is not a list property of a TrainingJob")
    filters = _list_of(nested, "Filters")
    if not filters:
        raise _invalid("NestedFilters.Filters must contain at least one filter")
    checks = [_filter(flt, counts, prop) for flt in filters]

    def matches(job: dict[str, Any]) -> bool:
        items = _values(job, prop.split("."))
        return any(all(check({"__item__": item}) for check in checks) for item in items)

    return matches


def _filter(flt: Any, counts: dict[str, int], within: str | None) -> Callable[[dict[str, Any]], bool]:
    if not isinstance(flt, dict) or set(flt) - {"Name", "Operator", "Value"}:
        raise _invalid("A Filter takes Name, Operator and Value")
    name = flt.get("Name")
    op = flt.get("Operator", "Equals")
    if op not in _OPERATORS:
        raise _invalid(f"Filter operator {op!r} for {name!r} is not one of {', '.join(_OPERATORS)}")
    kind = _property(name, "Filter.Name")
    if within is not None and not str(name).startswith(within + "."):
        raise _invalid(f"Filter {name!r} in NestedFilters must name a property of {within}")
    counts["Contains"] += op == "Contains"
    if op in ("Exists", "NotExists"):
        wanted = op == "Exists"
        return lambda job: bool(_lookup(job, name, within)) == wanted
    value = flt.get("Value")
    if not isinstance(value, str) or not value:
        raise _invalid(f"Filter {name!r} {op} needs a Value")
    if kind == "text" and op in _ORDERING:
        raise _invalid(f"Operator {op} is not supported for the text property {name!r}")
    if kind in ("number", "timestamp") and op in ("Contains", "In"):
        raise _invalid(f"Operator {op} is only supported for text properties, not {name!r}")
    test = _comparison(op, kind, name, value)
    return lambda job: any(test(actual) for actual in _lookup(job, name, within))


def _comparison(op: str, kind: str, name: str, value: str) -> Callable[[Any], bool]:
    """A test of one property value against the filter's ``Value``, compared as ``kind``."""
    if op == "In":
        choices = set(_split(value))
        return lambda actual: _text(actual) in choices
    if op == "Contains":
        return lambda actual: value in _text(actual)
    if kind == "text":
        if op == "Equals":
            return lambda actual: _text(actual) == value
        if op == "NotEquals":
            return lambda actual: _text(actual) != value
    wanted = _timestamp(name, value) if kind == "timestamp" else _number(value)
    if kind == "hyperparameter" and wanted is None:  # a text value: compared as text
        if op in _ORDERING:
            raise _invalid(f"Operator {op} on {name!r} needs a numeric Value, not {value!r}")
        return lambda actual: (_text(actual) == value) == (op == "Equals")
    if wanted is None:
        raise _invalid(f"Value {value!r} for {name!r} must be a number")
    if kind == "hyperparameter" and "." not in value:  # "If the Value is an integer, ... treated as integers"
        wanted = float(math.floor(wanted))

        def convert(actual: Any) -> float | None:
            number = _number(_text(actual))
            return None if number is None else float(math.floor(number))

    else:

        def convert(actual: Any) -> float | None:
            return _number(_text(actual)) if not isinstance(actual, int | float) else float(actual)

    compare: Callable[[float, float], bool] = {
        "Equals": lambda a, b: a == b,
        "NotEquals": lambda a, b: a != b,
        "GreaterThan": lambda a, b: a > b,
        "GreaterThanOrEqualTo": lambda a, b: a >= b,
        "LessThan": lambda a, b: a < b,
        "LessThanOrEqualTo": lambda a, b: a <= b,
    }[op]
    return lambda actual: (number := convert(actual)) is not None and compare(number, wanted)


def _property(name: Any, field: str) -> str:
    """How ``name`` compares (``text``, ``number``, ``timestamp``, ``hyperparameter``).

    :raises ApiError: ``ValidationException`` for a name that is not a TrainingJob property."""
    if not isinstance(name, str) or not name:
        raise _invalid(f"{field} must name a TrainingJob property")
    head, _, rest = name.partition(".")
    if head not in _PROPERTIES or (head in ("Metrics", "HyperParameters", "Tags") and not rest):
        raise _invalid(f"{field} {name!r} is not a property of a TrainingJob (see SearchRecord)")
    if head == "Metrics" or name in _NUMBERS:
        return "number"
    if name in _TIMESTAMPS:
        return "timestamp"
    return "hyperparameter" if head == "HyperParameters" else "text"


def _lookup(job: dict[str, Any], name: str, within: str | None) -> list[Any]:
    """The values of property ``name`` in ``job`` (several when it passes through a list), or of
    a nested filter's current element when ``within`` names the list it belongs to."""
    if within is not None:
        return _values(job["__item__"], name.removeprefix(within + ".").split("."))
    head, _, rest = name.partition(".")
    if head == "Tags":
        return [t["Value"] for t in job.get("Tags") or [] if t["Key"] == rest]
    if head == "Metrics":
        return [m["Value"] for m in job.get("FinalMetricDataList") or [] if m["MetricName"] == rest]
    if head in ("HyperParameters", "Environment"):  # map keys may hold dots
        value = (job.get(head) or {}).get(rest)
        return [] if value is None else [value]
    return _values(job, name.split("."))


def _values(node: Any, path: list[str]) -> list[Any]:
    if isinstance(node, list):
        return [v for item in node for v in _values(item, path)]
    if not path:
        return [] if node is None else [node]
    if not isinstance(node, dict):
        return []
    return _values(node.get(path[0]), path[1:])


def _sort_value(job: dict[str, Any], name: str) -> Any:
    values = _lookup(job, name, None)
    if not values:
        return None
    value = values[0]
    return value if isinstance(value, int | float) and not isinstance(value, bool) else _text(value)


# ----------------------------------------------------------------------------- shared
def paged(items: list[Any], body: dict[str, Any]) -> tuple[list[Any], str | None]:
    """One page of ``items``: ``MaxResults`` (1–100, default 100) from ``NextToken`` (an offset
    this server handed out). :raises ApiError: ``ValidationException`` for either out of range."""
    limit = body.get("MaxResults", 100)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100:
        raise wire.bad("maxResults", f"'{limit}' failed to satisfy constraint: must be between 1 and 100")
    token = body.get("NextToken") or "0"
    if not isinstance(token, str) or not token.isdigit():
        raise _invalid(f"Invalid pagination token {token!r}")
    start = int(token)
    page = items[start : start + limit]
    return page, (str(start + limit) if start + limit < len(items) else None)


def _refuse_unknown(
    body: dict[str, Any], known: frozenset[str], unsupported: frozenset[str], op: str
) -> None:
    if refused := sorted(set(body) & unsupported):
        raise _invalid(f"{op}: {', '.join(refused)} is not supported by the local training platform")
    if unknown := sorted(set(body) - known - unsupported):
        raise _invalid(f"{op} does not take the parameter(s) {', '.join(unknown)}")


def _enum(body: dict[str, Any], key: str, allowed: Iterable[str], default: str | None) -> Any:
    value = body.get(key, default)
    if value is not None and value not in allowed:
        raise wire.bad(
            key[0].lower() + key[1:],
            f"'{value}' failed to satisfy constraint: Member must satisfy enum value set: [{', '.join(allowed)}]",
        )
    return value


def _list_of(node: dict[str, Any], key: str) -> list[Any]:
    value = node.get(key) or []
    if not isinstance(value, list):
        raise _invalid(f"{key} must be a list")
    return value


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _number(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _timestamp(name: str, value: str) -> float:
    if (number := _number(value)) is not None:
        return number
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise _invalid(
            f"Value {value!r} for {name!r} must be an ISO 8601 date-time (YYYY-mm-ddTHH:MM:SS)"
        ) from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _invalid(message: str) -> ApiError:
    return ApiError(400, "ValidationException", message)
