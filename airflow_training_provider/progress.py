"""What a waiting task writes to its log: one-line progress reports (only when something changed),
the platform's new events and (``stream_logs``) the training program's new lines."""

from __future__ import annotations

from collections.abc import Awaitable

from airflow_training_provider.events import write_events
from airflow_training_provider.json_values import json_value, non_finite_metrics
from airflow_training_provider.lifecycle.operations import NewEvents, NewLogLines, Progress, Step
from airflow_training_provider.models import TrainingJob
from airflow_training_provider.program_logs import SecretLines, write_lines
from airflow_training_provider.task_log import TaskLog

_SHOWN_METRICS = ("loss", "accuracy", "validation_loss", "validation_accuracy")


def describe(job: TrainingJob) -> str:
    """``job_x running (running): epoch 3/10, step 120/560, 21.4%, loss 0.3100, ETA 12 s, cost $0.0123``."""
    parts = [f"{job.id} {job.state.value} ({job.raw_status})"]
    p = job.progress
    details = []
    if p.epoch is not None:
        details.append(f"epoch {p.epoch}/{p.total_epochs}" if p.total_epochs else f"epoch {p.epoch}")
    if p.step is not None:
        details.append(f"step {p.step}/{p.total_steps}" if p.total_steps else f"step {p.step}")
    if p.percent is not None:
        details.append(f"{p.percent:.1f}%")
    details += [f"{name} {job.metrics[name]:.4f}" for name in _SHOWN_METRICS if name in job.metrics]
    if p.eta_seconds is not None and not job.is_terminal:
        details.append(f"ETA {p.eta_seconds:.0f} s")
    if job.cost.total_usd is not None:
        details.append(f"cost ${job.cost.total_usd:.4f}")
    if job.message and job.is_terminal:
        details.append(f"message: {job.message}")
    return parts[0] + (": " + ", ".join(details) if details else "")


def diverged_text(job: TrainingJob) -> str | None:
    """``metric loss is NaN, validation_loss is Infinity: the run diverged (job_x)`` when a metric
    of ``job`` (its latest metrics) is NaN or ±Infinity; ``None`` when all are finite."""
    found = non_finite_metrics(job.metrics)
    if not found:
        return None
    names = ", ".join(f"{name} is {value}" for name, value in sorted(found.items()))
    return f"metric {names}: the run diverged (training job {job.id})"


class JobReport:
    """Turns a wait's reports into task-log lines: :func:`describe` of each polled job when its
    state, epoch, step or metrics changed, each new platform event once, and each new line of the
    training program once (``[program] …``, masked against ``secrets``).

    Call it with every :class:`Progress` / :class:`NewEvents` / :class:`NewLogLines` step;
    ``cursor`` is the number of events written so far."""

    def __init__(self, log: TaskLog, cursor: int = 0, secrets: SecretLines | None = None) -> None:
        self._log = log
        self._last: tuple | None = None
        self._last_metrics: dict[str, float] | None = None
        self._diverged: frozenset[str] = frozenset()  # the non-finite metrics already warned of
        self.cursor = cursor
        self.secrets = secrets or SecretLines()

    def __call__(self, step: Step) -> Awaitable[None] | None:
        """Report ``step``; what it returns, if anything, the async driver awaits."""
        if isinstance(step, Progress):
            self.progress(step.job)
        elif isinstance(step, NewEvents):
            write_events(self._log, step.events)
            self.cursor = max(self.cursor, step.cursor)
        elif isinstance(step, NewLogLines):
            write_lines(self._log, step.lines, self.secrets)
        return None

    def progress(self, job: TrainingJob) -> bool:
        """Log ``job`` if it moved since the last call; return whether it logged."""
        signature = (job.state, job.raw_status, job.progress.epoch, job.progress.step)
        metrics = json_value(job.metrics)  # NaN as "NaN": equal to itself, so an unchanged NaN is no change
        if signature == self._last and metrics == self._last_metrics:  # every poll: no sorting
            return False
        self._last, self._last_metrics = signature, metrics
        self._log.info("Training job %s", describe(job))
        diverged = frozenset(non_finite_metrics(job.metrics))
        if diverged - self._diverged and (text := diverged_text(job)):
            self._log.warning("Training job %s", text)
        self._diverged = diverged
        return True
