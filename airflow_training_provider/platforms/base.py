"""What every platform provides: a descriptor (who it is, how its connection looks) and a dialect
(its wire format, pure translation, no I/O).

A dialect turns intentions (create this spec, get that job, cancel it) into :class:`ApiRequest`
values, authenticates a fully prepared :class:`HttpRequest`, and turns answers into the normalized
models of :mod:`airflow_training_provider.models` or into the provider's error kinds. The sync hook,
the async hook, the tests and the docs all use the same dialect object; HTTP, retries, polling and
Airflow glue never branch on the platform, they ask :class:`Capabilities`.

See ``docs/architecture.md`` for how the pieces fit and ``docs/adding-a-platform.md`` for a new one.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from airflow_training_provider.errors import (
    InvalidJobSpecError,
    JobNotFoundError,
    JobStateConflictError,
    MalformedResponseError,
    PlatformAuthError,
    TrainingPlatformError,
    TransientPlatformError,
)
from airflow_training_provider.models import (
    CancelRequest,
    CancelResult,
    Checkpoint,
    JobEvent,
    JobState,
    MetricPoint,
    TrainingJob,
)
from airflow_training_provider.platforms.credentials import Credentials  # still importable from here
from airflow_training_provider.portable import (
    Placement,
    PortableFineTuneSpec,
    PortableSpec,
    PortableSpecError,
    PortableTrainingSpec,
)
from airflow_training_provider.timestamps import parse_timestamp

log = logging.getLogger(__name__)
T = TypeVar("T")

#: HTTP statuses that say nothing about the request itself: retry with backoff.
TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
#: answers that prove the platform did not act on the request, so even a create may be re-sent.
NOT_PROCESSED_STATUSES = frozenset({429, 503})


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` as seconds (delta-seconds or HTTP date); ``None`` when absent or unreadable."""
    value = headers.get("Retry-After") or headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def tag_pairs(tags: list[str]) -> dict[str, str]:
    """Identity tags (``airflow-dag:x``) as key/value pairs (``{"airflow-dag": "x"}``), for
    platforms that keep them as SageMaker tags or PAI labels."""
    return dict(t.split(":", 1) for t in tags if ":" in t)


def with_tag_pairs(existing: list[dict[str, Any]] | None, tags: list[str]) -> list[dict[str, str]]:
    """``existing`` ``[{"Key", "Value"}]`` pairs with the identity ``tags`` added (they replace a
    pair of the same key)."""
    ident = tag_pairs(tags)
    own = [pair for pair in existing or [] if pair.get("Key") not in ident]
    return own + [{"Key": k, "Value": v} for k, v in ident.items()]


def name_value_pairs(value: Any, name_key: str, value_key: str) -> Any:
    """Hyperparameters as ``[{name_key, value_key}]`` pairs with string values (PAI's ``Name``/``Value``,
    ModelArts' ``name``/``value``); a mapping (``{"epochs": 3}``) is accepted and turned into that
    list. For a pydantic ``mode="before"`` validator.

    :raises ValueError: a boolean value (ambiguous as a string)."""
    if isinstance(value, Mapping):
        value = [{name_key: k, value_key: v} for k, v in value.items()]
    if not isinstance(value, list):
        return value
    out = []
    for item in value:
        if isinstance(item, dict) and isinstance(item.get(value_key), bool):
            raise ValueError(f"value of {item.get(name_key)!r} must be a string, not a boolean")
        if isinstance(item, dict) and isinstance(item.get(value_key), int | float):
            item = {**item, value_key: str(item[value_key])}
        out.append(item)
    return out


#: the field the local training platform adds to the job object of a platform that reports no money
#: (the emulator's wire module of that platform, "Money"): the job's cost so far in USD. No real
#: platform sends it; it is read in one place, :func:`local_cost_usd`.
LOCAL_COST_FIELD = "x_local_cost_usd"


def local_cost_usd(body: Any) -> float | None:
    """The cost so far (USD) the local training platform adds to a job object as
    :data:`LOCAL_COST_FIELD`, for a dialect whose platform reports no money (SageMaker, PAI,
    ModelArts): a job run on the emulator shows a cost in its result, lineage and asset event,
    while ``capabilities.cost_usd`` stays false (a real job of that platform has none). Only the
    dialect sees the raw job object, so it calls this while parsing.

    :param body: the decoded job object.
    :returns: the cost, or ``None``: a real platform's answer (no such field) or not a number."""
    value = body.get(LOCAL_COST_FIELD) if isinstance(body, dict) else None
    return float(value) if isinstance(value, int | float) else None


#: the field the local training platform adds to the job object of a *stopped user-code job* of a
#: platform that does not say whether the program saved anything after the stop signal (SageMaker,
#: PAI, ModelArts; the emulator's ``platforms/common.py``, ``FINAL_CHECKPOINT_FIELD``):
#: ``{"written": bool, "files": [name relative to the checkpoint directory, oldest first],
#: "location": checkpoint directory URI | null, "at": epoch seconds of the newest | null}``. No
#: real platform sends it; it is read in one place, :func:`local_final_checkpoint`.
LOCAL_FINAL_CHECKPOINT_FIELD = "x_local_final_checkpoint"


def local_final_checkpoint(body: Any, location: str | None) -> tuple[bool | None, list[Checkpoint]]:
    """What the program of a stopped job wrote after the stop signal, as the local training platform
    reports it in :data:`LOCAL_FINAL_CHECKPOINT_FIELD` (a dialect calls this while parsing, as it
    does :func:`local_cost_usd`).

    :param body: the decoded job object.
    :param location: the job's checkpoint location as the dialect read it from the job (SageMaker
        ``CheckpointConfig.S3Uri``, a ``checkpoints`` output channel); used when the field names none.
    :returns: ``(written, checkpoints)``: ``written`` for
        :attr:`~airflow_training_provider.models.TrainingJob.final_checkpoint_written` (``None``: a
        real platform's answer, no such field, or a malformed one); ``checkpoints`` one
        ``kind="final"`` checkpoint per file, id the file name, path ``<location>/<file>``, the newest
        last with ``created_at``; empty when none was written. A dialect puts them *before* the
        location in the job's checkpoints: the location stays the latest checkpoint, the one a retry
        with ``resume_from_checkpoint`` resumes from."""
    field = body.get(LOCAL_FINAL_CHECKPOINT_FIELD) if isinstance(body, dict) else None
    if not isinstance(field, dict) or not isinstance(field.get("written"), bool):
        return None, []
    try:
        newest = parse_timestamp(field["at"]) if field.get("at") is not None else None
    except ValueError:  # a malformed field, as above
        return None, []
    where = field.get("location") if isinstance(field.get("location"), str) else location
    files = [f for f in field.get("files") or [] if isinstance(f, str) and f]
    checkpoints = [
        Checkpoint(
            id=name,
            kind="final",
            path=f"{where.rstrip('/')}/{name}" if where else None,
            created_at=newest if i == len(files) - 1 else None,
        )
        for i, name in enumerate(files)
    ]
    return field["written"], checkpoints


#: the identity tags a task instance is named by (every try of it carries the same values).
TASK_INSTANCE_KEYS = ("airflow-deployment", "airflow-dag", "airflow-run", "airflow-task", "airflow-map")
#: hex characters of :func:`identity_digest` in a generated job name: 40 bits.
NAME_DIGEST_LENGTH = 10


def identity_digest(tags: list[str], length: int = NAME_DIGEST_LENGTH) -> str | None:
    """The first ``length`` hex characters of the SHA-256 of the task instance the identity ``tags``
    name (deployment, DAG, run, task and map index, joined by newlines; the try left out): the same
    for every try of one task instance, different between task instances. ``None`` when ``tags``
    lack one of :data:`TASK_INSTANCE_KEYS`."""
    ident = tag_pairs(tags)
    if not all(k in ident for k in TASK_INSTANCE_KEYS):
        return None
    return hashlib.sha256("\n".join(ident[k] for k in TASK_INSTANCE_KEYS).encode()).hexdigest()[:length]


def try_job_name(
    stem: str | None,
    tags: list[str],
    max_length: int,
    *,
    separators: str = "_-",
    digest_length: int = NAME_DIGEST_LENGTH,
) -> str:
    """The job name of one task-instance try, for platforms where the client names the job
    (SageMaker ``TrainingJobName``, PAI ``TrainingJobName``, ModelArts ``metadata.name``)::

        <readable>[-m<map index>]-<digest>-t<try>

    * ``readable``: ``stem`` (the name the spec gives, e.g. ``churn-20260101``) or, without one,
      ``af-<dag_id>-<task_id>``; every run of characters other than ASCII letters, digits and
      ``separators`` becomes ``-`` (a task group's ``group.task`` → ``group-task``), separators are
      stripped from both ends, and it is cut so the whole name fits ``max_length``;
    * ``-m<map index>`` only for a mapped task instance (``airflow-map`` ≥ 0);
    * ``<digest>``: :func:`identity_digest` of the task instance (``digest_length`` hex characters),
      so two task instances never share a name even when their stems render the same (two DAGs, or
      two runs of one date); left out when ``tags`` do not name a task instance;
    * ``-t<try>``: the try number (``airflow-try``, 1 when absent).

    Only the readable part is ever cut: map index, digest and try always survive. The name depends
    on nothing but ``stem`` and ``tags``, so a create re-sent for the same try carries the same name
    (what :meth:`Dialect.created_job_id` relies on). It starts and ends with a letter or digit and
    holds only ``[A-Za-z0-9]`` and ``separators``.

    :param max_length: the platform's name limit (SageMaker 63, PAI and ModelArts 64; see
        ``docs/platforms/<platform>.md``, "Job names").
    :param separators: punctuation the platform allows in a name (``-`` only on SageMaker)."""
    ident = tag_pairs(tags)
    map_index = ident.get("airflow-map", "-1")
    digest = identity_digest(tags, digest_length)
    tail = (
        (f"-m{map_index}" if map_index.isdigit() else "")
        + (f"-{digest}" if digest else "")
        + f"-t{ident.get('airflow-try', '1')}"
    )
    readable = stem or f"af-{ident.get('airflow-dag', '')}-{ident.get('airflow-task', '')}"
    cleaned = re.sub(f"[^A-Za-z0-9{re.escape(separators)}]+", "-", readable).strip(separators) or "job"
    return cleaned[: max_length - len(tail)].rstrip(separators) + tail


class WireModel(BaseModel):
    """Base of every platform's wire models: unknown fields are kept, so a vendor adding fields never
    breaks a poll. In a job spec, a model whose content is free-form by the platform's docs sets
    ``free_form = True``; elsewhere a field the model does not know is a likely typo
    (:func:`unknown_fields`)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    free_form: ClassVar[bool] = False


def unknown_fields(model: BaseModel, path: str = "") -> Iterator[tuple[str, str, list[str]]]:
    """``(dotted path, field name, the model's known field names)`` of every field ``model`` (and
    the models inside it) does not know; a free-form model's own extra fields are allowed, its typed
    fields are still checked."""
    known = list(type(model).model_fields)
    if not getattr(model, "free_form", False):
        for name in model.model_extra or {}:
            yield f"{path}{name}", name, known
    for name in known:
        value = getattr(model, name)
        items = value if isinstance(value, list) else [value]
        for index, item in enumerate(items):
            if isinstance(item, BaseModel):
                suffix = f".{index}" if isinstance(value, list) else ""
                yield from unknown_fields(item, f"{path}{name}{suffix}.")


#: what a parser raises on an answer of another shape than the platform documents: ``ValueError``
#: (pydantic's ``ValidationError`` and ``json``'s ``JSONDecodeError`` included), ``TypeError``,
#: ``LookupError`` (``KeyError``, ``IndexError``) and ``AttributeError``.
MALFORMED_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    TypeError,
    LookupError,
    AttributeError,
    OverflowError,  # int(float("inf")): an Infinity where a count belongs
)


def parse_answer(request: ApiRequest, parse: Callable[[Any], T], answer: Any, status: int | None = None) -> T:
    """``parse(answer)``: the one place a dialect's parser is called on a 2xx answer to ``request``
    (by the transport for an :attr:`ApiRequest.reader`, by the job lifecycle for the answers it
    reads itself). Whatever the parser raises on an answer of another shape (:data:`MALFORMED_ERRORS`)
    becomes a :class:`~airflow_training_provider.errors.MalformedResponseError`: a failed call,
    retried like a 5xx and counted against a poll's outage budget, never a crashed wait.

    :param request: the call answered (named in the error).
    :param parse: a dialect parser, or a function calling one.
    :param answer: the body, raw (``bytes``/``str``) or decoded JSON, as ``parse`` takes it.
    :param status: the answer's HTTP status, when known (the transport's), for the error.
    :returns: what ``parse`` returns.
    :raises MalformedResponseError: ``parse`` failed on ``answer`` (its error is the ``__cause__``).
    """
    try:
        return parse(answer)
    except MALFORMED_ERRORS as exc:
        raise MalformedResponseError(
            f"malformed answer to {request.method} {request.path}: {_malformed_detail(exc)}",
            status=status,
        ) from exc


def _malformed_detail(exc: Exception) -> str:
    """What did not parse: pydantic's first line and the field at fault, a missing key, or the
    error's first line."""
    if isinstance(exc, ValidationError):
        return f"{str(exc).splitlines()[0]} ({_what_failed(exc)})"
    if isinstance(exc, KeyError):
        return _what_failed(exc)
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def readable_rows(
    platform: str, rows: Any, parse: Callable[[Any], T], id_path: str, level: int = logging.WARNING
) -> list[T]:
    """Every row of a list answer that ``parse`` reads, in order. A row it cannot read (a wrongly
    typed or missing field: any of :data:`MALFORMED_ERRORS`) is left out and logged, naming the row
    (the value at the dotted ``id_path`` when readable, else its position) and the field at fault:
    one bad record never hides the others.

    :param platform: the dialect's name, for the log line.
    :param level: the log line's level.
    :raises ValueError: ``rows`` is not a list (then the answer itself is malformed)."""
    if not isinstance(rows, list):
        raise ValueError(f"{platform}: the list answer's rows are not a list")
    out = []
    for index, row in enumerate(rows):
        try:
            out.append(parse(row))
        except MALFORMED_ERRORS as exc:
            row_id = _dotted(row, id_path)
            which = f"job {row_id!r} (row {index + 1})" if row_id is not None else f"row {index + 1}"
            log.log(
                level,
                "%s: listed %s is left out, it does not read as a job (%s); the other rows are kept",
                platform,
                which,
                _what_failed(exc),
            )
    return out


def _dotted(value: Any, path: str) -> Any:
    """``value["a"]["b"]`` for ``"a.b"``; ``None`` when a step is missing or not a mapping."""
    for key in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value if isinstance(value, str | int) else None


def _what_failed(exc: Exception) -> str:
    """``field 'a.b': <why>`` of a pydantic error; the error's first line otherwise."""
    if isinstance(exc, ValidationError) and exc.errors():
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        return f"field '{where}': {err['msg']}" if where else err["msg"]
    if isinstance(exc, KeyError):
        return f"field {exc.args[0]!r} is missing" if exc.args else "a field is missing"
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


@dataclass(frozen=True)
class ApiRequest:
    """One platform call, described by a dialect.

    :ivar method: HTTP method.
    :ivar path: path relative to the connection's base URL (``/v2/training/jobs``; ``/`` for an
        RPC-style API such as AWS's).
    :ivar body: JSON-serializable body, or ``None``; serialized once, to bytes, by the transport
        (:meth:`Dialect.encode_body`) before the request is authenticated.
    :ivar params: query parameters (a mapping or a list of pairs for repeated keys).
    :ivar headers: headers the platform's protocol needs (e.g. ``X-Amz-Target``).
    :ivar content_type: ``Content-Type`` of the body.
    :ivar idempotent: whether the call may be re-sent after it may have landed (a create usually not).
    :ivar budget: seconds to keep retrying transient failures (an outage budget) instead of a fixed
        number of attempts; set by the job lifecycle, not by dialects.
    :ivar reader: reads a 2xx body (the raw ``bytes``, or ``str`` from the sync hook) into what the
        caller gets instead of the decoded JSON; the transport calls it through :func:`parse_answer`,
        so a body it cannot read (any of :data:`MALFORMED_ERRORS`) is a
        :class:`~airflow_training_provider.errors.MalformedResponseError`, retried like a 5xx. Set
        by the job lifecycle (a poll: :meth:`Dialect.read_poll`, one validation straight from the
        bytes), not by dialects.
    :ivar timeout: seconds allowed for this call when fewer than the hook's ``call_timeout``; set
        by the job lifecycle (a program-log read bounded by the next poll), not by dialects.
    :ivar kind: what the call costs in the account's budget (:mod:`~airflow_training_provider.budget`):
        ``read`` (the default), ``write`` (a cancel) or ``create``; set by the job lifecycle.
    :ivar urgent: a read on a cancel's way (its state check, its confirm polls): sent at once,
        never behind the polls paced by the budget nor held by a throttle pause (it still counts);
        set by the job lifecycle.
    :ivar status_of: the status read of waiting job ``status_of`` (a poll after the first): a
        driver that reads many jobs per call (the triggerer's coalesced polling,
        :mod:`~airflow_training_provider.hooks.coalescing`) may answer it from its batch read
        instead of sending it; set by the job lifecycle.
    :ivar service: a companion service of the platform the call goes to instead of the job API
        (SageMaker's program logs: ``logs``, CloudWatch Logs); the connection names its base URL
        (:attr:`~airflow_training_provider.platforms.descriptor.ConnectionParts.service_urls`) and
        the dialect signs for it (:attr:`HttpRequest.service`). ``None``: the job API.
    """

    method: str
    path: str
    body: Any = None
    params: Mapping[str, Any] | list[tuple[str, Any]] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    idempotent: bool = True
    budget: float | None = None
    reader: Callable[[bytes | str], Any] | None = field(default=None, compare=False, repr=False)
    service: str | None = None
    timeout: float | None = None
    kind: str = "read"
    status_of: str | None = None
    urgent: bool = False


@dataclass
class HttpRequest:
    """A request exactly as it goes on the wire: what a signature covers.

    :ivar method: HTTP method.
    :ivar url: absolute URL, query string included (``https://host/v2/x?a=1``).
    :ivar headers: every header sent, authentication added by :meth:`Dialect.authenticate`.
    :ivar body: the body bytes (``b""`` when there is none).
    :ivar timestamp: UTC time the request is prepared and signed.
    :ivar service: the companion service it goes to (:attr:`ApiRequest.service`), ``None``: the job API.
    """

    method: str
    url: str
    headers: dict[str, str]
    body: bytes
    timestamp: datetime
    service: str | None = None


@dataclass(frozen=True)
class LogPage:
    """One read of a job's program log (the lines its training program printed), as
    :meth:`Dialect.parse_logs` makes it of a logs answer.

    :ivar lines: the new lines, oldest first, without their line ends.
    :ivar cursor: where the next read starts (the position after ``lines``): an opaque, JSON-safe
        string the dialect defines and alone reads (:meth:`Dialect.logs_request`); ``None`` = from
        the start.
    :ivar more: more lines are there to read now (a full page); ``False`` = read up to the end.
    """

    lines: tuple[str, ...]
    cursor: str | None
    more: bool


@dataclass(frozen=True)
class StatusBatch:
    """One page of a batch status read (:meth:`Dialect.parse_status_batch`).

    :ivar jobs: the jobs the page lists (any of them, not only those asked for), as
        :meth:`Dialect.parse_job` reads a row.
    :ivar next_page: the token of the next page (opaque; the dialect's), ``None``: the last page.
    """

    jobs: list[TrainingJob]
    next_page: str | None = None


@dataclass(frozen=True)
class Capabilities:
    """What a platform can do, asked by the shared code instead of branching on the platform.

    :ivar final_checkpoint_on_cancel: cancel can ask the job to save a final checkpoint.
    :ivar preserve_checkpoints_flag: cancel can be told to keep or delete checkpoints.
    :ivar events: the platform has a job event list worth streaming into the task log.
    :ivar events_in_job: the events come in the job object itself (no events endpoint).
    :ivar list_jobs: jobs can be listed by tag (needed by re-attach and the orphan reaper).
    :ivar checkpoints_in_job: the job object lists its checkpoints; if not, the checkpoints
        endpoint is asked when a job ends.
    :ivar metric_history: the job's per-epoch metrics can be read while it runs (a metrics endpoint,
        or the metrics saved with each checkpoint): the ``early_stopping`` guard works.
    :ivar cost_usd: the job reports what it has cost so far, in USD: the ``max_cost_usd`` guard works.
    :ivar program_logs: the lines the job's training program printed can be read while it runs
        (:meth:`Dialect.logs_request`): ``stream_logs=True`` writes them into the task log.
    """

    final_checkpoint_on_cancel: bool = False
    preserve_checkpoints_flag: bool = False
    events: bool = False
    events_in_job: bool = False
    list_jobs: bool = False
    checkpoints_in_job: bool = True
    metric_history: bool = False
    cost_usd: bool = False
    program_logs: bool = False

    def served_by(self) -> dict[str, tuple[str, ...]]:
        """The :class:`Dialect` methods a dialect declaring these capabilities must override, by
        the declaration they serve (checked when a dialect class is defined): ``events`` (not in
        the job object) → the events endpoint and its parser; ``checkpoints_in_job=False`` → the
        checkpoints endpoint and its parser; ``list_jobs`` → the list call and its parser;
        ``program_logs`` → the log read and its parser. The
        other flags are served by methods every dialect has (``parse_job``, ``cancel_request``)."""
        served: dict[str, tuple[str, ...]] = {}
        if self.events and not self.events_in_job:
            served["events"] = ("events_request", "parse_events")
        if not self.checkpoints_in_job:
            served["checkpoints_in_job=False"] = ("checkpoints_request", "parse_checkpoints")
        if self.list_jobs:
            served["list_jobs"] = ("list_request", "parse_list")
        if self.program_logs:
            served["program_logs"] = ("logs_request", "parse_logs")
        return served


class Dialect(ABC):
    """A platform's wire format. Subclasses set ``name``, ``status_map``, ``capabilities``, ``spec_model``.

    **The contract.** A dialect is pure translation: no I/O, no state, one instance shared by every
    call. The ``*_request`` methods describe a call (an :class:`ApiRequest`; the transport sends it);
    the ``parse_*`` methods read its 2xx answer, decoded from JSON, into the normalized models of
    :mod:`airflow_training_provider.models`. Each names in its docstring the platform call it maps
    (``docs/platforms/<platform>.md``, "Operations used" / "Endpoints used").

    *Parsers may simply raise.* The shared code calls every parser through :func:`parse_answer`:
    whatever a parser raises on an answer of another shape (:data:`MALFORMED_ERRORS`: ``KeyError``,
    ``TypeError``, ``AttributeError``, ``ValueError``, pydantic's ``ValidationError``) becomes a
    :class:`~airflow_training_provider.errors.MalformedResponseError`, a failed call retried within
    the outage budget (an auxiliary read's value is left out), never a crashed wait.

    *Capabilities are checked when the class is defined* (:meth:`__init_subclass__`): a flag in
    :attr:`capabilities` whose serving methods the class does not override (``events`` →
    :meth:`events_request` and :meth:`parse_events`...) is a ``TypeError`` at import.
    """

    name: ClassVar[str]
    status_map: ClassVar[dict[str, JobState]]
    capabilities: ClassVar[Capabilities] = Capabilities()
    #: model used to validate a job spec before submit (extra fields allowed).
    spec_model: ClassVar[type[BaseModel]]
    #: dotted paths of spec fields that always hold a secret (Together's ``wandb_key``): their
    #: values are masked in the Rendered Template view and the task log.
    secret_fields: ClassVar[tuple[str, ...]] = ()
    #: dotted path of the spec's environment-variable map (``Environment`` on SageMaker), if the
    #: platform has one: ``wandb_conn_id`` sets ``WANDB_API_KEY`` there. (Values under names that
    #: look secret are masked there as anywhere in the spec.)
    environment_field: ClassVar[str | None] = None

    _unknown_statuses_logged: ClassVar[set[tuple[str, str]]] = set()
    _status_by_folded_name: ClassVar[dict[str, JobState]] = {}
    #: a request method → the parser that reads its answer: a dialect overriding one overrides both
    _PARSER_OF: ClassVar[dict[str, str]] = {
        "checkpoints_request": "parse_checkpoints",
        "events_request": "parse_events",
        "metrics_request": "parse_metrics",
        "list_request": "parse_list",
        "logs_request": "parse_logs",
    }

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Check the class when it is defined (at import): each capability it declares is served
        by methods it overrides (:meth:`Capabilities.served_by`), and each optional request it
        overrides has its parser (``metrics_request`` → ``parse_metrics``...).

        :raises TypeError: naming the class, the capability (or request) and the missing methods.
        """
        super().__init_subclass__(**kwargs)
        if "status_map" in cls.__dict__:
            cls._status_by_folded_name = {k.strip().lower(): v for k, v in cls.status_map.items()}
        name = f"{cls.__module__}.{cls.__qualname__}"
        for flag, methods in cls.capabilities.served_by().items():
            missing = [m for m in methods if not cls._overrides(m)]
            if missing:
                raise TypeError(
                    f"{name} declares capabilities.{flag} but does not override "
                    f"{', '.join(missing)}, which serve{'s' if len(missing) == 1 else ''} it"
                )
        for request, parser in cls._PARSER_OF.items():
            if cls._overrides(request) and not cls._overrides(parser):
                raise TypeError(f"{name} overrides {request} but not {parser}, which reads its answer")

    @classmethod
    def _overrides(cls, method: str) -> bool:
        """Whether ``cls`` (or a base between it and :class:`Dialect`) defines its own ``method``."""
        return getattr(cls, method) is not getattr(Dialect, method)

    # -- spec ---------------------------------------------------------------------------------
    def validate_spec(self, spec: dict[str, Any], allow_unknown_fields: bool = False) -> dict[str, Any]:
        """``spec`` checked against the platform's create schema and returned as that schema types it:
        a numeric string where the schema says number (a templated ``"{{ params.epochs }}"``) becomes
        the number; fields the schema does not model are passed through as they are.

        :param allow_unknown_fields: accept fields the provider does not know (an API newer than
            it); by default such a field is refused, naming it and the closest known field.
        :raises InvalidJobSpecError: naming the first offending field and what was expected.
        """
        if not isinstance(spec, dict):
            raise InvalidJobSpecError("spec", f"a mapping (dict), got {type(spec).__name__}", self.name)
        try:
            model = self.spec_model.model_validate(spec)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "spec"
            raise InvalidJobSpecError(where, err["msg"], self.name) from None
        if not allow_unknown_fields:
            for where, name, known in unknown_fields(model):
                close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
                hint = f"did you mean '{close[0]}'?" if close else f"known fields: {', '.join(sorted(known))}"
                raise InvalidJobSpecError(
                    where,
                    f"unknown field ({hint}) — to send fields this provider does not know yet, set "
                    "allow_unknown_fields=True",
                    self.name,
                )
        return model.model_dump(mode="json", exclude_unset=True)

    #: the object storage a portable spec's locations are in (``s3``, ``oss``, ``obs``); ``None``:
    #: the platform takes no portable training spec (:mod:`airflow_training_provider.portable`)
    storage_scheme: ClassVar[str | None] = None
    #: how the platform takes a portable spec's ``source_dir``: packed as one ``sourcedir.tar.gz``
    #: (SageMaker script mode) or as the files themselves
    code_packed: ClassVar[bool] = False
    #: whether the platform reads a portable spec's ``metric_definitions`` from the program's
    #: output itself (``MetricDefinitions``); ``False``: the operator applies them to the program
    #: log the platform serves when the job ends (ModelArts)
    metric_regexes: ClassVar[bool] = True

    def compile_portable(self, spec: PortableSpec, place: Placement) -> dict[str, Any]:
        """The native create body of a portable spec: :meth:`compile_training` for a
        :class:`~airflow_training_provider.portable.PortableTrainingSpec`,
        :meth:`compile_fine_tune` for a :class:`~airflow_training_provider.portable.PortableFineTuneSpec`.
        The body is validated later as any native spec (:meth:`validate_spec`); secret references
        stay in it, to be resolved on the worker.

        :param place: the connection's storage root and the uploaded code's digest.
        :raises PortableSpecError: naming the portable field that is wrong, or that this platform
            cannot serve (and why)."""
        if isinstance(spec, PortableFineTuneSpec):
            return self.compile_fine_tune(spec, place)
        return self.compile_training(spec, place)

    def compile_training(self, spec: PortableTrainingSpec, place: Placement) -> dict[str, Any]:
        """A portable training spec's native body (training platforms override it).

        :raises PortableSpecError: always here: the platform takes no portable training spec."""
        raise PortableSpecError(
            "portable_spec",
            "takes no portable training spec (SageMaker, PAI and ModelArts do); a portable fine-tune "
            "spec (with base_model) or its native spec",
            place.platform,
        )

    def compile_fine_tune(self, spec: PortableFineTuneSpec, place: Placement) -> dict[str, Any]:
        """A portable fine-tune spec's native body (fine-tuning platforms override it);
        ``place`` names the platform (its storage is not used).

        :raises PortableSpecError: always here: the platform takes no portable fine-tune spec."""
        raise PortableSpecError(
            "base_model",
            "takes no portable fine-tune spec (Together and TensorOne do); a portable training spec "
            "(your script or a command) or its native spec",
            place.platform,
        )

    def training_data(self, spec: dict[str, Any]) -> list[str]:
        """URIs of the data a create ``spec`` trains on (for lineage), as the platform names them
        (``s3://…``, ``oss://…``, ``together://files/<id>``…); ``[]`` when it names none."""
        return []

    def spec_defaults(self, credentials: Credentials) -> dict[str, Any]:
        """Top-level spec fields the connection supplies when the spec leaves them out (PAI's
        ``WorkspaceId``); merged under the spec before it is validated. None by default."""
        return {}

    def with_wandb(self, spec: dict[str, Any], api_key: str, base_url: str | None) -> dict[str, Any] | None:
        """A copy of ``spec`` that logs the job to Weights & Biases with ``api_key`` (and a
        self-hosted W&B at ``base_url``): by default the environment variables ``WANDB_API_KEY``
        (``WANDB_BASE_URL``) in :attr:`environment_field`; ``None`` where the platform has no place
        for them.

        :raises InvalidJobSpecError: the spec sets the key itself."""
        if self.environment_field is None:
            return None
        added = {"WANDB_API_KEY": api_key, **({"WANDB_BASE_URL": base_url} if base_url else {})}
        *parents, leaf = self.environment_field.split(".")
        out = dict(spec)
        node = out
        for part in parents:
            node[part] = dict(node.get(part) or {})
            node = node[part]
        if "WANDB_API_KEY" in (node.get(leaf) or {}):
            raise InvalidJobSpecError(
                f"{self.environment_field}.WANDB_API_KEY",
                "set here and by wandb_conn_id: keep one",
                self.name,
            )
        node[leaf] = {**(node.get(leaf) or {}), **added}
        return out

    @abstractmethod
    def with_tags(self, spec: dict[str, Any], tags: list[str]) -> dict[str, Any]:
        """A copy of ``spec`` carrying the identity ``tags`` where the platform keeps them, so that
        the job it creates is found again by :meth:`list_request` and :meth:`parse_list` reads them
        back into :attr:`TrainingJob.tags` (TensorOne ``tags``, SageMaker ``Tags``, PAI ``Labels``).

        :param spec: a validated create body (:meth:`validate_spec`); not modified.
        :param tags: ``key:value`` identity tags (``airflow-dag:etl``...); a platform that keeps
            key/value pairs splits them (:func:`tag_pairs`), one that limits names derives the job
            name from them (:func:`try_job_name`).
        :returns: the create body to send.
        """

    def resume_spec(self, spec: dict[str, Any], job_id: str, checkpoint: Checkpoint) -> dict[str, Any] | None:
        """``spec`` changed to start from ``checkpoint`` of job ``job_id``; ``None`` if the platform
        cannot resume from a checkpoint."""
        return None

    def created_job_id(self, spec: dict[str, Any]) -> str | None:
        """The id a create of ``spec`` (validated and tagged) will have, when the client chooses it
        (a SageMaker job name); ``None`` when the platform assigns ids. With a known id, a create
        answered "already exists" for a job carrying this try's tags is that create having landed."""
        return None

    # -- requests -----------------------------------------------------------------------------
    @abstractmethod
    def create_request(self, spec: dict[str, Any]) -> ApiRequest:
        """The call that submits a job; its answer is read by :meth:`parse_created`.

        Wire source: the platform's create call (TensorOne ``POST /v2/training/jobs``, Together
        ``POST /v1/fine-tunes``, SageMaker ``CreateTrainingJob``, PAI ``CreateTrainingJob``,
        ModelArts ``POST /v2/{project_id}/training-jobs``).

        :param spec: the create body, validated (:meth:`validate_spec`) and tagged (:meth:`with_tags`).
        :returns: the request, ``idempotent=False``: a create that may have landed is never re-sent
            (where the client names the job, :meth:`created_job_id` lets an "already exists" answer
            be recognized as this create).
        """

    @abstractmethod
    def get_request(self, job_id: str) -> ApiRequest:
        """The status read: the call that returns job ``job_id`` now. Its answer is read by
        :meth:`read_poll` at every poll and by :meth:`parse_job` otherwise; it is the one read
        whose failure decides a wait.

        Wire source: TensorOne ``GET /v2/training/jobs/{jobId}``, Together ``GET /v1/fine-tunes/{id}``,
        SageMaker ``DescribeTrainingJob``, PAI ``GetTrainingJob``, ModelArts
        ``GET /v2/{project_id}/training-jobs/{id}``.

        :param job_id: the platform's job id (:attr:`TrainingJob.id`).
        :returns: an idempotent request (retried within the outage budget).
        """

    @abstractmethod
    def cancel_request(self, job_id: str, cancel: CancelRequest) -> ApiRequest:
        """The call that asks the platform to stop job ``job_id``; its answer is read by
        :meth:`parse_cancel`. A "job already ended" refusal should classify as
        :class:`~airflow_training_provider.errors.JobStateConflictError` (:meth:`classify_error`):
        the shared code then reads the job and reports it, not an error.

        Wire source: TensorOne ``POST /v2/training/jobs/{jobId}/cancel``, Together
        ``POST /v1/fine-tunes/{id}/cancel``, SageMaker ``StopTrainingJob``, PAI ``StopTrainingJob``,
        ModelArts ``POST /v2/{project_id}/training-jobs/{id}/actions`` (``terminate``).

        :param job_id: the job to stop.
        :param cancel: what to ask, already reduced to what the platform can do
            (:meth:`effective_cancel`): a final checkpoint, keeping checkpoints, a reason, force.
        :returns: the request.
        """

    def checkpoints_request(self, job_id: str) -> ApiRequest | None:
        """The call listing job ``job_id``'s checkpoints (read by :meth:`parse_checkpoints`), for a
        platform whose job object does not list them (``capabilities.checkpoints_in_job`` false) or
        lists them only in part.

        Wire source: TensorOne ``GET /v2/training/jobs/{jobId}/checkpoints``, Together
        ``GET /v1/fine-tunes/{id}/checkpoints``.

        :returns: the request, or ``None`` (the default) when the job object already has them.
        """
        return None

    def list_request(self, tags: list[str], created_after: datetime | None = None) -> ApiRequest:
        """The call listing the jobs carrying every one of ``tags`` (read with :meth:`parse_list`),
        for re-attach, adoption and the orphan reaper (``capabilities.list_jobs``). The shared code
        filters the rows by ``tags`` again, so a platform that cannot filter may list every job.

        Wire source: TensorOne ``GET /v2/training/jobs?tag=…``, Together ``GET /v1/fine-tunes``,
        SageMaker ``Search``, PAI ``ListTrainingJobs``, ModelArts
        ``POST /v2/{project_id}/training-job-searches``.

        :param tags: ``key:value`` identity tags, as :meth:`with_tags` set them.
        :param created_after: the jobs wanted were created after this (UTC); a platform whose list
            only covers a recent window unless told (PAI: 7 days) sends it, the others list every
            job and ignore it.
        :returns: the request.
        :raises NotImplementedError: the platform cannot list jobs (the default)."""
        raise NotImplementedError(f"{self.name} cannot list jobs")

    def probe_request(self) -> ApiRequest:
        """The cheapest authenticated call (a connection's Test button); its answer is not read.

        Wire source: by default the job list (:meth:`list_request`); TensorOne
        ``GET /v2/training/jobs?limit=1``, PAI ``ListTrainingJobs`` of one row, ModelArts' search
        of one.

        :returns: the request."""
        return self.list_request([])

    def events_request(self, job_id: str) -> ApiRequest | None:
        """The call listing job ``job_id``'s events (read by :meth:`parse_events`), for a platform
        with ``capabilities.events`` whose events are not in the job object
        (``capabilities.events_in_job`` false). Read at every poll while a task streams them, as an
        auxiliary read (refused or malformed, it is left out, never failing the wait).

        Wire source: Together ``GET /v1/fine-tunes/{id}/events``, PAI ``ListTrainingJobEvents``,
        ModelArts ``GET /v2/{project_id}/training-jobs/{id}/events``.

        :returns: the request, or ``None`` (the default): no events endpoint.
        """
        return None

    def metrics_request(self, job_id: str) -> ApiRequest | None:
        """The call for job ``job_id``'s metric history (read with :meth:`parse_metrics`): by the
        ``early_stopping`` guard at each new epoch and by the final view of an ended job. Without
        one, the history is taken from the metrics saved with each checkpoint.

        Wire source: Together ``GET /v1/fine-tunes/{id}/metrics``, PAI ``ListTrainingJobMetrics``.

        :returns: the request, or ``None`` (the default): the platform has no metrics endpoint.
        """
        return None

    def logs_request(self, job: TrainingJob, cursor: str | None) -> ApiRequest | None:
        """The next read of job ``job``'s program log (the lines its training program printed),
        from ``cursor`` on; its answer is read by :meth:`parse_logs`. For a platform with
        ``capabilities.program_logs``; read while a task with ``stream_logs=True`` waits, as an
        auxiliary read (refused or malformed: no lines, the cursor kept, never failing the wait).

        Wire source: SageMaker CloudWatch Logs ``DescribeLogStreams`` / ``GetLogEvents``, PAI
        ``ListTrainingJobLogs``, ModelArts ``GET …/tasks/{task_id}/logs/preview``
        (``docs/platforms/<platform>.md``, "Program logs").

        :param job: the job as last polled (a dialect may need more than its id: ModelArts' task).
        :param cursor: a cursor of an earlier :class:`LogPage` of this job, ``None`` = from the start.
        :returns: the request, or ``None``: nothing to read yet (no log stream, no task) or no
            log endpoint (the default).
        """
        return None

    def parse_logs(self, body: Any, cursor: str | None) -> LogPage:
        """The page of program log lines in a logs answer (to :meth:`logs_request` with ``cursor``).

        :param body: the decoded answer.
        :param cursor: the cursor the request was made from.
        :returns: the new lines and the cursor after them; by default none (no log endpoint).
        :raises Exception: any of :data:`MALFORMED_ERRORS` on an answer of another shape.
        """
        return LogPage((), cursor, False)

    #: most job ids one batch status request names (:meth:`status_batch_request`); the coalesced
    #: poller splits the waiting jobs into groups of this many, one request (and its pages) each
    batch_size: ClassVar[int] = 100
    #: a row of the batch read is the whole job as :meth:`parse_job` reads a Get job answer
    #: (SageMaker ``Search``, ModelArts' job search): it answers a poll. ``False``: a row is
    #: partial (PAI's list has no metrics): it only says whether the job changed, and a job that
    #: changed is read on its own.
    batch_rows_complete: ClassVar[bool] = False

    def status_batch_request(
        self, job_ids: list[str], page: str | None = None, created_after: datetime | None = None
    ) -> ApiRequest | None:
        """A read of many jobs' status in one call, for a triggerer's coalesced polling: the jobs
        ``job_ids`` (at most :attr:`batch_size`) or a list that holds them (every live job of the
        account); its answer is read by :meth:`parse_status_batch`.

        Wire source: SageMaker ``Search`` by ``TrainingJobName``, PAI ``ListTrainingJobs``,
        ModelArts' training job search, Together's and TensorOne's job lists
        (``docs/platforms/<platform>.md``, "Batch reads").

        :param page: the token of the page to read (:attr:`StatusBatch.next_page`), ``None``: the first.
        :param created_after: the oldest creation time among ``job_ids`` where known (UTC), for a
            list bounded in time (PAI's 7 days).
        :returns: the request, or ``None`` (the default): no batch read, every job is polled on its own.
        """
        return None

    def parse_status_batch(self, body: Any, page: str | None = None) -> StatusBatch:
        """The jobs of one page of a batch status read (:meth:`status_batch_request`), a row that
        does not read as a job left out (logged, :meth:`listed_jobs`; at debug level for a list
        that also holds other jobs, read every round: a waiting job whose row is left out is read
        on its own, and that read says what is wrong), and the next page's token.

        :param page: the token the page was asked with (``None``: the first), for a list whose
            answer does not say which page it is (PAI's ``PageNumber``).

        :raises Exception: any of :data:`MALFORMED_ERRORS` on an answer of another shape.
        :raises NotImplementedError: no batch read (the default)."""
        raise NotImplementedError(f"{self.name} has no batch status read")

    def tagged_job_request(self, job_id: str) -> ApiRequest | None:
        """A request whose answer (read with :meth:`parse_list`) holds job ``job_id`` with its tags,
        for platforms whose job object leaves the tags out: how a create answered "already exists"
        tells this try's job from another's (:meth:`created_job_id`).

        Wire source: SageMaker ``Search`` by ``TrainingJobName``.

        :returns: the request, or ``None`` (the default): the job object has its tags."""
        return None

    def encode_body(self, request: ApiRequest) -> bytes:
        """The body bytes sent (and signed): compact JSON by default, ``b""`` for no body."""
        if request.body is None:
            return b""
        return json.dumps(request.body, separators=(",", ":")).encode()

    def authenticate(self, request: HttpRequest, credentials: Credentials) -> dict[str, str]:
        """Headers that authenticate ``request`` (bearer token by default).

        ``request`` is final: method, absolute URL with its query, every header and the body bytes
        and the signing time are all there, so a signature (AWS SigV4, Huawei SDK-HMAC-SHA256,
        Alibaba ACS3-HMAC-SHA256) can cover them.
        """
        return {"Authorization": f"Bearer {credentials.api_key or ''}"}

    # -- responses ----------------------------------------------------------------------------
    # Every parser takes the 2xx answer's decoded JSON (``None`` for an empty body) and may raise
    # on an answer of another shape: the caller (:func:`parse_answer`) makes that a
    # MalformedResponseError, a failed call.
    @abstractmethod
    def parse_created(self, body: Any) -> TrainingJob:
        """The job a create answer describes (the answer to :meth:`create_request`).

        Wire source: the create call's answer: the whole job (TensorOne, Together, ModelArts) or
        only its id (SageMaker ``TrainingJobArn``, PAI ``TrainingJobId``: the job is then
        reported as just created, ``pending``/``starting``).

        :param body: the decoded answer.
        :returns: the job; at least ``id``, ``platform``, ``state`` and ``raw_status``.
        :raises Exception: any of :data:`MALFORMED_ERRORS` on an answer of another shape.
        """

    @abstractmethod
    def parse_job(self, body: Any) -> TrainingJob:
        """The whole job of a Get job answer (the answer to :meth:`get_request`): state (through
        :meth:`map_status`), message, progress, metrics, checkpoints, cost, tags, artifacts, events
        where the job object has them, and the timestamps (``started_at`` drives ``max_runtime``
        and hourly pricing). Also reads a terminal job at the end of a wait.

        Wire source: TensorOne's job object, Together's fine-tune object, SageMaker
        ``DescribeTrainingJob``, PAI ``GetTrainingJob``, ModelArts' training job (see
        ``docs/platforms/<platform>.md``, "The job").

        :param body: the decoded answer.
        :returns: the job, its fields as :class:`~airflow_training_provider.models.TrainingJob`
            documents them.
        :raises Exception: any of :data:`MALFORMED_ERRORS` on an answer of another shape.
        """

    def parse_poll(self, body: Any) -> TrainingJob:
        """The job as a poll needs it: id, state, raw status, message, progress, metrics and cost
        (checkpoints, events and timestamps may be left out). Called on every poll of every
        waiting job, so a dialect may parse less here than :meth:`parse_job`; a terminal job is
        parsed again with :meth:`parse_job`. By default the same as :meth:`parse_job`.

        Wire source: the Get job answer (:meth:`get_request`), as for :meth:`parse_job`.

        :param body: the decoded answer.
        :returns: the job, at least as complete as listed above.
        :raises Exception: any of :data:`MALFORMED_ERRORS` on an answer of another shape."""
        return self.parse_job(body)

    def read_poll(self, raw: bytes | str) -> TrainingJob:
        """:meth:`parse_poll` of a Get job answer's raw body. A dialect whose poll view is one wire
        model overrides it to validate the bytes directly (pydantic's ``model_validate_json``:
        no intermediate dicts, the cheapest read per poll).

        :param raw: the Get job answer's body as received (``bytes``, or ``str`` from the sync hook).
        :returns: the job, as :meth:`parse_poll` reads it.
        :raises ValueError: the body is not JSON or not a job (pydantic's ``ValidationError``); or
            any other of :data:`MALFORMED_ERRORS` a hand-written reading raises."""
        return self.parse_poll(json.loads(raw))

    @abstractmethod
    def parse_cancel(self, job_id: str, body: Any) -> CancelResult:
        """What the cancel call's answer (to :meth:`cancel_request`) says was done.

        Wire source: TensorOne's cancel answer (``cancellationDetails``, ``costSummary``),
        Together's truncated fine-tune object, ModelArts' job object (``Terminating``); SageMaker
        ``StopTrainingJob`` and PAI ``StopTrainingJob`` answer next to nothing: the job is
        ``stopping``.

        :param job_id: the job cancelled (for answers that do not name it).
        :param body: the decoded answer (``None`` when empty).
        :returns: the result; the shared code completes it from the job once it stopped.
        :raises Exception: any of :data:`MALFORMED_ERRORS` on an answer of another shape.
        """

    def parse_checkpoints(self, body: Any) -> list[Checkpoint]:
        """The checkpoints of a checkpoints answer (to :meth:`checkpoints_request`), oldest first.

        Wire source: TensorOne ``GET /v2/training/jobs/{jobId}/checkpoints``, Together
        ``GET /v1/fine-tunes/{id}/checkpoints``.

        :param body: the decoded answer.
        :returns: the checkpoints; ``[]`` by default (no checkpoints endpoint).
        :raises Exception: any of :data:`MALFORMED_ERRORS` on an answer of another shape.
        """
        return []

    #: dotted path of a job's id in a row of the list answer (names a row :meth:`parse_list` leaves out)
    list_row_id: ClassVar[str] = "id"

    def parse_list(self, body: Any) -> list[TrainingJob]:
        """The jobs of a list answer (to :meth:`list_request` or :meth:`tagged_job_request`), with
        their tags; a row that does not read as a job is left out and logged (:meth:`listed_jobs`).

        Wire source: TensorOne's and Together's job lists, SageMaker ``Search`` results, PAI
        ``ListTrainingJobs``, ModelArts' training job search.

        :param body: the decoded answer.
        :returns: the jobs it lists, in the answer's order.
        :raises ValueError: the answer is not a list of jobs at all (any of :data:`MALFORMED_ERRORS`).
        :raises NotImplementedError: the platform cannot list jobs (the default)."""
        raise NotImplementedError(f"{self.name} cannot list jobs")

    def listed_jobs(
        self, rows: Any, parse: Callable[[Any], TrainingJob] | None = None, quiet: bool = False
    ) -> list[TrainingJob]:
        """``rows`` of a list answer read by ``parse`` (:meth:`parse_job` by default), keeping every
        row it can read (:func:`readable_rows`; ``quiet``: a row left out is logged at debug level).
        :raises ValueError: ``rows`` is not a list."""
        level = logging.DEBUG if quiet else logging.WARNING
        return readable_rows(self.name, rows, parse or self.parse_job, self.list_row_id, level)

    def parse_events(self, body: Any) -> list[JobEvent]:
        """The events of an events answer (to :meth:`events_request`), in platform order (oldest
        first), each ``level`` normalized to ``info``, ``warning`` or ``error`` and ``type`` as the
        platform names it; :meth:`decisive_event` picks the failure reason among them.

        Wire source: Together ``GET /v1/fine-tunes/{id}/events``, PAI ``ListTrainingJobEvents``,
        ModelArts' job events.

        :param body: the decoded answer.
        :returns: the events; ``[]`` by default (no events endpoint).
        :raises Exception: any of :data:`MALFORMED_ERRORS` on an answer of another shape.
        """
        return []

    def parse_metrics(self, body: Any) -> list[MetricPoint]:
        """The metric history of a metrics answer (to :meth:`metrics_request`), oldest first, in
        the provider's metric names (``loss``, ``validation_loss``, ``accuracy``...; see
        :class:`~airflow_training_provider.models.MetricPoint`).

        Wire source: Together ``GET /v1/fine-tunes/{id}/metrics``, PAI ``ListTrainingJobMetrics``.

        :param body: the decoded answer.
        :returns: the points; ``[]`` by default (no metrics endpoint).
        :raises Exception: any of :data:`MALFORMED_ERRORS` on an answer of another shape.
        """
        return []

    def decisive_event(self, events: list[JobEvent]) -> JobEvent | None:
        """The event that explains a failed or platform-cancelled job: by default the last one
        with level ``error`` (levels are normalized by :meth:`parse_events`). Platforms override
        this with their own rules."""
        errors = [e for e in events if e.level.lower() == "error"]
        return errors[-1] if errors else None

    def error_fields(self, body: Any) -> tuple[str | None, str | None, str | None]:
        """``(code, message, request_id)`` from an error body; override per platform."""
        return None, None, None

    def classify_error(
        self, status: int, headers: Mapping[str, str], body: Any, text: str = ""
    ) -> TrainingPlatformError:
        """The error a non-2xx answer means, by kind: transient (retry with backoff), auth, not
        found, state conflict, or a definite refusal (base class).

        The default decides by HTTP status: 408/425/429/5xx are transient (429 and 503 prove the
        request was not processed), 401/403 auth, 404 not found, 409 conflict. Platforms whose
        errors do not follow HTTP semantics (AWS answers throttling and "not found" with 400)
        override this.
        """
        code, message, request_id = self.error_fields(body)
        message = message or text[:500] or f"HTTP {status}"
        if status in TRANSIENT_STATUSES:
            return TransientPlatformError(
                message,
                status=status,
                code=code,
                request_id=request_id,
                retry_after=retry_after_seconds(headers),
                sent=status not in NOT_PROCESSED_STATUSES,
            )
        cls = {
            401: PlatformAuthError,
            403: PlatformAuthError,
            404: JobNotFoundError,
            409: JobStateConflictError,
        }.get(status, TrainingPlatformError)
        return cls(message, status=status, code=code, request_id=request_id)

    def map_status(self, raw: str | None) -> JobState:
        """Platform status → :class:`JobState`, ignoring case and surrounding spaces.

        Unknown values count as running (polling goes on rather than crashing or ending the task on
        a status we have not met) and are logged once per dialect and value, not on every poll."""
        value = (raw or "").strip()
        state = self.status_map.get(value) or self._status_by_folded_name.get(value.lower())
        if state is None:
            key = (self.name, value)
            if key not in Dialect._unknown_statuses_logged:
                Dialect._unknown_statuses_logged.add(key)
                log.warning("%s: unknown job status %r, treating it as running", self.name, raw)
            return JobState.RUNNING
        return state

    @classmethod
    def storage_uri(cls, path: str) -> str | None:
        """The URI of a storage location the platform reports as a checkpoint's ``path``, for the
        model asset (:func:`airflow_training_provider.assets.checkpoint_uri`): a URI (``s3://…``,
        ``oss://…``, ``https://…``) as it is, an absolute path as a local file (``file:///…``, the
        local platform's checkpoint files). A platform that reports its object storage as bare paths
        overrides it (ModelArts: ``/bucket/key`` is on OBS). A class method: it needs no connection.

        :param path: the checkpoint's ``path``, not empty.
        :returns: the URI, or ``None`` for a path that names no location (the asset is then
            ``training://<platform>/<job>/<checkpoint>``)."""
        if "://" in path:
            return path
        return f"file://{path}" if path.startswith("/") else None

    def console_url(self, base_url: str, job_id: str) -> str | None:
        """A link a person can open for job ``job_id`` (the platform's console page), set as
        :attr:`TrainingJob.console_url` and shown as the task's extra link.

        :param base_url: the connection's API base URL.
        :returns: the URL, or ``None`` (the default): the platform has no such page."""
        return None

    def effective_cancel(self, cancel: CancelRequest) -> CancelRequest:
        """Drop flags the platform does not have, so the request says what will really happen
        (e.g. no final checkpoint where ``capabilities.final_checkpoint_on_cancel`` is false)."""
        caps = self.capabilities
        return cancel.model_copy(
            update={
                "create_final_checkpoint": cancel.create_final_checkpoint and caps.final_checkpoint_on_cancel,
                "preserve_checkpoints": cancel.preserve_checkpoints or not caps.preserve_checkpoints_flag,
            }
        )
