"""TensorOne v2 training REST API: descriptor and dialect (``docs/platforms/tensorone.md``).

Endpoints: create ``POST /v2/training/jobs``, get ``GET /v2/training/jobs/{id}``, cancel
``POST /v2/training/jobs/{id}/cancel``, checkpoints ``GET /v2/training/jobs/{id}/checkpoints``,
list ``GET /v2/training/jobs?tag=…`` (list is [UNCONFIRMED] upstream; the local platform is the
contract). Bearer auth. The docs show two create shapes; both validate here. Wire models accept
unknown fields so a vendor adding fields never breaks a poll.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from functools import lru_cache
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, PositiveInt, ValidationError

from airflow_training_provider.budget import ApiRates
from airflow_training_provider.errors import InvalidJobSpecError
from airflow_training_provider.models import (
    CancelRequest,
    CancelResult,
    Checkpoint,
    Cost,
    JobState,
    TrainingJob,
)
from airflow_training_provider.platforms.base import ApiRequest, Capabilities, Dialect, StatusBatch, WireModel
from airflow_training_provider.platforms.descriptor import PlatformDescriptor
from airflow_training_provider.portable import Placement, PortableFineTuneSpec, merge_options, refuse
from airflow_training_provider.timestamps import InformationalTime, UtcDateTime

#: statuses of a job that has not ended (the coalesced status read's ``status`` filter)
WAITING_STATUSES = ("queued", "initializing", "running", "paused", "cancelling")
#: jobs a page of the coalesced status read (the list's ``limit`` is 1–100 on the local platform)
STATUS_PAGE_SIZE = 100

# -- wire models: responses (docs/platforms/tensorone.md: create, get, cancel) ---------------------------------------------------


_Wire = WireModel


class WireProgress(_Wire):
    currentEpoch: int | None = None
    totalEpochs: int | None = None
    currentStep: int | None = None
    totalSteps: int | None = None
    percentComplete: float | None = None
    estimatedTimeRemaining: str | float | None = None


class WireCheckpoint(_Wire):
    checkpointId: str
    name: str | None = None
    epoch: int | None = None
    step: int | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    size: str | int | None = None
    type: str | None = None
    downloadUrl: str | None = None
    path: str | None = None  # local-platform extension: the checkpoint file
    createdAt: InformationalTime = None


class WireCosts(_Wire):
    currentCost: float | None = None
    estimatedTotalCost: float | None = None
    costBreakdown: dict[str, float | None] = Field(default_factory=dict)


class WireTimestamps(_Wire):
    """``timestamps{createdAt, startedAt, lastUpdated}`` (``docs/platforms/tensorone.md``, "The job
    object"): ISO-8601 text, as every time of this API; read by
    :func:`~airflow_training_provider.timestamps.parse_timestamp`."""

    createdAt: UtcDateTime | None = None
    startedAt: InformationalTime = None
    lastUpdated: InformationalTime = None


class WireJob(_Wire):
    """``GET /v2/training/jobs/{jobId}``; also the create response, which is a subset."""

    jobId: str
    name: str | None = None
    status: str
    progress: WireProgress | None = None
    metrics: dict[str, Any] | None = None
    checkpoints: list[WireCheckpoint] = Field(default_factory=list)
    costs: WireCosts | None = None
    estimatedCost: dict[str, Any] | None = None
    timestamps: WireTimestamps | None = None
    createdAt: UtcDateTime | None = None
    tags: list[str] = Field(default_factory=list)
    # No failure field is documented; surface these when present.
    error: str | dict[str, Any] | None = None
    message: str | None = None
    consoleUrl: str | None = None


class _PollProgress(WireProgress):
    model_config = ConfigDict(extra="ignore")


class _PollCosts(WireCosts):
    model_config = ConfigDict(extra="ignore")


class WirePoll(_Wire):
    """What a poll reads of a Get job answer (:meth:`TensorOneDialect.parse_poll`). Fields it does
    not name are skipped, not kept (checkpoints, timestamps: read once, by :class:`WireJob`, when
    the job ends): a poll builds no objects it will not use."""

    model_config = ConfigDict(extra="ignore")

    jobId: str
    status: str
    progress: _PollProgress | None = None
    metrics: dict[str, Any] | None = None
    costs: _PollCosts | None = None
    estimatedCost: dict[str, Any] | None = None
    error: str | dict[str, Any] | None = None
    message: str | None = None
    consoleUrl: str | None = None


_NO_PROGRESS = WireProgress()
_NO_COSTS = WireCosts()


class WireCancellationDetails(_Wire):
    cancelledAt: InformationalTime = None
    reason: str | None = None
    finalCheckpointCreated: bool | None = None
    finalCheckpointId: str | None = None
    resourcesReleased: bool | None = None


class WireCostSummary(_Wire):
    totalCost: float | None = None
    costBreakdown: dict[str, float | None] = Field(default_factory=dict)
    estimatedSavings: float | None = None


class WireCancelResponse(_Wire):
    """``POST /v2/training/jobs/{jobId}/cancel`` answer."""

    jobId: str
    status: str
    cancellationDetails: WireCancellationDetails | None = None
    finalMetrics: dict[str, Any] = Field(default_factory=dict)
    costSummary: WireCostSummary | None = None


class WireCheckpointList(_Wire):
    checkpoints: list[WireCheckpoint] = Field(default_factory=list)
    totalCount: int | None = None


class WireJobList(_Wire):
    jobs: list[Any] = Field(default_factory=list)  # each row read on its own (Dialect.listed_jobs)
    totalCount: int | None = None


class WireErrorEnvelope(_Wire):
    """Error envelope of every endpoint."""

    error: str | None = None
    message: str | None = None
    code: int | None = None
    details: dict[str, Any] | None = None
    request_id: str | None = None


# -- spec validation: both documented create shapes ----------------------------------------


class _TrainingParams(_Wire):
    """``config.training``: the documented keys, and the local training platform's."""

    epochs: PositiveInt | None = None
    batch_size: PositiveInt | None = None
    learning_rate: float | None = None
    optimizer: str | None = None
    # the local training platform's trainer
    hidden_units: PositiveInt | None = None
    seconds_per_epoch: float | None = Field(default=None, ge=0)
    seed: int | None = Field(default=None, ge=0)
    checkpoint_seconds: float | None = Field(default=None, ge=0)


class _Config(_Wire):
    """``config`` is free-form by the docs; only ``training`` is checked field by field."""

    free_form: ClassVar[bool] = True
    baseModel: str | None = None
    strategy: str | None = None
    training: _TrainingParams | None = None


class _Hyperparameters(_Wire):
    learningRate: float | None = None
    batchSize: PositiveInt | None = None
    epochs: PositiveInt | None = None
    optimizer: str | None = None
    # the local training platform's trainer
    hiddenUnits: PositiveInt | None = None
    secondsPerEpoch: float | None = Field(default=None, ge=0)
    seed: int | None = Field(default=None, ge=0)
    checkpointSeconds: float | None = Field(default=None, ge=0)


class _Infrastructure(_Wire):
    gpuType: str | None = None
    gpuCount: PositiveInt | None = None
    memory: str | None = None
    storage: str | None = None


class _DatasetConfig(_Wire):
    datasetId: str | None = None
    datasetUrl: str | None = None
    format: str | None = None


class _ModelConfig(_Wire):
    modelType: str | None = None
    baseModel: str | None = None
    customCode: str | None = None


class TensorOneJobSpec(_Wire):
    """A TensorOne create-job body, either the prose shape or the OpenAPI shape."""

    name: str = Field(min_length=1, max_length=100)
    description: str | None = None
    modelType: Literal["llm", "vision", "multimodal", "custom"] | None = None
    framework: str | None = None
    datasetId: str | None = None
    datasetConfig: _DatasetConfig | None = None
    modelConfig: _ModelConfig | None = None
    config: _Config | None = None
    hyperparameters: _Hyperparameters | None = None
    infrastructure: _Infrastructure | None = None
    gpuType: Literal["a100", "h100", "v100", "rtx4090"] | None = None
    maxWorkers: int | None = Field(default=None, ge=1, le=32)
    priority: Literal["high", "normal", "low"] | None = None
    tags: list[str] = Field(default_factory=list)


# -- the dialect ---------------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([hms])")
_UNIT_SECONDS = {"h": 3600, "m": 60, "s": 1}


def parse_duration(value: str | float | None) -> float | None:
    """``"1h 10m"`` / ``"40m"`` / ``"12s"`` / a number of seconds → seconds; ``None`` if unreadable."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    return _parse_duration_text(value)


@lru_cache(maxsize=1024)
def _parse_duration_text(value: str) -> float | None:
    parts = _DURATION.findall(value)
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts) if parts else None


_METRIC_NAMES = {
    "loss": "loss",
    "accuracy": "accuracy",
    "validationLoss": "validation_loss",
    "validationAccuracy": "validation_accuracy",
    "learningRate": "learning_rate",
}


def _numeric_metrics(raw: dict[str, Any] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in (raw or {}).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[_METRIC_NAMES.get(key, key)] = float(value)
    return out


class TensorOneDialect(Dialect):
    """TensorOne v2 training jobs. ``paused`` is non-terminal (running)."""

    name = "tensorone"
    spec_model = TensorOneJobSpec
    capabilities = Capabilities(
        final_checkpoint_on_cancel=True,
        preserve_checkpoints_flag=True,
        events=False,
        list_jobs=True,
        metric_history=True,  # the metrics saved with each checkpoint
        cost_usd=True,  # costs.currentCost
    )
    list_row_id = "jobId"
    status_map = {
        "queued": JobState.QUEUED,
        "initializing": JobState.STARTING,
        "running": JobState.RUNNING,
        "paused": JobState.RUNNING,
        "cancelling": JobState.STOPPING,
        "completed": JobState.SUCCEEDED,
        "failed": JobState.FAILED,
        "cancelled": JobState.CANCELLED,
    }

    def compile_fine_tune(self, spec: PortableFineTuneSpec, place: Placement) -> dict[str, Any]:
        """A create body in the documented prose shape: ``name`` (the suffix, else
        ``<base model's last part>-fine-tune``), ``modelType: llm``, ``datasetId``,
        ``config.baseModel``, ``config.training.{epochs, learning_rate, batch_size}``
        (``docs/portable-spec.md``, "Fine-tunes").

        :raises PortableSpecError: ``validation_file`` or ``checkpoints``, which TensorOne's create
            has no field for."""
        if spec.validation_file is not None:
            raise refuse("validation_file", "TensorOne", "its create takes one dataset (datasetId)")
        if spec.checkpoints is not None:
            raise refuse(
                "checkpoints", "TensorOne", "it saves checkpoints on its own; their number is not set"
            )
        training = {
            k: v
            for k, v in (
                ("epochs", spec.epochs),
                ("learning_rate", spec.learning_rate),
                ("batch_size", spec.batch_size),
            )
            if v is not None
        }
        name = spec.suffix or f"{spec.base_model.rstrip('/').rsplit('/', 1)[-1]}-fine-tune"
        body: dict[str, Any] = {
            "name": name[:100],
            "modelType": "llm",
            "datasetId": spec.training_file,
            "config": {"baseModel": spec.base_model, **({"training": training} if training else {})},
        }
        merge_options(body, dict(spec.options.get(self.name) or {}), self.name)
        return body

    def validate_spec(self, spec: dict[str, Any], allow_unknown_fields: bool = False) -> dict[str, Any]:
        spec = super().validate_spec(spec, allow_unknown_fields)
        dataset_config = spec.get("datasetConfig") or {}
        if not (spec.get("datasetId") or dataset_config.get("datasetId") or dataset_config.get("datasetUrl")):
            raise InvalidJobSpecError(
                "datasetId", "a dataset id is required (datasetId or datasetConfig.datasetId)", self.name
            )
        return spec

    def training_data(self, spec: dict[str, Any]) -> list[str]:
        """``datasetConfig.datasetUrl``, else the dataset id as ``tensorone://datasets/<id>``."""
        config = spec.get("datasetConfig") or {}
        if url := config.get("datasetUrl"):
            return [url]
        dataset = spec.get("datasetId") or config.get("datasetId")
        return [f"tensorone://datasets/{dataset}"] if dataset else []

    def with_tags(self, spec: dict[str, Any], tags: list[str]) -> dict[str, Any]:
        own = [t for t in spec.get("tags", []) if t not in tags]
        return {**spec, "tags": own + list(tags)}

    def resume_spec(self, spec: dict[str, Any], job_id: str, checkpoint: Checkpoint) -> dict[str, Any]:
        # No resume field is documented; the local platform reads config.resumeFromCheckpoint.
        config = {**(spec.get("config") or {}), "resumeFromCheckpoint": f"{job_id}/{checkpoint.id}"}
        return {**spec, "config": config}

    def create_request(self, spec: dict[str, Any]) -> ApiRequest:
        return ApiRequest("POST", "/v2/training/jobs", body=spec, idempotent=False)

    def get_request(self, job_id: str) -> ApiRequest:
        return ApiRequest("GET", f"/v2/training/jobs/{job_id}", params={"includeMetrics": "true"})

    def cancel_request(self, job_id: str, cancel: CancelRequest) -> ApiRequest:
        body = {
            "reason": cancel.reason,
            "preserveCheckpoints": cancel.preserve_checkpoints,
            "createFinalCheckpoint": cancel.create_final_checkpoint,
            "force": cancel.force,
        }
        return ApiRequest("POST", f"/v2/training/jobs/{job_id}/cancel", body=body)

    def checkpoints_request(self, job_id: str) -> ApiRequest:
        return ApiRequest(
            "GET",
            f"/v2/training/jobs/{job_id}/checkpoints",
            params={"sortBy": "createdAt", "sortOrder": "asc"},
        )

    def list_request(self, tags: list[str], created_after: datetime | None = None) -> ApiRequest:
        """``GET /v2/training/jobs?tag=…&limit=100``: every job, whatever its age (``created_after``
        is not needed)."""
        return ApiRequest("GET", "/v2/training/jobs", params=[("tag", t) for t in tags] + [("limit", 100)])

    def probe_request(self) -> ApiRequest:
        """``GET /v2/training/jobs?limit=1`` (List training jobs): one row at most."""
        return ApiRequest("GET", "/v2/training/jobs", params=[("limit", 1)])

    #: the list takes no job ids: one request (and its pages) lists every waiting job
    batch_size = 10_000
    #: with ``includeMetrics=true`` a list row is the job object the Get with it answers
    batch_rows_complete = True

    def status_batch_request(
        self, job_ids: list[str], page: str | None = None, created_after: datetime | None = None
    ) -> ApiRequest:
        """``GET /v2/training/jobs?status=<not ended>&includeMetrics=true&limit=100&offset=``: the jobs
        that have not ended (a job that ended drops out and is read on its own, as its final view
        is anyway), newest first, 100 a page, ``offset`` = ``page`` (0 when ``None``); ``job_ids``
        are found in the answer. TensorOne documents no job list (only ``GET /v2/training/models``
        is, with ``limit`` 1–100): this is the list the local platform serves *(not documented)*."""
        params: list[tuple[str, Any]] = [
            ("status", ",".join(WAITING_STATUSES)),
            ("includeMetrics", "true"),
            ("limit", STATUS_PAGE_SIZE),
            ("offset", int(page or 0)),
        ]
        return ApiRequest("GET", "/v2/training/jobs", params=params)

    def parse_status_batch(self, body: Any, page: str | None = None) -> StatusBatch:
        """``{"jobs": [job…], "totalCount"}``; the next ``offset`` while ``totalCount`` says more
        follow (without it: while the page is full)."""
        wire = WireJobList.model_validate(body or {})
        offset = int(page or 0)
        end = offset + STATUS_PAGE_SIZE
        more = end < wire.totalCount if wire.totalCount is not None else len(wire.jobs) >= STATUS_PAGE_SIZE
        return StatusBatch(self.listed_jobs(wire.jobs, quiet=True), str(end) if more else None)

    def console_url(self, base_url: str, job_id: str) -> str:
        return f"{base_url.rstrip('/')}/v2/training/jobs/{job_id}"

    # -- responses ---------------------------------------------------------------------------
    def parse_created(self, body: Any) -> TrainingJob:
        return self.parse_job(body)

    def parse_job(self, body: Any) -> TrainingJob:
        wire = WireJob.model_validate(body)
        stamps = wire.timestamps or WireTimestamps()
        return self._job(wire).model_copy(
            update={
                "name": wire.name,
                "checkpoints": [self._checkpoint(c) for c in wire.checkpoints],
                "tags": wire.tags,
                "created_at": stamps.createdAt or wire.createdAt,
                "started_at": stamps.startedAt,
                "updated_at": stamps.lastUpdated,
            }
        )

    def parse_poll(self, body: Any) -> TrainingJob:
        """Get job, reading only what a poll needs (no checkpoints or timestamps)."""
        return self._job(WirePoll.model_validate(body))

    def read_poll(self, raw: bytes | str) -> TrainingJob:
        """:meth:`parse_poll` validating the raw body directly (no intermediate dicts); a body
        pydantic's JSON parser refuses but Python's reads (a lone surrogate escape, ``"\\udcff"``,
        from text that was not UTF-8; the bare ``NaN`` token) is read through :mod:`json`."""
        try:
            return self._job(WirePoll.model_validate_json(raw))
        except ValidationError as exc:
            if not any(error["type"] == "json_invalid" for error in exc.errors()):
                raise
            return self._job(WirePoll.model_validate(json.loads(raw)))

    def _job(self, wire: WireJob | WirePoll) -> TrainingJob:
        progress = wire.progress or _NO_PROGRESS
        costs = wire.costs or _NO_COSTS
        estimated = (wire.estimatedCost or {}).get("totalCost")
        message = wire.message
        if isinstance(wire.error, dict):
            message = message or wire.error.get("message")
        elif wire.error and not message:
            message = wire.error
        # one validation of nested dicts: this runs on every poll of every waiting job
        return TrainingJob.model_validate(
            {
                "id": wire.jobId,
                "platform": self.name,
                "state": self.map_status(wire.status),
                "raw_status": wire.status,
                "message": message,
                "progress": {
                    "epoch": progress.currentEpoch,
                    "total_epochs": progress.totalEpochs,
                    "step": progress.currentStep,
                    "total_steps": progress.totalSteps,
                    "percent": progress.percentComplete,
                    "eta_seconds": parse_duration(progress.estimatedTimeRemaining),
                },
                "metrics": _numeric_metrics(wire.metrics),
                "cost": {
                    "total_usd": costs.currentCost,
                    "estimated_total_usd": estimated
                    if costs.estimatedTotalCost is None
                    else costs.estimatedTotalCost,
                    "breakdown_usd": {k: v for k, v in costs.costBreakdown.items() if v is not None},
                },
                "console_url": wire.consoleUrl,
            }
        )

    @staticmethod
    def _checkpoint(c: WireCheckpoint) -> Checkpoint:
        return Checkpoint(
            id=c.checkpointId,
            epoch=c.epoch,
            step=c.step,
            kind=c.type,
            path=c.path or c.downloadUrl,
            metrics=_numeric_metrics(c.metrics),
            created_at=c.createdAt,
        )

    def parse_cancel(self, job_id: str, body: Any) -> CancelResult:
        wire = WireCancelResponse.model_validate(body)
        details = wire.cancellationDetails or WireCancellationDetails()
        summary = wire.costSummary or WireCostSummary()
        return CancelResult(
            job_id=wire.jobId,
            state=self.map_status(wire.status),
            final_checkpoint_id=details.finalCheckpointId
            if details.finalCheckpointCreated is not False
            else None,
            final_metrics=wire.finalMetrics,
            cost=Cost(
                total_usd=summary.totalCost,
                breakdown_usd={k: v for k, v in summary.costBreakdown.items() if v is not None},
            ),
        )

    def parse_checkpoints(self, body: Any) -> list[Checkpoint]:
        return [self._checkpoint(c) for c in WireCheckpointList.model_validate(body).checkpoints]

    def parse_list(self, body: Any) -> list[TrainingJob]:
        """``{"jobs": [job…]}``; a row that does not read as a job is left out (logged)."""
        return self.listed_jobs(WireJobList.model_validate(body).jobs)

    def error_fields(self, body: Any) -> tuple[str | None, str | None, str | None]:
        if not isinstance(body, dict):
            return None, None, None
        env = WireErrorEnvelope.model_validate(body)
        return env.error, env.message, env.request_id


PLATFORM = PlatformDescriptor(
    conn_type="tensorone",
    display_name="TensorOne",
    class_name="TensorOne",
    dialect=TensorOneDialect,
    default_base_url="https://api.tensorone.ai",
    docs_url="https://docs.tensorone.ai",
    placeholders={"api_key": "tpo_live_..."},
    # "Rate limits": training API, per account and hour: GET /training/* 500, PUT /training/* 50,
    # POST /training/jobs 10 (a cancel is a write)
    api_rates=ApiRates(read_per_hour=500, write_per_hour=50, create_per_hour=10),
)
