"""Who cancels when: every decision of the cancel policy (pure logic), one table per decision."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from airflow_training_provider.cancellation import (
    CancelPolicy,
    EarlierJob,
    GiveUp,
    TryStart,
    is_retry,
    reaper_decision,
    resumes_from_earlier_job,
    try_start,
)
from airflow_training_provider.identity import TaskIdentity
from airflow_training_provider.models import JobState, TrainingJob

DEFAULT = CancelPolicy()
SENSOR = CancelPolicy(cancel_on_kill=False)


def job(state: JobState) -> TrainingJob:
    return TrainingJob(id="job_a", platform="tensorone", state=state, raw_status=state.value)


@pytest.mark.parametrize(
    ("state", "current", "cancel"),
    [
        ("deferred", "job_a", False),  # reassigned to another triggerer (K8)
        ("deferred", "job_b", True),  # cleared; the new try already deferred on its own job (K2 race)
        ("running", None, True),  # cleared; new try starting
        (None, None, True),  # cleared, not yet rescheduled
        ("failed", "job_a", True),  # marked failed (K1), DAG run failed (K4)
        ("skipped", "job_a", True),  # dagrun_timeout (K4)
        ("success", "job_a", False),  # marked success (K3), default
        ("up_for_retry", "job_a", True),
    ],
)
def test_after_trigger_kill(state, current, cancel):
    assert DEFAULT.after_trigger_kill(state, current, "job_a").cancel is cancel


@pytest.mark.parametrize("state", ["failed", "skipped", "success", None, "running", "deferred"])
def test_after_trigger_kill_never_cancels_with_cancel_on_kill_off(state):
    decision = SENSOR.after_trigger_kill(state, "job_b", "job_a")
    assert not decision.cancel and "cancel_on_kill" in decision.reason


def test_after_trigger_kill_mark_success_option():
    assert CancelPolicy(cancel_on_mark_success=True).after_trigger_kill("success", "job_a", "job_a").cancel


def test_after_trigger_kill_reattach_on_clear_keeps_job_for_next_try():
    policy = CancelPolicy(reattach_on_clear=True)
    d = policy.after_trigger_kill("running", None, "job_a")
    assert not d.cancel and "reattach" in d.reason
    assert policy.after_trigger_kill("failed", "job_a", "job_a").cancel


@pytest.mark.parametrize("why", list(GiveUp))
@pytest.mark.parametrize(("policy", "cancel"), [(DEFAULT, True), (SENSOR, False)])
def test_the_task_giving_up_cancels_only_if_the_policy_owns_the_job(why, policy, cancel):
    decision = policy.decide(why)
    assert decision.cancel is cancel
    assert why.value in decision.reason


REATTACH_ON_CLEAR = CancelPolicy(reattach_on_clear=True)
E, S = EarlierJob, JobState
F, R, C = TryStart.FIRST, TryStart.RETRY, TryStart.CLEARED

# Every normalized state × how the try started, for the default policy, a sensor's (cancel_on_kill
# off) and reattach_on_clear: (state, first try re-run, automatic retry, first try after a clear).
EARLIER_JOB_TABLE = {
    DEFAULT: [
        (S.PENDING, E.REATTACH, E.REATTACH, E.CANCEL_THEN_SUBMIT),
        (S.QUEUED, E.REATTACH, E.REATTACH, E.CANCEL_THEN_SUBMIT),
        (S.STARTING, E.REATTACH, E.REATTACH, E.CANCEL_THEN_SUBMIT),
        (S.RUNNING, E.REATTACH, E.REATTACH, E.CANCEL_THEN_SUBMIT),  # K13 / K13 / K2
        (S.STOPPING, E.AWAIT_STOP, E.AWAIT_STOP, E.AWAIT_STOP),  # K23: never adopt a dying job
        (S.SUCCEEDED, E.ADOPT, E.ADOPT, E.SUBMIT),  # K13b; a clear re-runs a finished task
        (S.FAILED, E.SUBMIT, E.SUBMIT, E.SUBMIT),
        (S.CANCELLED, E.SUBMIT, E.SUBMIT, E.SUBMIT),  # K5: the retry starts clean
    ],
    SENSOR: [
        (S.PENDING, E.REATTACH, E.REATTACH, E.LEAVE_THEN_SUBMIT),
        (S.QUEUED, E.REATTACH, E.REATTACH, E.LEAVE_THEN_SUBMIT),
        (S.STARTING, E.REATTACH, E.REATTACH, E.LEAVE_THEN_SUBMIT),
        (S.RUNNING, E.REATTACH, E.REATTACH, E.LEAVE_THEN_SUBMIT),
        (S.STOPPING, E.AWAIT_STOP, E.AWAIT_STOP, E.AWAIT_STOP),
        (S.SUCCEEDED, E.ADOPT, E.ADOPT, E.SUBMIT),
        (S.FAILED, E.SUBMIT, E.SUBMIT, E.SUBMIT),
        (S.CANCELLED, E.SUBMIT, E.SUBMIT, E.SUBMIT),
    ],
    REATTACH_ON_CLEAR: [
        (S.PENDING, E.REATTACH, E.REATTACH, E.REATTACH),
        (S.QUEUED, E.REATTACH, E.REATTACH, E.REATTACH),
        (S.STARTING, E.REATTACH, E.REATTACH, E.REATTACH),
        (S.RUNNING, E.REATTACH, E.REATTACH, E.REATTACH),  # K2b
        (S.STOPPING, E.AWAIT_STOP, E.AWAIT_STOP, E.AWAIT_STOP),
        (S.SUCCEEDED, E.ADOPT, E.ADOPT, E.SUBMIT),
        (S.FAILED, E.SUBMIT, E.SUBMIT, E.SUBMIT),
        (S.CANCELLED, E.SUBMIT, E.SUBMIT, E.SUBMIT),
    ],
}


def test_the_earlier_job_table_covers_every_state():
    for rows in EARLIER_JOB_TABLE.values():
        assert [row[0] for row in rows] == list(JobState)


@pytest.mark.parametrize(
    ("policy", "state", "start", "action"),
    [
        (policy, row[0], start, row[i + 1])
        for policy, rows in EARLIER_JOB_TABLE.items()
        for row in rows
        for i, start in enumerate((F, R, C))
    ],
)
def test_earlier_job(policy, state, start, action):
    assert policy.earlier_job(state, start) is action


@pytest.mark.parametrize("policy", list(EARLIER_JOB_TABLE))
@pytest.mark.parametrize("start", list(TryStart))
def test_a_stop_that_did_not_end_in_the_wait_is_reported_never_adopted(policy, start):
    assert policy.earlier_job(JobState.STOPPING, start, stop_awaited=True) is EarlierJob.STILL_STOPPING
    # once the stop ended, the ended job decides like any other
    assert policy.earlier_job(JobState.CANCELLED, start, stop_awaited=True) is EarlierJob.SUBMIT


@pytest.mark.parametrize("state", list(JobState))
@pytest.mark.parametrize("start", list(TryStart))
@pytest.mark.parametrize("action", list(EarlierJob))
def test_only_a_retry_submitting_after_a_failed_or_cancelled_job_resumes_from_it(state, start, action):
    wanted = (
        action is EarlierJob.SUBMIT
        and start is TryStart.RETRY
        and state in (JobState.FAILED, JobState.CANCELLED)
    )
    assert resumes_from_earlier_job(action, start, state, resume_from_checkpoint=True) is wanted
    assert resumes_from_earlier_job(action, start, state, resume_from_checkpoint=False) is False


@pytest.mark.parametrize(
    ("try_number", "max_tries", "retries", "start"),
    [(1, 1, 1, F), (2, 1, 1, R), (2, 2, 1, C), (1, 0, 0, F), (2, 1, 0, C)],
)
def test_try_start(try_number, max_tries, retries, start):
    assert try_start(try_number, max_tries, retries) is start


# The worker's on_kill: (policy, TI state, verified, timed out, retry left) → cancel?
KEEP = CancelPolicy(on_worker_shutdown="keep")
ALWAYS = CancelPolicy(on_worker_shutdown="cancel")


@pytest.mark.parametrize(
    ("policy", "state", "verified", "timed_out", "retry_left", "cancel"),
    [
        (DEFAULT, "running", True, False, True, False),  # K22: a worker shutdown, the retry re-attaches
        (DEFAULT, "running", True, False, False, True),  # ...on the last try nobody would: cancel
        (KEEP, "running", True, False, False, False),  # ...unless asked to keep it
        (ALWAYS, "running", True, False, True, True),  # the old behaviour, on request
        (DEFAULT, "failed", True, False, True, True),  # K12: marked failed while running
        (DEFAULT, "restarting", True, False, True, True),  # cleared while running
        (DEFAULT, "up_for_retry", True, False, False, False),  # Airflow retries (missed heartbeats)
        (REATTACH_ON_CLEAR, "restarting", True, False, False, False),  # cleared: the next try re-attaches
        (REATTACH_ON_CLEAR, None, True, False, False, False),
        (REATTACH_ON_CLEAR, "failed", True, False, True, True),
        (DEFAULT, None, True, False, True, True),  # the task instance is gone
        (DEFAULT, "success", True, False, True, False),  # marked success: K3's rule
        (CancelPolicy(cancel_on_mark_success=True), "success", True, False, True, True),
        (DEFAULT, "running", True, True, True, True),  # K11: execution_timeout is a give-up
        (DEFAULT, None, False, True, True, True),
        (DEFAULT, None, False, False, True, False),  # unverified: not a give-up we know of
        (DEFAULT, None, False, False, False, True),  # ...and no retry would re-attach
        (CancelPolicy(cancel_if_unverified=True), None, False, False, True, True),
        (SENSOR, "failed", True, False, True, False),  # a sensor does not own its job
        (SENSOR, "running", True, True, False, False),
    ],
)
def test_after_worker_kill(policy, state, verified, timed_out, retry_left, cancel):
    decision = policy.after_worker_kill(state, verified=verified, timed_out=timed_out, retry_left=retry_left)
    assert decision.cancel is cancel, decision.reason


def test_only_an_interruption_is_reported_as_one():
    def decide(policy, state, retry_left=True):
        return policy.after_worker_kill(state, verified=True, timed_out=False, retry_left=retry_left)

    assert decide(DEFAULT, "running").interrupted and decide(DEFAULT, "up_for_retry").interrupted
    assert decide(KEEP, "running", retry_left=False).interrupted
    assert not decide(DEFAULT, "success").interrupted  # marked success: kept by choice
    assert not decide(REATTACH_ON_CLEAR, "restarting").interrupted
    assert not decide(SENSOR, "running").interrupted


def test_after_worker_kill_says_why():
    kept = DEFAULT.after_worker_kill("running", verified=True, timed_out=False, retry_left=True)
    assert "still running" in kept.reason and "re-attaches" in kept.reason
    last = DEFAULT.after_worker_kill("running", verified=True, timed_out=False, retry_left=False)
    assert "no retry remains" in last.reason


def test_on_worker_shutdown_names_its_values():
    with pytest.raises(ValidationError, match="keep_for_retry"):
        CancelPolicy(on_worker_shutdown="sometimes")


@pytest.mark.parametrize(
    ("state", "current", "cancel"),
    [
        ("deferred", "job_a", False),
        ("running", "job_a", False),
        ("queued", None, False),
        ("up_for_retry", "job_a", False),
        ("deferred", "job_b", True),
        ("failed", "job_a", True),
        ("success", "job_a", True),
        (None, None, True),
        ("skipped", None, True),
    ],
)
def test_reaper_decision(state, current, cancel):
    assert reaper_decision(state, current, "job_a").cancel is cancel


@pytest.mark.parametrize(
    ("try_number", "max_tries", "retries", "retry"),
    [
        (1, 0, 0, False),  # first try, no retries
        (1, 2, 2, False),  # first try
        (2, 2, 2, True),  # automatic retry
        (3, 2, 2, True),
        (2, 3, 2, False),  # cleared after try 1: max_tries = 1 + 2
        (4, 5, 2, False),  # cleared after try 3
        (2, 1, 0, False),  # cleared, no retries: max_tries = 1 + 0
    ],
)
def test_is_retry(try_number, max_tries, retries, retry):
    assert is_retry(try_number, max_tries, retries) is retry


def test_policy_builds_every_cancel_request():
    policy = CancelPolicy(preserve_checkpoints=False, create_final_checkpoint=False)
    request = policy.request("why", force=True)
    assert (request.reason, request.preserve_checkpoints, request.create_final_checkpoint, request.force) == (
        "why",
        False,
        False,
        True,
    )


def test_policy_takes_timedeltas_and_refuses_unknown_or_bad_fields():
    assert CancelPolicy(confirm_timeout=timedelta(minutes=2)).confirm_timeout == 120.0
    with pytest.raises(ValidationError, match="confirm_timeout"):
        CancelPolicy(confirm_timeout=-1)
    with pytest.raises(ValidationError, match="cancel_on_kil"):
        CancelPolicy(cancel_on_kil=True)
    assert CancelPolicy(**DEFAULT.model_dump()) == DEFAULT  # flat JSON round trip


def test_identity_tags_round_trip_and_state_key():
    ident = TaskIdentity("dag", "manual__2026-01-01T00:00:00+00:00", "train", 3, 2, "prod")
    tags = ident.tags()
    assert "airflow-run:manual__2026-01-01T00:00:00+00:00" in tags and "airflow-try:2" in tags
    assert TaskIdentity.from_tags(["team:x", *tags]) == ident
    assert ident.state_key == "train_3"
    assert TaskIdentity("d", "r", "t").state_key == "t"
    assert TaskIdentity.from_tags(["team:x"]) is None


@pytest.mark.parametrize(
    "kind, why",
    [("execution_timeout", GiveUp.EXECUTION_TIMEOUT), ("defer_timeout", GiveUp.DEFER_TIMEOUT)],
)
def test_a_task_deadline_names_its_give_up(kind, why):
    assert GiveUp.at_deadline(kind) is why


def test_a_sensor_timeout_gives_up_on_no_job():
    with pytest.raises(ValueError, match="sensor_timeout"):
        GiveUp.at_deadline("sensor_timeout")
