"""The local platform's job engine, in parts: :mod:`.records` (jobs and their neutral states),
:mod:`.reports` (the trainer's reports), :mod:`.scheduler` (GPU slots and the queue),
:mod:`.processes` (trainer child processes), :mod:`.billing` (cost and budgets),
:mod:`.checkpoints` (files, resume, deletion), :mod:`.programs` (a user's own training program
instead of the trainer) with :mod:`.program_files` (its files in and out of the local object store)
and :mod:`.container_init` (the init a shell command runs under), and :mod:`.engine`, the
thread-safe facade the platform apps call."""

from airflow_training_platform.engine.engine import (
    USER_CODE_FLAG,
    USER_CODE_REFUSED,
    BudgetExhausted,
    EngineConfig,
    EngineError,
    InvalidJobSpec,
    JobNotFound,
    StateConflict,
    TrainingEngine,
)
from airflow_training_platform.engine.records import (
    JOB_STATES,
    LIVE_STATES,
    TERMINAL_STATES,
    JobRecord,
    JobSpec,
)

__all__ = [
    "JOB_STATES",
    "LIVE_STATES",
    "TERMINAL_STATES",
    "BudgetExhausted",
    "EngineConfig",
    "EngineError",
    "InvalidJobSpec",
    "JobNotFound",
    "JobRecord",
    "JobSpec",
    "StateConflict",
    "TrainingEngine",
    "USER_CODE_FLAG",
    "USER_CODE_REFUSED",
]
