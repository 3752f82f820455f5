"""Job records of the local training platform: neutral states, trainer reports → progress, metrics,
checkpoints and events, time estimates, and the plain-dict snapshot. No processes, no locking, no
wire format (the engine holds its lock around every call here; each platform's wire module maps the
neutral states to its own names).

Times are ``time.time()`` floats (unix seconds, UTC); money is USD; durations are seconds.
"""

from __future__ import annotations

import collections
import copy
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_training_platform.engine.checkpoints import add_checkpoint
from airflow_training_platform.engine.reports import (
    EpochReport,
    Report,
    StartedReport,
    StepReport,
    StoppedReport,
)

if TYPE_CHECKING:
    from airflow_training_platform.engine.programs import ProgramProcess, ProgramSource

JOB_STATES = (
    "pending",
    "queued",
    "starting",
    "running",
    "finalizing",
    "stopping",
    "succeeded",
    "failed",
    "cancelled",
)
"""Every job state, in lifecycle order (the provider's own lifecycle, plus ``finalizing``).
``pending`` (accepted, not yet in the GPU queue) and ``finalizing`` (trainer finished,
post-processing stages running) only occur for specs that ask for them
(:attr:`JobSpec.pending_seconds`, :attr:`JobSpec.finalize_stages`). ``starting``: the job holds its
GPUs and its process is being started or is loading its data and model; ``stopping``: a cancel signalled it and it has not exited."""

TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})
"""States a job never leaves."""

LIVE_STATES = frozenset({"starting", "running", "stopping"})
"""States in which the job's process exists (and holds its GPUs)."""


@dataclass
class JobSpec:
    """What to run. Trainer config keys go in ``hyperparameters`` (see the trainer module doc).

    resume_from: a checkpoint reference, ``"<job_id>/<checkpoint_id>"`` or a checkpoint file path.
    request: the raw request body, kept verbatim in the job record.
    id_prefix: job id prefix; ids are ``<id_prefix><12 hex>`` (``id_style="hex"``) or
        ``<id_prefix><uuid4>`` (``id_style="uuid4"``).
    pending_seconds: time the job spends ``pending`` (accepted, not yet queued for GPUs); 0 = straight to
        ``queued``.
    finalize_stages: post-processing after the trainer completed, run in order while the job is
        ``finalizing`` (no GPU held, no cost): ``{"name": str, "seconds": float, "event_type": str,
        "message": str}``; the job enters stage ``name`` (recorded as ``stage`` in the state history),
        gets the event, and moves on after ``seconds``. Empty = ``completed`` as soon as the trainer exits.
    started_events: events (``{"type", "message", "level"?, ...}``) recorded when the trainer reports it has
        loaded its data and model (its ``started`` line).
    cancel_on_start: if set, ``{"reason": str, "message"?: str, "events"?: [event...]}``: the platform
        cancels the job right after ``started_events`` (see :meth:`TrainingEngine.platform_cancel`), e.g. a
        start-up integration that failed.
    stop_grace_seconds: after a graceful stop signal, seconds before the trainer is SIGKILLed (the
        platform's own grace, e.g. SageMaker's 120 s); ``None`` = the engine's ``grace_seconds``.
    max_runtime_seconds: the platform stops the job (like a cancel with a final checkpoint, initiator
        ``"platform"``, reason ``max_runtime``) once its trainer has run this long; ``None`` = no limit.
    job_id: the job's id when the client names it (a SageMaker job name); ``None`` = generated from
        ``id_prefix``. Submitting an id that exists raises ``StateConflict``.
    program: the user's own program (:mod:`.programs`) instead of the built-in trainer; ``None``
        (the default) runs the trainer. Only accepted when the engine allows user code
        (``EngineConfig.allow_user_code``); ``dataset`` and the trainer keys of ``hyperparameters``
        then mean nothing to the engine.
    """

    name: str
    platform: str = "tensorone"
    dataset: str = "digits"
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    gpu_count: int = 1
    tags: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    description: str | None = None
    resume_from: str | None = None
    request: dict[str, Any] | None = None
    id_prefix: str = "job_train_"
    id_style: str = "hex"
    pending_seconds: float = 0.0
    finalize_stages: list[dict[str, Any]] = field(default_factory=list)
    started_events: list[dict[str, Any]] = field(default_factory=list)
    cancel_on_start: dict[str, Any] | None = None
    stop_grace_seconds: float | None = None
    max_runtime_seconds: float | None = None
    job_id: str | None = None
    program: ProgramSource | None = None


@dataclass
class JobRecord:
    """Everything known about one job. ``config`` is the effective trainer config; ``proc``, ``kill_timer``
    and ``terminal`` (set once the job is terminal) belong to the engine."""

    job_id: str
    spec: JobSpec
    config: dict[str, Any]
    job_dir: str
    resume_path: str | None
    created_at: float
    state: str = "queued"
    updated_at: float = 0.0
    started_at: float | None = None
    running_at: float | None = None
    finished_at: float | None = None
    exited_at: float | None = None
    stage: str | None = None
    stage_index: int = -1
    advance_at: float | None = None
    state_history: list[dict[str, Any]] = field(default_factory=list)
    progress: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    metric_history: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    deleted_checkpoints: list[dict[str, Any]] = field(default_factory=list)
    logs: collections.deque = field(default_factory=collections.deque)
    events: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    trainer_error: str | None = None
    cancel_requests: list[dict[str, Any]] = field(default_factory=list)
    cancel: dict[str, Any] | None = None
    final_checkpoint_id: str | None = None
    completed_seen: bool = False
    stopped_seen: StoppedReport | None = None
    pid: int | None = None
    returncode: int | None = None
    proc: subprocess.Popen | None = None
    kill_timer: threading.Timer | None = None
    terminal: threading.Event = field(default_factory=threading.Event)
    program: dict[str, Any] | None = None
    program_process: ProgramProcess | None = None

    # ------------------------------------------------------------------------- mutations
    def set_state(self, state: str, at: float | None = None, stage: str | None = None) -> None:
        """Move to ``state`` (and sub-``stage``, for ``finalizing``) and append it to ``state_history`` with
        its time (``{"state", "at"}`` plus ``"stage"`` when given)."""
        at = time.time() if at is None else at
        self.state = state
        self.stage = stage
        self.updated_at = at
        entry: dict[str, Any] = {"state": state, "at": at}
        if stage is not None:
            entry["stage"] = stage
        self.state_history.append(entry)

    def add_event(self, type_: str, message: str, level: str = "info", **extra: Any) -> None:
        """Append a generic event ``{type, message, level, created_at, **extra}`` (Together-style types)."""
        created_at = extra.pop("created_at", None) or time.time()
        self.events.append(
            {"type": type_, "message": message, "level": level, "created_at": created_at, **extra}
        )

    def finish(self, state: str, error: str | None = None, at: float | None = None) -> None:
        """Enter terminal ``state`` at ``at`` (default now), recording ``error`` if given; release waiters."""
        self.finished_at = time.time() if at is None else at
        self.advance_at = None
        if error is not None:
            self.error = error
        self.set_state(state, self.finished_at)
        self.terminal.set()

    def apply_report(self, report: Report) -> None:
        """Apply one trainer report (:mod:`.reports`) to progress, metrics, checkpoints and events.
        Raises KeyError/TypeError/ValueError on a malformed report."""
        now = time.time()
        if report["type"] in ("step", "epoch") and self.state == "starting":
            self.running_at = now
            self.set_state("running", now)
            self.add_event("training_start", "Training started")
        if report["type"] == "started":
            self._apply_started(report, now)
        elif report["type"] == "step":
            self._apply_step(report, now)
        elif report["type"] == "epoch":
            self._apply_epoch(report, now)
        elif report["type"] == "checkpoint":
            add_checkpoint(self, report, now)
        elif report["type"] == "completed":
            self.completed_seen = True
            self.add_event("training_complete", "Training complete", step=report.get("step"))
        elif report["type"] == "stopped":
            self.stopped_seen = report
        elif report["type"] == "error":
            self.trainer_error = str(report.get("message") or "trainer error")

    def apply_program_metrics(self, values: dict[str, float], at: float) -> None:
        """Metric values read from one line of a user program's output (:mod:`.programs`): the last
        value per name in ``metrics``, one ``{"kind": "program", "step": <n-th such line>, "epoch":
        <the "epoch" value, if one is defined>, "at", "values"}`` row in ``metric_history``."""
        self.metrics.update(values)
        rows = sum(1 for row in self.metric_history if row["kind"] == "program")
        self.metric_history.append(
            {
                "kind": "program",
                "step": rows + 1,
                "epoch": values.get("epoch"),
                "at": at,
                "values": dict(values),
            }
        )

    def _apply_started(self, report: StartedReport, now: float) -> None:
        self.progress.update(
            total_epochs=report["epochs"],
            steps_per_epoch=report["steps_per_epoch"],
            total_steps=report["total_steps"],
            start_step=report["start_step"],
            step=report["start_step"],
            epoch=report["start_epoch"] - 1,
            completed_epochs=report["start_epoch"] - 1,
            start_epoch=report["start_epoch"],
            training_started_at=now,
        )
        self.metrics["learning_rate"] = report.get("learning_rate")

    def _apply_step(self, report: StepReport, now: float) -> None:
        self.progress.update(
            epoch=report["epoch"], step=report["step"], total_steps=report["total_steps"], step_at=now
        )
        self.metrics["loss"] = report["loss"]
        self.metric_history.append(
            {
                "kind": "train",
                "step": report["step"],
                "epoch": report["epoch"],
                "at": now,
                "loss": report["loss"],
                "learning_rate": self.metrics.get("learning_rate"),
            }
        )

    def _apply_epoch(self, report: EpochReport, now: float) -> None:
        self.progress.update(
            epoch=report["epoch"], completed_epochs=report["epoch"], step=report["step"], step_at=now
        )
        for key in ("loss", "accuracy", "val_loss", "val_accuracy", "samples_per_second", "epoch_seconds"):
            self.metrics[key] = report.get(key)
        self.metric_history.append(
            {
                "kind": "eval",
                "step": report["step"],
                "epoch": report["epoch"],
                "at": now,
                "loss": report.get("val_loss"),
                "accuracy": report.get("val_accuracy"),
            }
        )
        self.add_event(
            "epoch_complete",
            f"Epoch {report['epoch']} complete: val_accuracy={report.get('val_accuracy') or 0:.4f}",
            epoch=report["epoch"],
            step=report["step"],
        )

    # ------------------------------------------------------------------------- estimates, snapshot
    def remaining_seconds(self, startup_estimate: float, now: float | None = None) -> float:
        """Estimated seconds until the job ends (for a queued job: its expected run time, excluding the
        wait): start-up estimate + remaining epochs x pacing, or the observed step rate once training."""
        now = time.time() if now is None else now
        p = self.progress
        pacing = float(self.config.get("seconds_per_epoch") or 0.0)
        epochs_left = max(0, p["total_epochs"] - p["completed_epochs"])
        if self.state in TERMINAL_STATES:
            return 0.0
        if self.state == "finalizing":
            later = sum(float(s["seconds"]) for s in self.spec.finalize_stages[self.stage_index + 1 :])
            return max(0.0, (self.advance_at or now) - now) + later
        if self.state in ("pending", "queued"):
            return startup_estimate + epochs_left * pacing
        if p["step"] <= p["start_step"] or not p.get("training_started_at"):
            elapsed = now - (self.started_at or now)
            return max(0.0, startup_estimate - elapsed) + epochs_left * pacing
        rate = max(1e-9, (p.get("step_at", now) - p["training_started_at"]) / (p["step"] - p["start_step"]))
        return max(0.0, rate * (p["total_steps"] - p["step"]))

    def snapshot(self, **computed: Any) -> dict[str, Any]:
        """Deep plain-dict copy. Keys: job_id, platform, name, tags, labels, description, dataset,
        hyperparameters (effective trainer config), gpu_count, state, stage (finalizing sub-stage or None),
        state_history, created_at (= submitted_at), started_at, running_at, exited_at (trainer exit),
        finished_at, updated_at, progress, metrics, metric_history (``{kind: "train"|"eval", step, epoch,
        at, loss, learning_rate | accuracy}``, oldest first: one train row per step report, one eval row
        per epoch; a user program's rows are ``kind: "program"``, see :meth:`apply_program_metrics`),
        checkpoints,
        deleted_checkpoints, final_checkpoint_id, logs, events, error, cancel, cancel_requests, pid,
        returncode, job_dir, resume_from, resume_path, request, program (a user program job: its argv, cwd,
        environment variable names, paths, metric definitions, and once it ended ``stop_signal_at``,
        ``killed_after_grace``, ``final_checkpoints``; ``None`` for the built-in trainer and before the
        program is prepared), user_code (bool: the spec names a user program, from the submit on), plus
        the engine's ``computed`` keys."""
        return copy.deepcopy(
            {
                "job_id": self.job_id,
                "platform": self.spec.platform,
                "name": self.spec.name,
                "tags": self.spec.tags,
                "labels": self.spec.labels,
                "description": self.spec.description,
                "dataset": self.spec.dataset,
                "hyperparameters": self.config,
                "gpu_count": self.spec.gpu_count,
                "state": self.state,
                "stage": self.stage,
                "state_history": self.state_history,
                "created_at": self.created_at,
                "submitted_at": self.created_at,
                "started_at": self.started_at,
                "running_at": self.running_at,
                "exited_at": self.exited_at,
                "finished_at": self.finished_at,
                "updated_at": self.updated_at,
                "progress": self.progress,
                "metrics": self.metrics,
                "metric_history": self.metric_history,
                "checkpoints": self.checkpoints,
                "deleted_checkpoints": self.deleted_checkpoints,
                "final_checkpoint_id": self.final_checkpoint_id,
                "logs": list(self.logs),
                "events": self.events,
                "error": self.error,
                "cancel": self.cancel,
                "cancel_requests": self.cancel_requests,
                "pid": self.pid,
                "returncode": self.returncode,
                "job_dir": self.job_dir,
                "resume_from": self.spec.resume_from,
                "resume_path": self.resume_path,
                "request": self.spec.request,
                "program": self.program,
                "user_code": self.spec.program is not None,
                **computed,
            }
        )
