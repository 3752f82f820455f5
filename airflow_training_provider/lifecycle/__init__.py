"""The job lifecycle written once, with no I/O: job operations and the polling loop
(:mod:`.operations`), and waiting with its outcomes (:mod:`.waiting`). The hooks drive it."""

from airflow_training_provider.lifecycle.operations import (
    JobOperations,
    NewEvents,
    Operation,
    Progress,
    Sleep,
    Step,
)
from airflow_training_provider.lifecycle.waiting import (
    DeadlineReached,
    JobFinished,
    LostContact,
    PollFailed,
    Polling,
    WaitOutcome,
    parse_outcome,
    wait_for_job,
)

__all__ = [
    "DeadlineReached",
    "JobFinished",
    "JobOperations",
    "LostContact",
    "NewEvents",
    "Operation",
    "PollFailed",
    "Polling",
    "Progress",
    "Sleep",
    "Step",
    "WaitOutcome",
    "parse_outcome",
    "wait_for_job",
]
