"""Together AI fine-tuning REST API: descriptor and dialect (``docs/platforms/together.md``).

Endpoints (all under the base URL, default ``https://api.together.ai``; Bearer auth):
create ``POST /v1/fine-tunes`` (not idempotent: every POST is a new job), get ``GET /v1/fine-tunes/{id}``,
cancel ``POST /v1/fine-tunes/{id}/cancel`` (no body: Together has no reason, checkpoint or force
options), events ``GET /v1/fine-tunes/{id}/events``, checkpoints ``GET /v1/fine-tunes/{id}/checkpoints``,
list ``GET /v1/fine-tunes``. Wire models accept unknown fields so a vendor adding fields never
breaks a poll.

Identity tags. Together jobs have no tags or labels. :meth:`TogetherDialect.with_tags` therefore puts
them in the create body under the extension key ``x_airflow_tags`` (:data:`TAGS_KEY`). That key is
*not* part of Together's API: the real service is expected to ignore it and will not echo it, so on
the real platform the jobs come back untagged (re-attach by tags finds nothing and submits anew; the
orphan reaper leaves them alone). The local training platform records the key and echoes it on the
job object, and :meth:`TogetherDialect.parse_job` reads it back from there. ``list_request`` sends
the tags as repeated ``x_airflow_tag`` query parameters (the local platform filters on them; the real
API ignores them), and :meth:`TogetherDialect.parse_list` only returns jobs that carry tags.

Failure reasons. The job object has no error field: the reason is an event.
:meth:`TogetherDialect.decisive_event` picks it, and :meth:`TogetherDialect.parse_job` uses it as the
job's ``message`` when the job object embeds its events.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import Field, PositiveInt, field_validator, model_validator

from airflow_training_provider.errors import (
    InvalidJobSpecError,
    JobStateConflictError,
    TrainingPlatformError,
    TransientPlatformError,
)
from airflow_training_provider.models import (
    METRIC_HISTORY_POINTS,
    CancelRequest,
    CancelResult,
    Checkpoint,
    Cost,
    JobEvent,
    JobState,
    MetricPoint,
    Progress,
    TrainingJob,
)
from airflow_training_provider.platforms.base import ApiRequest, Capabilities, Dialect, StatusBatch, WireModel
from airflow_training_provider.platforms.descriptor import PlatformDescriptor
from airflow_training_provider.portable import Placement, PortableFineTuneSpec, merge_options
from airflow_training_provider.timestamps import InformationalTime, UtcDateTime, parse_timestamp

TAGS_KEY = "x_airflow_tags"
"""Create-body / job-object extension key carrying the identity tags (not a Together field)."""

TAG_QUERY_PARAM = "x_airflow_tag"
"""List query parameter filtering by tag (local platform only; Together ignores it)."""

PATH = "/v1/fine-tunes"
STEP_KEY = "train/global_step"
EPOCH_KEY = "train/epoch"
METRIC_NAMES = {
    "train/loss": "loss",
    "train/learning_rate": "learning_rate",
    "eval/loss": "validation_loss",
    "eval/accuracy": "validation_accuracy",
}
"""Together metric names (``GET /v1/fine-tunes/{id}/metrics``) → the provider's; other names are kept
as they are."""

# -- wire models: responses (docs/platforms/together.md) ----------------------------------------------


_Wire = WireModel


class WireProgress(_Wire):
    estimate_available: bool | None = None
    seconds_remaining: float | None = None


class WireEvent(_Wire):
    """One fine-tune event. ``type`` and ``level`` come in lower or upper case."""

    object: str | None = None
    created_at: InformationalTime = None
    message: str | None = ""
    type: str | None = ""
    level: str | None = ""
    step: int | None = None
    total_steps: int | None = None
    checkpoint_path: str | None = None
    model_path: str | None = None
    wandb_url: str | None = None


class WireJobTruncated(_Wire):
    """``FinetuneResponseTruncated``: the create, cancel and list answers (a subset of the job). Its
    times (``docs/platforms/together.md``, "The job object") are ISO-8601 text, read by
    :func:`~airflow_training_provider.timestamps.parse_timestamp` (nanoseconds, no zone included)."""

    id: str
    status: str
    user_id: str | None = None
    created_at: UtcDateTime | None = None
    updated_at: InformationalTime = None
    started_at: InformationalTime = None  # "start of the current stage"
    model: str | None = None
    model_output_name: str | None = None
    model_output_path: str | None = None
    training_file: str | None = None
    suffix: str | None = None
    n_epochs: int | None = None
    n_checkpoints: int | None = None
    epochs_completed: int | None = None
    total_price: float | None = None
    from_checkpoint: str | None = None
    x_airflow_tags: list[str] = Field(default_factory=list)


class WireJob(WireJobTruncated):
    """``GET /v1/fine-tunes/{id}``."""

    progress: WireProgress | None = None
    queue_depth: int | None = None
    token_count: int | None = None
    param_count: int | None = None
    events: list[WireEvent] | None = None
    wandb_url: str | None = None
    # Not documented; surfaced when present.
    error: str | dict[str, Any] | None = None
    message: str | None = None


class WireCheckpoint(_Wire):
    step: int | None = None
    created_at: InformationalTime = None
    path: str | None = None
    checkpoint_type: str | None = None
    checkpoint: str | None = None


class WireRows(_Wire):
    """``{"data": [...]}`` of the job list, each row read on its own (``Dialect.listed_jobs``)."""

    data: list[Any] = Field(default_factory=list)


class WireDataList(_Wire):
    """``{"data": [...]}``: events, checkpoints and list answers."""

    data: list[dict[str, Any]] = Field(default_factory=list)


class WireMetrics(_Wire):
    """``GET /v1/fine-tunes/{id}/metrics`` answer: rows of metric name → number (Fine-tuning → Get
    metrics); a value that is not a number is dropped rather than failing the read."""

    metrics: list[dict[str, float]] = Field(default_factory=list)

    @field_validator("metrics", mode="before")
    @classmethod
    def _numbers_only(cls, rows: Any) -> Any:
        if not isinstance(rows, list):
            return rows
        return [
            {k: v for k, v in row.items() if isinstance(v, int | float) and not isinstance(v, bool)}
            for row in rows
            if isinstance(row, dict)
        ]


class WireErrorDetail(_Wire):
    message: str | None = None
    type: str | None = None
    code: str | int | None = None
    param: str | None = None


class WireError(_Wire):
    """Error body, tolerant: ``{"error": {"message", "type", "code"}}`` (OpenAI style), a plain
    ``{"message": ...}``, ``{"error": "text"}`` or FastAPI's ``{"detail": ...}`` (the shape is not documented)."""

    error: WireErrorDetail | str | None = None
    message: str | None = None
    detail: Any = None
    request_id: str | None = None


# -- spec validation: the create body ---------------------------------------------------------


class TogetherJobSpec(_Wire):
    """A ``POST /v1/fine-tunes`` body. Unknown fields are allowed (the API grows).

    ``model`` is required unless ``from_checkpoint`` names the checkpoint to continue from (the SDK
    accepts either one).
    """

    training_file: str = Field(min_length=1)
    model: str | None = Field(default=None, min_length=1)
    validation_file: str | None = None
    n_epochs: PositiveInt | None = None
    n_checkpoints: PositiveInt | None = None
    n_evals: int | None = Field(default=None, ge=0)
    learning_rate: float | None = Field(default=None, gt=0)
    batch_size: int | str | None = None  # a positive integer or "max" (checked below)
    max_seq_length: PositiveInt | None = None
    gradient_accumulation_steps: PositiveInt | None = None
    warmup_ratio: float | None = Field(default=None, ge=0, le=1)
    max_grad_norm: float | None = Field(default=None, ge=0)
    weight_decay: float | None = Field(default=None, ge=0)
    lr_scheduler: dict[str, Any] | None = None
    packing: bool | None = None
    suffix: str | None = Field(default=None, max_length=64)
    wandb_key: str | None = None
    wandb_base_url: str | None = None
    wandb_project_name: str | None = None
    wandb_name: str | None = None
    wandb_entity: str | None = None
    random_seed: int | None = None
    early_stopping_enabled: bool | None = None
    training_type: dict[str, Any] | None = None
    training_method: dict[str, Any] | None = None
    from_checkpoint: str | None = Field(default=None, min_length=1)
    early_stopping_patience: int | None = None
    early_stopping_min_delta: float | None = None
    early_stopping_warmup_evals: int | None = None
    multimodal_params: dict[str, Any] | None = None
    from_hf_model: str | None = None
    hf_model_revision: str | None = None
    hf_api_token: str | None = None
    hf_output_repo_name: str | None = None
    train_on_inputs: bool | str | None = None
    x_airflow_tags: list[str] | None = None
    x_local: dict[str, Any] | None = None  # the local training platform's extension (pacing, GPUs, faults)

    @field_validator("batch_size", mode="before")
    @classmethod
    def _batch_size(cls, value: Any) -> Any:
        ok_int = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        if value is None or value == "max" or ok_int:
            return value
        raise ValueError('must be a positive integer or "max"')

    @model_validator(mode="after")
    def _model_or_checkpoint(self) -> TogetherJobSpec:
        if self.model is None and self.from_checkpoint is None:
            raise ValueError("model is required (or from_checkpoint naming a checkpoint to continue from)")
        return self


# -- helpers --------------------------------------------------------------------------------------

_LEVELS = {
    "": "info",
    "info": "info",
    "warning": "warning",
    "error": "error",
    "legacy_info": "info",
    "legacy_iinfo": "info",
    "legacy_iwarning": "warning",
    "legacy_ierror": "error",
}

FAILURE_EVENT_TYPES = frozenset({"job_error", "job_user_error", "billing_limit"})
"""Event types that explain a failure or a platform-initiated cancel by themselves."""

_PLATFORM_CANCEL = re.compile(
    r"w\s*&\s*b|wandb|weights\s*&\s*biases|error|fail|balance|billing|credit|payment|insufficient|limit|quota",
    re.IGNORECASE,
)
_CANCEL_CONFLICT = re.compile(
    r"already\s+(?:been\s+)?(?:completed|cancel+ed|finished|failed|stopped|terminated|in\s+a\s+terminal)"
    r"|cannot\s+be\s+cancel+ed|can\s*not\s+cancel|not\s+cancel+able|is\s+not\s+running",
    re.IGNORECASE,
)
_CONFLICT_CODES = frozenset({"job_not_cancellable", "state_conflict", "conflict"})


def normalize_level(level: str | None) -> str:
    """``info``/``warning``/``error`` from any documented level spelling (``Error``, ``legacy_ierror``, ``""``)."""
    value = (level or "").strip().lower()
    if value in _LEVELS:
        return _LEVELS[value]
    if "err" in value:
        return "error"
    if "warn" in value:
        return "warning"
    return "info"


def decisive_event(events: list[JobEvent]) -> JobEvent | None:
    """The event that explains a failure or a platform-initiated cancel, or ``None``.

    Rule (events in platform order, types already lower-cased):

    1. the **last** event whose level is ``error`` (any spelling) or whose type is ``job_error``,
       ``job_user_error`` or ``billing_limit`` — the cause itself (a W&B login error on
       ``wandb_init``, the billing limit...);
    2. otherwise the last ``cancel_requested`` whose message does not look user-initiated, i.e.
       mentions W&B/WandB, an error or failure, balance/billing/credit/payment, a limit or quota
       (Together's auto-cancel says e.g. "Job cancelled due to error in WandB login/init");
    3. otherwise ``None`` (success, or a cancel somebody asked for).

    Warnings (``warning`` type or level) never decide: they do not end a job.
    """
    for event in reversed(events):
        if normalize_level(event.level) == "error" or event.type.lower() in FAILURE_EVENT_TYPES:
            return event
    for event in reversed(events):
        if event.type.lower() == "cancel_requested" and _PLATFORM_CANCEL.search(event.message or ""):
            return event
    return None


def _event(wire: WireEvent) -> JobEvent:
    raw_type = (wire.type or "").strip()
    return JobEvent(
        type=raw_type.lower() or "unknown",
        message=wire.message or raw_type,
        level=normalize_level(wire.level),
        created_at=wire.created_at,
    )


def _data(body: Any) -> list[dict[str, Any]]:
    """Rows of a ``{"data": [...]}`` answer (a bare list is accepted too)."""
    if isinstance(body, list):
        return [row for row in body if isinstance(row, dict)]
    return WireDataList.model_validate(body or {}).data


class TogetherDialect(Dialect):
    """Together AI fine-tuning jobs. ``user_error`` is the legacy SDK's status."""

    name = "together"
    spec_model = TogetherJobSpec
    secret_fields = ("wandb_key", "hf_api_token")
    capabilities = Capabilities(
        final_checkpoint_on_cancel=False,
        preserve_checkpoints_flag=False,
        events=True,
        list_jobs=True,
        checkpoints_in_job=False,  # the job object has no checkpoint list: ask /checkpoints
        metric_history=True,  # the metrics endpoint, evaluations per epoch
        cost_usd=True,  # total_price
    )
    status_map = {
        "pending": JobState.PENDING,
        "queued": JobState.QUEUED,
        "running": JobState.RUNNING,
        "compressing": JobState.RUNNING,
        "uploading": JobState.RUNNING,
        "cancel_requested": JobState.STOPPING,
        "cancelled": JobState.CANCELLED,
        "error": JobState.FAILED,
        "user_error": JobState.FAILED,
        "completed": JobState.SUCCEEDED,
    }

    # -- spec ---------------------------------------------------------------------------------
    def compile_fine_tune(self, spec: PortableFineTuneSpec, place: Placement) -> dict[str, Any]:
        """A ``POST /v1/fine-tunes`` body: ``model``, ``training_file``, ``validation_file``,
        ``n_epochs``, ``learning_rate``, ``batch_size``, ``n_checkpoints``, ``suffix``
        (``docs/portable-spec.md``, "Fine-tunes")."""
        body: dict[str, Any] = {"model": spec.base_model, "training_file": spec.training_file}
        for field, value in (
            ("validation_file", spec.validation_file),
            ("n_epochs", spec.epochs),
            ("learning_rate", spec.learning_rate),
            ("batch_size", spec.batch_size),
            ("n_checkpoints", spec.checkpoints),
            ("suffix", spec.suffix),
        ):
            if value is not None:
                body[field] = value
        merge_options(body, dict(spec.options.get(self.name) or {}), self.name)
        return body

    def with_wandb(self, spec: dict[str, Any], api_key: str, base_url: str | None) -> dict[str, Any]:
        """Copy of ``spec`` with ``wandb_key`` (and ``wandb_base_url``), the create fields of the
        fine-tuning API (``POST /v1/fine-tunes``).

        :raises InvalidJobSpecError: the spec sets ``wandb_key`` itself."""
        if spec.get("wandb_key") is not None:
            raise InvalidJobSpecError("wandb_key", "set here and by wandb_conn_id: keep one", self.name)
        return {**spec, "wandb_key": api_key, **({"wandb_base_url": base_url} if base_url else {})}

    def with_tags(self, spec: dict[str, Any], tags: list[str]) -> dict[str, Any]:
        """Copy of ``spec`` with ``tags`` under :data:`TAGS_KEY` (an extension key, see the module doc)."""
        own = [t for t in spec.get(TAGS_KEY) or [] if t not in tags]
        return {**spec, TAGS_KEY: own + list(tags)}

    @staticmethod
    def checkpoint_ref(job_id: str, checkpoint: Checkpoint | int | None) -> str:
        """The ``from_checkpoint`` value continuing from ``checkpoint`` of ``job_id``: ``"{job_id}:{step}"``,
        or ``job_id`` alone (the job's latest checkpoint) when the step is unknown."""
        step = checkpoint.step if isinstance(checkpoint, Checkpoint) else checkpoint
        return job_id if step is None else f"{job_id}:{step}"

    def resume_spec(self, spec: dict[str, Any], job_id: str, checkpoint: Checkpoint) -> dict[str, Any]:
        """``spec`` with ``from_checkpoint`` = ``"{job_id}:{step}"``. Together starts a *new* fine-tune
        from the checkpoint's weights and trains ``n_epochs`` on top of it (its checkpoints carry a
        step, not an epoch, so the remaining epochs cannot be worked out here)."""
        return {**spec, "from_checkpoint": self.checkpoint_ref(job_id, checkpoint)}

    # -- requests -----------------------------------------------------------------------------
    def training_data(self, spec: dict[str, Any]) -> list[str]:
        """The training and validation files, as ``together://files/<id>``."""
        return [f"together://files/{spec[k]}" for k in ("training_file", "validation_file") if spec.get(k)]

    def create_request(self, spec: dict[str, Any]) -> ApiRequest:
        return ApiRequest("POST", PATH, body=spec, idempotent=False)

    def get_request(self, job_id: str) -> ApiRequest:
        return ApiRequest("GET", f"{PATH}/{job_id}")

    def cancel_request(self, job_id: str, cancel: CancelRequest) -> ApiRequest:
        """No body: Together's cancel takes no reason, checkpoint or force options."""
        return ApiRequest("POST", f"{PATH}/{job_id}/cancel")

    def checkpoints_request(self, job_id: str) -> ApiRequest:
        return ApiRequest("GET", f"{PATH}/{job_id}/checkpoints")

    def events_request(self, job_id: str) -> ApiRequest:
        return ApiRequest("GET", f"{PATH}/{job_id}/events")

    def list_request(self, tags: list[str], created_after: datetime | None = None) -> ApiRequest:
        """``GET /v1/fine-tunes``: every job of the account, whatever its age (``created_after`` is
        not needed)."""
        return ApiRequest("GET", PATH, params=[(TAG_QUERY_PARAM, t) for t in tags] or None)

    #: the list takes no job ids: one request lists every job of the account
    batch_size = 10_000
    #: a list row is ``FinetuneResponseTruncated``: no events, no error: it only says whether a job changed
    batch_rows_complete = False

    def status_batch_request(
        self, job_ids: list[str], page: str | None = None, created_after: datetime | None = None
    ) -> ApiRequest:
        """``GET /v1/fine-tunes``: every job of the account in one answer (Together documents no
        paging nor filter; the SDK's ``fine_tuning.list()``); ``job_ids`` are found in it."""
        return ApiRequest("GET", PATH)

    def parse_status_batch(self, body: Any, page: str | None = None) -> StatusBatch:
        """``{"data": [job…]}`` (truncated jobs, tagged or not); one page, the only one."""
        rows = body if isinstance(body, list) else WireRows.model_validate(body or {}).data
        return StatusBatch(self.listed_jobs(rows, quiet=True))

    def metrics_request(self, job_id: str) -> ApiRequest:
        """``GET /v1/fine-tunes/{id}/metrics?resolution=`` (Fine-tuning → Get metrics): training rows
        sampled down to :data:`METRIC_HISTORY_POINTS`, every evaluation row."""
        return ApiRequest("GET", f"{PATH}/{job_id}/metrics", params={"resolution": METRIC_HISTORY_POINTS})

    def console_url(self, base_url: str, job_id: str) -> str:
        return f"{base_url.rstrip('/')}{PATH}/{job_id}"

    # -- responses ----------------------------------------------------------------------------
    def parse_created(self, body: Any) -> TrainingJob:
        return self.parse_job(body)

    def parse_job(self, body: Any) -> TrainingJob:
        wire = WireJob.model_validate(body)
        state = self.map_status(wire.status)
        events = [_event(e) for e in wire.events or []]
        progress = wire.progress or WireProgress()
        percent = None
        if state is JobState.SUCCEEDED:
            percent = 100.0
        elif wire.n_epochs and wire.epochs_completed is not None:
            percent = round(100.0 * min(wire.epochs_completed, wire.n_epochs) / wire.n_epochs, 1)
        return TrainingJob(
            id=wire.id,
            platform=self.name,
            state=state,
            raw_status=wire.status,
            name=wire.model_output_name or wire.suffix,
            message=self._message(wire, state, events),
            progress=Progress(
                epoch=wire.epochs_completed,
                total_epochs=wire.n_epochs,
                percent=percent,
                eta_seconds=progress.seconds_remaining if progress.estimate_available else None,
            ),
            cost=Cost(total_usd=wire.total_price),
            tags=wire.x_airflow_tags,
            created_at=wire.created_at,
            started_at=wire.started_at,
            updated_at=wire.updated_at,
        )

    @staticmethod
    def _message(wire: WireJob, state: JobState, events: list[JobEvent]) -> str | None:
        if isinstance(wire.error, dict) and wire.error.get("message"):
            return str(wire.error["message"])
        if isinstance(wire.error, str) and wire.error:
            return wire.error
        if wire.message:
            return wire.message
        if state not in (JobState.FAILED, JobState.CANCELLED, JobState.STOPPING):
            return None
        decisive = decisive_event(events)
        if decisive is not None:
            return decisive.message
        cancels = [e for e in events if e.type == "cancel_requested"]
        return cancels[-1].message if cancels else None

    def parse_cancel(self, job_id: str, body: Any) -> CancelResult:
        """The truncated job the cancel returns. ``completed``/``error``/``user_error`` there means the
        job had already ended (a cancel cannot produce them)."""
        wire = WireJobTruncated.model_validate(body)
        return CancelResult(
            job_id=wire.id,
            state=self.map_status(wire.status),
            already_terminal=wire.status in ("completed", "error", "user_error"),
            cost=Cost(total_usd=wire.total_price),
        )

    def parse_events(self, body: Any) -> list[JobEvent]:
        """Events in the order the platform gave them; ``type`` lower-cased, ``level`` normalized."""
        return [_event(WireEvent.model_validate(row)) for row in _data(body)]

    def decisive_event(self, events: list[JobEvent]) -> JobEvent | None:
        """See :func:`decisive_event`."""
        return decisive_event(events)

    def parse_metrics(self, body: Any) -> list[MetricPoint]:
        """``{"metrics": [{"train/global_step": 7, "train/loss": 0.5, ...}, ...]}`` → points, oldest first.
        A row with an ``eval/...`` value is an evaluation; rows without a global step are dropped."""
        points = []
        for row in WireMetrics.model_validate(body or {}).metrics:
            step = row.get(STEP_KEY)
            if step is None:
                continue
            values = {
                METRIC_NAMES.get(name, name): value
                for name, value in row.items()
                if name not in (STEP_KEY, EPOCH_KEY)
            }
            kind = "eval" if any(name.startswith("eval/") for name in row) else "train"
            points.append(MetricPoint(step=int(step), kind=kind, epoch=row.get(EPOCH_KEY), values=values))
        return points

    def parse_checkpoints(self, body: Any) -> list[Checkpoint]:
        """Checkpoints oldest (lowest step) first. ``id`` is the step (what ``from_checkpoint`` names);
        ``kind`` is ``final`` for a ``Final...`` checkpoint type, else ``intermediate``."""
        out = []
        for row in _data(body):
            c = WireCheckpoint.model_validate(row)
            kind = (c.checkpoint_type or "").strip().lower()
            out.append(
                Checkpoint(
                    id=str(c.step) if c.step is not None else (c.path or c.checkpoint_type or "unknown"),
                    step=c.step,
                    kind="final" if kind.startswith("final") else ("intermediate" if kind else None),
                    path=c.path,
                    created_at=c.created_at,
                )
            )
        return sorted(out, key=lambda c: (c.step is None, c.step or 0))

    def parse_list(self, body: Any) -> list[TrainingJob]:
        """Tagged jobs only, oldest first. Together lists every job of the account and cannot filter by
        tag; a job without identity tags was not submitted by this provider (see the module doc). A
        row that does not read as a job is left out (logged)."""
        rows = body if isinstance(body, list) else WireRows.model_validate(body or {}).data
        jobs = self.listed_jobs(rows)
        jobs = [j for j in jobs if j.tags]
        if all(j.created_at is not None for j in jobs):  # aware UTC, whatever form each row sent
            jobs.sort(key=lambda j: parse_timestamp(j.created_at))
        return jobs

    def error_fields(self, body: Any) -> tuple[str | None, str | None, str | None]:
        if not isinstance(body, dict):
            return None, None, None
        wire = WireError.model_validate(body)
        code = message = None
        if isinstance(wire.error, WireErrorDetail):
            code = wire.error.code if wire.error.code is not None else wire.error.type
            message = wire.error.message
        elif isinstance(wire.error, str):
            code = wire.error
        message = message or wire.message
        if message is None and isinstance(wire.detail, str):
            message = wire.detail
        return (str(code) if code is not None else None), message, wire.request_id

    def classify_error(
        self, status: int, headers: Mapping[str, str], body: Any, text: str = ""
    ) -> TrainingPlatformError:
        """As the base class; additionally a 400/422 saying the job cannot be cancelled (already ended)
        is a :class:`JobStateConflictError`, so callers resolve it the way they resolve a 409, and a
        throttle without ``Retry-After`` waits what ``x-ratelimit-reset`` suggests (seconds)."""
        err = super().classify_error(status, headers, body, text)
        if isinstance(err, TransientPlatformError) and err.retry_after is None:
            err.retry_after = _ratelimit_reset(headers)
        if status in (400, 422) and (
            (err.code or "").lower() in _CONFLICT_CODES or _CANCEL_CONFLICT.search(err.message or "")
        ):
            return JobStateConflictError(err.message, status=status, code=err.code, request_id=err.request_id)
        return err


def _ratelimit_reset(headers: Mapping[str, str]) -> float | None:
    """Together's ``x-ratelimit-reset``: the suggested wait before retrying, in seconds
    (docs.together.ai/docs/rate-limits); ``None`` when absent or unreadable."""
    raw = (
        headers.get("x-ratelimit-reset")
        or headers.get("X-RateLimit-Reset")
        or headers.get("X-Ratelimit-Reset")
    )
    try:
        seconds = float(raw) if raw else math.nan
    except ValueError:
        return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


PLATFORM = PlatformDescriptor(
    conn_type="together",
    display_name="Together AI",
    class_name="Together",
    dialect=TogetherDialect,
    default_base_url="https://api.together.ai",
    docs_url="https://docs.together.ai/docs/fine-tuning-overview",
    placeholders={"api_key": "TOGETHER_API_KEY"},
)
