"""A job's log lines, the one source every platform's log API reads (CloudWatch Logs for SageMaker,
``ListTrainingJobLogs`` for PAI, the task logs of ModelArts):

* a user-code job (its spec named a program, :mod:`.programs`): the program's stdout and stderr
  lines, read from its log file (``TrainingEngine.read_log``), each at the time it was written —
  nothing before the program starts;
* a job of the built-in trainer: the job's events from its start on (``Trainer process … started``,
  ``Epoch 3 complete: val_accuracy=…``, checkpoints, ``Training complete``…), the trainer's reports
  as readable lines — what a built-in algorithm's output is to a cloud user. An event without a
  message is no line (its index is skipped).

A line's ``index`` is its place in the job's log (the line of the log file, or the event of the
job since its start) and never changes, so a reader can resume from it. Lines are yielded as the
job's log is now; a running job's log grows at the end only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_training_platform.engine.engine import TrainingEngine

READ_CHUNK = 10_000
"""Program log lines read per engine call."""


@dataclass(frozen=True)
class LogLine:
    """One line of a job's log: ``index`` (0-based place in the log), ``at`` (epoch seconds, float:
    when it was written or the event happened), ``text`` (the line without its newline; may be empty
    for a program's empty line)."""

    index: int
    at: float
    text: str


def job_lines(engine: TrainingEngine, rec: Mapping[str, Any], start: int = 0) -> Iterator[LogLine]:
    """The lines of the job ``rec`` (an engine snapshot) from index ``start`` on, oldest first.

    :param engine: the engine the job belongs to (a program's log file is read through it).
    :param rec: the job's snapshot (``TrainingEngine.get``); ``user_code`` tells a program's job.
    :param start: the index of the first line wanted.
    :raises JobNotFound: the job is gone from ``engine``.
    """
    if rec.get("user_code"):
        while True:
            page = engine.read_log(rec["job_id"], start, READ_CHUNK, platform=rec.get("platform"))
            for offset, line in enumerate(page["lines"]):
                yield LogLine(start + offset, float(line["t"]), str(line["line"]))
            if page["next"] == start:
                return
            start = page["next"]
    started = rec.get("started_at")
    if started is None:
        return
    since_start = [e for e in rec.get("events") or [] if e["created_at"] >= started]
    for index in range(start, len(since_start)):
        event = since_start[index]
        if event.get("message"):
            yield LogLine(index, float(event["created_at"]), str(event["message"]))


def has_started(rec: Mapping[str, Any]) -> bool:
    """Whether the job's instance (its container) has started: the engine has started it
    (``started_at``). Before that a job has no log at all."""
    return rec.get("started_at") is not None
