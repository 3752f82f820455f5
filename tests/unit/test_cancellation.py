"""Who cancels when: every decision of the cancel policy (pure logic), one table per decision."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from airflow_training_provider.cancellation import (
    CancelPolicy,
    EarlierJob,
    GiveUp,
    is_retry,
    reaper_decision,
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


@pytest.mark.parametrize(
    ("policy", "state", "retry", "action"),
    [
        (DEFAULT, JobState.RUNNING, True, EarlierJob.REATTACH),  # K13: worker crash, retry
        (DEFAULT, JobState.QUEUED, True, EarlierJob.REATTACH),
        (DEFAULT, JobState.SUCCEEDED, True, EarlierJob.ADOPT),  # K13b
        (DEFAULT, JobState.FAILED, True, EarlierJob.SUBMIT),
        (DEFAULT, JobState.CANCELLED, True, EarlierJob.SUBMIT),  # K5: the retry starts clean
        (DEFAULT, JobState.RUNNING, False, EarlierJob.CANCEL_THEN_SUBMIT),  # K2: clear
        (DEFAULT, JobState.STOPPING, False, EarlierJob.CANCEL_THEN_SUBMIT),
        (DEFAULT, JobState.SUCCEEDED, False, EarlierJob.SUBMIT),  # a clear re-runs a finished task
        (SENSOR, JobState.RUNNING, False, EarlierJob.LEAVE_THEN_SUBMIT),
        (CancelPolicy(reattach_on_clear=True), JobState.RUNNING, False, EarlierJob.REATTACH),  # K2b
        (CancelPolicy(reattach_on_clear=True), JobState.SUCCEEDED, False, EarlierJob.SUBMIT),
    ],
)
def test_earlier_job(policy, state, retry, action):
    assert policy.earlier_job(job(state), retry) is action


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
