"""The reports a trainer process sends the engine: one JSON object per line on the trainer's stdout.

Each kind of report is a :class:`~typing.TypedDict` whose ``type`` key names it. The trainer
(:mod:`airflow_training_platform.trainer`) writes each with :func:`encode`; the engine reads each line
with :func:`decode` and applies it to the job's record (:meth:`.records.JobRecord.apply_report`). The
trainer imports this module in its child process, so it, like the engine package that loads with it,
imports no third-party package at module level (no FastAPI, no scikit-learn).

A run reports ``started``, then ``step`` lines (the first mini-batch of the run, then at most one
per ``report_interval_seconds``, plus the last mini-batch of each epoch), an ``epoch`` line after
each epoch and a ``checkpoint`` line after each checkpoint written, and ends with ``completed`` (exit
0), ``stopped`` (exit 0) or ``error`` (exit 1). Steps count mini-batches over the whole job (a
resumed run continues the count); the ``epoch`` of a checkpoint, ``completed`` or ``stopped`` report
is the last *fully completed* one.
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypedDict, cast


class Metrics(TypedDict):
    """A completed epoch's metrics."""

    loss: float  # mean training loss over the epoch's mini-batches
    accuracy: float  # on the training split
    val_loss: float
    val_accuracy: float


class StartedReport(TypedDict):
    """The trainer loaded its data and model and starts training."""

    type: Literal["started"]
    pid: int
    dataset: str
    n_train: int  # samples in the training split
    n_val: int  # samples in the validation split
    n_classes: int
    epochs: int  # the job's total epochs (resumed ones included)
    start_epoch: int  # first epoch this run trains (1, or the resumed checkpoint's epoch + 1)
    start_step: int  # steps already done (0, or the resumed checkpoint's step)
    steps_per_epoch: int
    total_steps: int
    batch_size: int
    learning_rate: float  # as configured (scikit-learn validates it)
    hidden_units: int
    seconds_per_epoch: float
    resumed_from: str | None  # checkpoint file path


class StepReport(TypedDict):
    """A mini-batch was trained."""

    type: Literal["step"]
    epoch: int  # the epoch in progress
    step: int
    total_steps: int
    loss: float  # this mini-batch's loss


class EpochReport(TypedDict):
    """An epoch completed: its :class:`Metrics` keys, flat, plus its timing."""

    type: Literal["epoch"]
    epoch: int
    step: int
    loss: float
    accuracy: float
    val_loss: float
    val_accuracy: float
    epoch_seconds: float
    samples_per_second: float | None


class CheckpointReport(TypedDict):
    """A checkpoint file was written: ``automatic`` (id ``ckpt_epoch_<n>``, after an epoch) or ``final``
    (id ``ckpt_final``, on a stop with a final checkpoint)."""

    type: Literal["checkpoint"]
    checkpoint_id: str
    path: str  # absolute path of the joblib file
    epoch: int
    step: int
    kind: Literal["automatic", "final"]
    size_bytes: int
    metrics: Metrics | dict[str, Any]  # the last completed epoch's; {} before the first


class CompletedReport(TypedDict):
    """Every epoch trained; the trainer exits 0."""

    type: Literal["completed"]
    epoch: int
    step: int
    metrics: Metrics | dict[str, Any]  # the last completed epoch's; {} if this run trained none


class StoppedReport(TypedDict):
    """A stop signal ended training (after the final checkpoint, if one was wanted); the trainer exits 0."""

    type: Literal["stopped"]
    signal: str  # "SIGTERM" or "SIGINT"
    epoch: int
    step: int
    final_checkpoint_id: str | None


class ErrorReport(TypedDict):
    """Training failed; the trainer exits 1."""

    type: Literal["error"]
    message: str
    exception: str  # the exception's class name


Report = (
    StartedReport
    | StepReport
    | EpochReport
    | CheckpointReport
    | CompletedReport
    | StoppedReport
    | ErrorReport
)
"""Any trainer report; its ``type`` key tells which."""

REPORT_TYPES = ("started", "step", "epoch", "checkpoint", "completed", "stopped", "error")
"""The ``type`` of every report kind."""


def encode(report: Report) -> str:
    """One report as its line of compact JSON (without the newline)."""
    return json.dumps(report, separators=(",", ":"))


def decode(line: str) -> Report | None:
    """The report on one trainer stdout line; ``None`` if the line is not a JSON object with a known
    ``type`` (other output). Only the type is checked: a report missing keys makes
    :meth:`.records.JobRecord.apply_report` raise."""
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    if not isinstance(msg, dict) or msg.get("type") not in REPORT_TYPES:
        return None
    return cast("Report", msg)
