"""What every platform dialect provides: pure translation, no I/O.

A dialect turns intentions (create this spec, get that job, cancel it) into :class:`ApiRequest`
values and turns response bodies into the normalized models of :mod:`airflow_training_provider.models`.
The sync hook, the async hook, the tests and the docs all use the same dialect object; HTTP,
retries, polling and Airflow glue never branch on the platform, they ask :class:`Capabilities`.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from airflow_training_provider.errors import (
    InvalidJobSpecError,
    JobNotFoundError,
    JobStateConflictError,
    PlatformAuthError,
    TrainingPlatformError,
)
from airflow_training_provider.models import (
    CancelRequest,
    CancelResult,
    Checkpoint,
    JobEvent,
    JobState,
    TrainingJob,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApiRequest:
    """One HTTP call, described: method, path (relative to the connection's base URL), JSON body,
    query parameters. ``idempotent`` says whether it may be re-sent after it may have landed."""

    method: str
    path: str
    json: dict[str, Any] | None = None
    params: dict[str, Any] | list[tuple[str, Any]] | None = None
    idempotent: bool = True


@dataclass(frozen=True)
class Capabilities:
    """What a platform can do, asked by the shared code instead of branching on the platform.

    :ivar final_checkpoint_on_cancel: cancel can ask the job to save a final checkpoint.
    :ivar preserve_checkpoints_flag: cancel can be told to keep or delete checkpoints.
    :ivar events: the platform has a job event list worth streaming into the task log.
    :ivar list_jobs: jobs can be listed by tag (needed by re-attach and the orphan reaper).
    :ivar checkpoints_in_job: the job object lists its checkpoints; if not, the checkpoints
        endpoint is asked when a job ends.
    """

    final_checkpoint_on_cancel: bool = False
    preserve_checkpoints_flag: bool = False
    events: bool = False
    list_jobs: bool = False
    checkpoints_in_job: bool = True


@dataclass(frozen=True)
class Credentials:
    """What a dialect may use to authenticate: the connection's login, password and extras."""

    login: str | None = None
    password: str | None = field(default=None, repr=False)
    extra: dict[str, Any] = field(default_factory=dict)


class Dialect(ABC):
    """A platform's wire format. Subclasses set ``name``, ``status_map``, ``capabilities``."""

    name: ClassVar[str]
    conn_type: ClassVar[str]
    default_base_url: ClassVar[str]
    status_map: ClassVar[dict[str, JobState]]
    capabilities: ClassVar[Capabilities] = Capabilities()
    #: model used to validate a job spec before submit (extra fields allowed).
    spec_model: ClassVar[type[BaseModel]]

    # -- spec ---------------------------------------------------------------------------------
    def validate_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Check ``spec`` against the platform's create schema; return it unchanged if valid.

        :raises InvalidJobSpecError: naming the first offending field and what was expected.
        """
        if not isinstance(spec, dict):
            raise InvalidJobSpecError("spec", f"a mapping (dict), got {type(spec).__name__}", self.name)
        try:
            self.spec_model.model_validate(spec)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "spec"
            raise InvalidJobSpecError(where, err["msg"], self.name) from None
        return spec

    @abstractmethod
    def with_tags(self, spec: dict[str, Any], tags: list[str]) -> dict[str, Any]:
        """Return a copy of ``spec`` carrying the identity ``tags`` where the platform keeps them."""

    # -- requests -----------------------------------------------------------------------------
    @abstractmethod
    def create_request(self, spec: dict[str, Any]) -> ApiRequest: ...

    @abstractmethod
    def get_request(self, job_id: str) -> ApiRequest: ...

    @abstractmethod
    def cancel_request(self, job_id: str, cancel: CancelRequest) -> ApiRequest: ...

    def checkpoints_request(self, job_id: str) -> ApiRequest | None:
        """Request listing a job's checkpoints, or ``None`` if the job object already has them."""
        return None

    def list_request(self, tags: list[str]) -> ApiRequest:
        raise NotImplementedError(f"{self.name} cannot list jobs")

    def events_request(self, job_id: str) -> ApiRequest | None:
        return None

    @abstractmethod
    def auth_headers(self, request: ApiRequest, credentials: Credentials) -> dict[str, str]:
        """Headers that authenticate ``request`` (bearer token, signature...)."""

    # -- responses ----------------------------------------------------------------------------
    @abstractmethod
    def parse_created(self, body: Any) -> TrainingJob: ...

    @abstractmethod
    def parse_job(self, body: Any) -> TrainingJob: ...

    @abstractmethod
    def parse_cancel(self, job_id: str, body: Any) -> CancelResult: ...

    def parse_checkpoints(self, body: Any) -> list[Checkpoint]:
        return []

    def parse_list(self, body: Any) -> list[TrainingJob]:
        raise NotImplementedError(f"{self.name} cannot list jobs")

    def parse_events(self, body: Any) -> list[JobEvent]:
        return []

    def decisive_event(self, events: list[JobEvent]) -> JobEvent | None:
        """The event that explains a failed or platform-cancelled job: by default the last one
        with level ``error``. Platforms override this with their own rules."""
        errors = [e for e in events if e.level.lower() in {"error", "legacy_ierror"}]
        return errors[-1] if errors else None

    def resume_spec(self, spec: dict[str, Any], job_id: str, checkpoint: Checkpoint) -> dict[str, Any] | None:
        """``spec`` changed to start from ``checkpoint`` of job ``job_id``; ``None`` if the platform
        cannot resume from a checkpoint."""
        return None

    def error_fields(self, body: Any) -> tuple[str | None, str | None, str | None]:
        """``(code, message, request_id)`` from an error body; override per platform."""
        return None, None, None

    def parse_error(self, status: int, body: Any, text: str = "") -> TrainingPlatformError:
        """Map a non-2xx, non-transient answer to the provider's error types."""
        code, message, request_id = self.error_fields(body)
        message = message or text[:500] or f"HTTP {status}"
        cls = {
            401: PlatformAuthError,
            403: PlatformAuthError,
            404: JobNotFoundError,
            409: JobStateConflictError,
        }.get(status, TrainingPlatformError)
        return cls(message, status=status, code=code, request_id=request_id)

    def map_status(self, raw: str | None) -> JobState:
        """Platform status → :class:`JobState`. Unknown values are logged and count as running:
        polling goes on rather than crashing or ending the task on a status we have not met."""
        state = self.status_map.get(raw or "")
        if state is None:
            log.warning("%s: unknown job status %r, treating it as running", self.name, raw)
            return JobState.RUNNING
        return state

    def console_url(self, base_url: str, job_id: str) -> str | None:
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
