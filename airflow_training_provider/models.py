"""The normalized training-job model every platform dialect translates to and from.

Platforms disagree on names and states (``docs/platforms/README.md`` maps each to these); the
rest of the provider (hooks, trigger, operators) only ever sees these types. All of them are
pydantic v2 models so they serialize to JSON for XCom and trigger events unchanged.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from airflow_training_provider.json_values import EventMessage, Message, is_finite
from airflow_training_provider.timestamps import InformationalTime, UtcDateTime

METRIC_HISTORY_POINTS = 100
"""Training rows asked for when a job's metric history is read (the platform samples them evenly);
bounds the history carried in the trigger event and XCom."""


class JobState(StrEnum):
    """Common training-job lifecycle (``docs/platforms/README.md``).

    ``pending → queued → starting → running → stopping → succeeded | failed | cancelled``.
    """

    PENDING = "pending"
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        """True for ``succeeded``, ``failed`` and ``cancelled``: the job will not change again."""
        return self in TERMINAL_STATES


TERMINAL_STATES: frozenset[JobState] = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class _Model(BaseModel):
    # "strings": a NaN in an ``Any`` field (CancelResult.final_metrics) stays a float in a JSON-mode
    # dump, for json_values.dump to name it; pydantic's default would make it None
    model_config = ConfigDict(extra="ignore", populate_by_name=True, ser_json_inf_nan="strings")


class Progress(_Model):
    """Where training is: epoch/step counters, percent complete (0–100) and ETA in seconds."""

    epoch: int | None = None
    total_epochs: int | None = None
    step: int | None = None
    total_steps: int | None = None
    percent: float | None = None
    eta_seconds: float | None = None


class Checkpoint(_Model):
    """A saved model state.

    ``kind`` is the platform's checkpoint type (``automatic``, ``best``, ``manual``, ``final``), or
    ``location`` for the place a platform keeps the job's own checkpoints without listing them
    (SageMaker's ``CheckpointConfig.S3Uri``); ``path`` is the storage location when the platform
    reports one (TensorOne: download URL or, on the local platform, the file path).
    """

    id: str
    epoch: int | None = None
    step: int | None = None
    kind: str | None = None
    path: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    created_at: InformationalTime = None


class Cost(_Model):
    """Spend in USD: ``total_usd`` so far (final once the job is terminal) and the estimate;
    ``billable_seconds`` where the platform reports billed time rather than money (SageMaker)."""

    total_usd: float | None = None
    estimated_total_usd: float | None = None
    breakdown_usd: dict[str, float] = Field(default_factory=dict)
    billable_seconds: float | None = None

    @field_validator("total_usd", "estimated_total_usd", "billable_seconds")
    @classmethod
    def _finite_or_unknown(cls, value: float | None) -> float | None:
        # NaN or Infinity is no amount of money: the platform's report is unreadable, so the cost is
        # unknown this poll (the max_cost_usd guard waits for the next finite one)
        return value if value is None or is_finite(value) else None


class MetricPoint(_Model):
    """One row of a job's metric history: the metrics a platform recorded at one global step.

    ``kind`` is ``"train"`` (training loss and learning rate), ``"eval"`` (an evaluation on the
    validation set) or ``"epoch"`` (both, at the end of an epoch: read from the metrics saved with
    that epoch's checkpoint); ``values`` uses the provider's metric names (``loss``, ``accuracy``,
    ``learning_rate``, ``validation_loss``, ``validation_accuracy``...).
    """

    step: int
    kind: str = "train"
    epoch: float | None = None
    values: dict[str, float] = Field(default_factory=dict)


class JobEvent(_Model):
    """One platform event as the platform reported it, in platform order.

    :ivar type: the platform's event type (``job_error``, ``wandb_init``...; Together's lower-cased).
    :ivar message: its text.
    :ivar level: ``info``, ``warning`` or ``error``: each dialect normalizes its platform's level
        spellings to these three, which the shared code knows (an ``error`` explains a failure, a
        warning or error is written to the task log at WARNING).
    :ivar created_at: when it happened (UTC), when the platform says.
    """

    type: str
    message: EventMessage = ""
    level: str = "info"
    created_at: InformationalTime = None


class TrainingJob(_Model):
    """A training job as the provider sees it, whatever the platform: what every dialect's
    ``parse_job`` returns. Only ``id``, ``platform``, ``state`` and ``raw_status`` are required; every
    other field is optional (``None`` or empty) where the platform does not report it, and a poll
    (``Dialect.parse_poll``) may leave out checkpoints, events and timestamps.

    :ivar id: the platform's job id, as its API takes it back (TensorOne ``jobId``, SageMaker's job
        name).
    :ivar platform: dialect name, e.g. ``"tensorone"``.
    :ivar state: normalized lifecycle state (``Dialect.map_status`` of the platform's status); a
        terminal state ends a wait.
    :ivar raw_status: the platform's own status string, unchanged (SageMaker adds its secondary
        status: ``InProgress/Training``).
    :ivar name: the job's display name, when the platform has one besides its id.
    :ivar message: failure reason or status message when the platform gives one; for a failed or
        cancelled job, the decisive event's text is added (``events.explain_failure``).
    :ivar progress: epoch/step counters, percent (0–100) and ETA (seconds); all optional.
    :ivar metrics: latest metrics by name (``loss``, ``accuracy``, ``validation_accuracy``...), floats.
    :ivar checkpoints: checkpoints known so far, oldest first (the final one last).
    :ivar cost: spend in USD so far (``cost.total_usd``, ``None`` when the platform reports no
        money: then the ``max_cost_usd`` guard needs ``hourly_cost_usd``), or billed seconds.
    :ivar console_url: a link a person can open for this job (``Dialect.console_url``).
    :ivar tags: identity tags the job carries, ``key:value`` (``airflow-*`` tags set by this
        provider); read back from the job or its list row, so re-attach and the reaper find it.
    :ivar artifacts: where the job's outputs are, by kind (``model``, ``checkpoints``: URIs).
    :ivar events: platform events embedded in the job object (platforms whose events come that way).
    :ivar metric_history: metrics over time, oldest first, on a finished job (and in a
        :meth:`~airflow_training_provider.lifecycle.operations.JobOperations.snapshot`): from the
        platform's metrics endpoint (Together: training rows sampled down to at most
        ``METRIC_HISTORY_POINTS``, every evaluation row), else one ``"epoch"`` point per
        checkpointed epoch from the checkpoints' metrics (TensorOne); empty where the platform
        keeps neither (SageMaker: final metrics only).
    :ivar created_at: when the job was submitted (timezone-aware UTC); the orphan reaper's
        ``min_age`` counts from it. Optional.
    :ivar started_at: when the job started *training* (left the queue), timezone-aware UTC. It
        drives the ``max_runtime`` guard and the hourly pricing of ``max_cost_usd``
        (``hourly_cost_usd`` × hours since it); ``None`` where the platform does not say, and
        then those count from the first poll that saw the job running. Read by ``parse_job``
        (a poll may leave it out: the guards read the full job once to learn it).
    :ivar updated_at: the platform's last change of the job, timezone-aware UTC. Optional,
        informational.
    :ivar omitted: how many of the job's ``checkpoints``, ``metric_history`` and ``events`` this
        copy leaves out, by field (``{}``: none): a finished job as the task returns it and stores it
        is bounded (:func:`~airflow_training_provider.results.bounded_job`); the platform keeps them
        all (the Training job tab and ``TrainingPlatformHook.snapshot`` read them whole).
    :ivar final_checkpoint_written: for a stopped job, whether its program wrote a checkpoint after
        the stop signal (those files are its ``final`` checkpoints); ``None`` where the platform
        does not say (no real SageMaker, PAI or ModelArts answer does; the local platform does for a
        user-code job, see the platform's doc) and for a job that was not stopped.
    """

    id: str
    platform: str
    state: JobState
    raw_status: str
    name: str | None = None
    message: Message | None = None
    progress: Progress = Field(default_factory=Progress)
    metrics: dict[str, float] = Field(default_factory=dict)
    checkpoints: list[Checkpoint] = Field(default_factory=list)
    cost: Cost = Field(default_factory=Cost)
    console_url: str | None = None
    tags: list[str] = Field(default_factory=list)
    artifacts: dict[str, str] = Field(default_factory=dict)
    events: list[JobEvent] = Field(default_factory=list)
    metric_history: list[MetricPoint] = Field(default_factory=list)
    created_at: UtcDateTime | None = None
    started_at: InformationalTime = None
    updated_at: InformationalTime = None
    final_checkpoint_written: bool | None = None
    omitted: dict[str, int] = Field(default_factory=dict)

    @property
    def is_terminal(self) -> bool:
        return self.state.is_terminal

    @property
    def latest_checkpoint(self) -> Checkpoint | None:
        return self.checkpoints[-1] if self.checkpoints else None

    @property
    def final_checkpoint(self) -> Checkpoint | None:
        """The checkpoint written on cancel or completion (``kind == "final"``), else the latest."""
        finals = [c for c in self.checkpoints if c.kind == "final"]
        return finals[-1] if finals else self.latest_checkpoint


def best_checkpoint(checkpoints: list[Checkpoint]) -> Checkpoint | None:
    """The platform's ``best`` checkpoint, else the one with the lowest finite ``validation_loss``
    (else ``loss``); a NaN or infinite loss (a diverged epoch) is never the best."""
    marked = [c for c in checkpoints if c.kind == "best"]
    if marked:
        return marked[-1]
    for metric in ("validation_loss", "loss"):
        scored = [c for c in checkpoints if is_finite(c.metrics.get(metric))]
        if scored:
            return min(scored, key=lambda c: c.metrics[metric])
    return None


class CancelRequest(_Model):
    """What to ask the platform when cancelling (modelled on TensorOne's cancel body).

    :ivar reason: free text shown on the platform.
    :ivar preserve_checkpoints: keep checkpoints already written.
    :ivar create_final_checkpoint: ask the job to save one more checkpoint before it stops
        (only honoured by platforms whose capabilities include it, and only while running).
    :ivar force: stop at once (SIGKILL-like); may lose data.
    """

    reason: str = "cancelled by Airflow"
    preserve_checkpoints: bool = True
    create_final_checkpoint: bool = True
    force: bool = False


class CancelResult(_Model):
    """What a cancel achieved.

    :ivar job_id: the job cancelled.
    :ivar state: the job state after the cancel call (``stopping`` or ``cancelled``; after a
        confirmed cancel, the terminal state).
    :ivar already_terminal: the job had already ended; nothing was cancelled.
    :ivar final_checkpoint_id: checkpoint saved by the cancel, if any.
    :ivar final_checkpoint_path: its storage location; where the platform only keeps the job's
        checkpoints at a location without listing them (``Checkpoint.kind == "location"``), that.
    :ivar final_checkpoint_written: whether the job's program wrote a checkpoint after the stop
        signal (then ``final_checkpoint_id``/``_path`` name the newest file);
        ``None``: the platform cannot tell (:attr:`TrainingJob.final_checkpoint_written`).
    :ivar final_metrics: metrics at the moment of cancelling: numbers, or text where the platform
        says so (TensorOne ``trainingDuration: "44m"``); typed, not ``Any``, so a NaN stays a float
        in a JSON-mode dump (pydantic writes an ``Any`` NaN as ``None``) and is named by
        ``json_values.dump``.
    :ivar cost: spend in USD up to the cancel.
    """

    job_id: str
    state: JobState
    already_terminal: bool = False
    final_checkpoint_id: str | None = None
    final_checkpoint_path: str | None = None
    final_checkpoint_written: bool | None = None
    final_metrics: dict[str, int | float | str | None] = Field(default_factory=dict)
    cost: Cost = Field(default_factory=Cost)

    def final_checkpoint_text(self) -> str:
        """The final checkpoint as a log line says it: ``final checkpoint written after the stop:
        <path>`` or ``no final checkpoint written after the stop; checkpoints at <path>`` where the
        platform tells (:attr:`final_checkpoint_written`), else ``final checkpoint <id> (<path>)``."""
        where = self.final_checkpoint_path or self.final_checkpoint_id
        if self.final_checkpoint_written:
            return f"final checkpoint written after the stop: {where}"
        if self.final_checkpoint_written is False:
            kept = f"; checkpoints at {self.final_checkpoint_path}" if self.final_checkpoint_path else ""
            return f"no final checkpoint written after the stop{kept}"
        return f"final checkpoint {self.final_checkpoint_id} ({self.final_checkpoint_path})"


def no_cancel_needed(job: TrainingJob) -> CancelResult | None:
    """Whether a cancel of ``job`` would be redundant: it already ended (``already_terminal``) or is
    already stopping (someone else's cancel is in progress). ``None`` if a cancel is needed.

    Checked before sending a cancel (so two parties giving up at once cancel once) and to read a
    409 answer to a cancel."""
    if job.is_terminal:
        return CancelResult(job_id=job.id, state=job.state, already_terminal=True, cost=job.cost)
    if job.state is JobState.STOPPING:
        return CancelResult(job_id=job.id, state=job.state, cost=job.cost)
    return None


def complete_cancel_result(result: CancelResult, job: TrainingJob) -> CancelResult:
    """Fill a cancel result with what the job shows once it stopped: final state, final checkpoint
    (and whether the program wrote one after the stop, where the platform says), metrics and cost."""
    final = job.final_checkpoint if job.is_terminal else None
    update: dict[str, Any] = {"state": job.state}
    if final is not None and (result.final_checkpoint_id in (None, final.id)) and final.kind == "final":
        update |= {"final_checkpoint_id": final.id, "final_checkpoint_path": final.path}
    elif final is not None and final.kind == "location" and job.is_terminal:
        # the platform keeps the job's own checkpoints at a location (SageMaker: CheckpointConfig.S3Uri)
        update |= {"final_checkpoint_path": final.path}
    if job.is_terminal and job.final_checkpoint_written is not None:
        update["final_checkpoint_written"] = job.final_checkpoint_written
    if job.metrics and not result.final_metrics:
        update["final_metrics"] = dict(job.metrics)
    if job.cost.total_usd is not None:
        update["cost"] = job.cost
    return result.model_copy(update=update)
