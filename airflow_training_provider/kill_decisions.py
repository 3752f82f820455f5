"""Who may cancel a job, and when: pure decisions, unit-tested, used by the trigger's ``on_kill``,
the operator's re-attach step and the orphan reaper.

Inputs are what Airflow says about the task instance now (its state, the job id its current try
published in XCom) and what the caller knows (the job id it waits on). Reference:
``shared/reference/airflow-kill-paths.md`` §4.
"""

from __future__ import annotations

from dataclasses import dataclass

#: TI states in which a try is alive (or about to be) and may own a job.
LIVE_STATES = frozenset(
    {"scheduled", "queued", "running", "deferred", "up_for_retry", "up_for_reschedule", "restarting"}
)


@dataclass(frozen=True)
class Decision:
    """``cancel`` or not, and why (for the log)."""

    cancel: bool
    reason: str


def on_kill_decision(
    ti_state: str | None,
    current_job_id: str | None,
    job_id: str,
    *,
    cancel_on_mark_success: bool = False,
    reattach_on_clear: bool = False,
) -> Decision:
    """Decide in the trigger's ``on_kill`` whether the user gave up on ``job_id``.

    ``on_kill`` fires on mark failed/success, clear, DAG run failed/timeout — and, wrongly, when the
    trigger moved to another triggerer (3.3.2). Only the last leaves the TI deferred on this same job.

    :param ti_state: the task instance's state now (``None`` after a clear, before rescheduling).
    :param current_job_id: the job id the TI's current try pushed to XCom (``None`` if none yet).
    :param job_id: the job this trigger waits on.
    """
    if ti_state == "deferred" and current_job_id == job_id:
        return Decision(False, "task is still deferred on this job (trigger reassigned to another triggerer)")
    if ti_state == "success" and not cancel_on_mark_success:
        return Decision(False, "task was marked success and cancel_on_mark_success is off")
    if reattach_on_clear and (ti_state is None or ti_state in LIVE_STATES):
        return Decision(False, "task was cleared and reattach_on_clear is on: its next try re-attaches")
    if ti_state is None or ti_state in LIVE_STATES:
        return Decision(True, f"task was cleared (now {ti_state or 'none'}, running another job or none)")
    return Decision(True, f"task is {ti_state}")


def reaper_decision(ti_state: str | None, current_job_id: str | None, job_id: str, job_try: int) -> Decision:
    """Decide whether a running job tagged by this deployment is an orphan.

    A job is kept while its task instance is alive on it: in a live state and either publishing this
    job id, or publishing none yet (a try that is starting may still re-attach to it).

    :param ti_state: state of the TI named by the job's tags; ``None`` if Airflow does not know it.
    :param current_job_id: job id in that TI's XCom (current try), if any.
    :param job_try: the try number the job was submitted by.
    """
    if ti_state in LIVE_STATES:
        if current_job_id in (None, job_id):
            return Decision(False, f"task instance is {ti_state} on this job")
        return Decision(True, f"task instance is {ti_state} on another job ({current_job_id})")
    return Decision(True, f"task instance is {ti_state or 'gone'}")


def is_retry(try_number: int, max_tries: int, retries: int) -> bool:
    """Whether this try is an automatic retry (vs. a first try or the first try after a clear).

    Airflow sets ``max_tries = try_number + retries`` when a task is cleared, so the first try of
    each cycle is ``max_tries - retries + 1`` (the same rule as ``get_first_reschedule_date``).
    """
    return try_number > max_tries - retries + 1
