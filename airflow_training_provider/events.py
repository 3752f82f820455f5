"""Platform events in the task log, and failure reasons taken from them.

Platforms such as Together report *why* a job stopped only in its event list (an invalid W&B key,
an exhausted balance). While a task waits, each new event is written to the task log once, in
order; a cursor (the number of events already written) travels with the waiter — in trigger kwargs
and in the try's ``event_cursor.try<n>`` XCom, so a restarted triggerer resumes after the last written event.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from airflow_training_provider.models import JobEvent, JobState, TrainingJob
from airflow_training_provider.platforms.base import Dialect
from airflow_training_provider.task_log import TaskLog

#: levels written at WARNING (each dialect normalizes its platform's spellings to info/warning/error)
_LOUD_LEVELS = frozenset({"error", "warning"})


def write_events(log: TaskLog, events: Iterable[JobEvent]) -> None:
    """Write ``events`` to ``log``: ``Platform event <time> [<type>] <message>``, errors and
    warnings at WARNING level."""
    for event in events:
        level = logging.WARNING if event.level.lower() in _LOUD_LEVELS else logging.INFO
        when = event.created_at.isoformat() if event.created_at else "-"
        log.log(level, "Platform event %s [%s] %s", when, event.type, event.message)


def explain_failure(job: TrainingJob, events: list[JobEvent], dialect: Dialect) -> TrainingJob:
    """For a failed or cancelled job, put the decisive event (the platform's reason) in ``message``."""
    if job.state not in (JobState.FAILED, JobState.CANCELLED):
        return job
    event = dialect.decisive_event(events)
    if event is None:
        return job
    reason = f"{event.type}: {event.message}".strip()
    if job.message and event.message and event.message in job.message:
        return job
    message = f"{job.message} ({reason})" if job.message else reason
    return job.model_copy(update={"message": message})
