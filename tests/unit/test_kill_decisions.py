"""Who cancels when (pure decisions): trigger on_kill, reaper, retry vs clear."""

from __future__ import annotations

import pytest

from airflow_training_provider.identity import TaskIdentity
from airflow_training_provider.kill_decisions import is_retry, on_kill_decision, reaper_decision


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
def test_on_kill_decision(state, current, cancel):
    assert on_kill_decision(state, current, "job_a").cancel is cancel


def test_on_kill_mark_success_option():
    assert on_kill_decision("success", "job_a", "job_a", cancel_on_mark_success=True).cancel


def test_on_kill_reattach_on_clear_keeps_job_for_next_try():
    d = on_kill_decision("running", None, "job_a", reattach_on_clear=True)
    assert not d.cancel and "reattach" in d.reason
    assert on_kill_decision("failed", "job_a", "job_a", reattach_on_clear=True).cancel


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
    assert reaper_decision(state, current, "job_a", 1).cancel is cancel


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


def test_identity_tags_round_trip_and_state_key():
    ident = TaskIdentity("dag", "manual__2026-01-01T00:00:00+00:00", "train", 3, 2, "prod")
    tags = ident.tags()
    assert "airflow-run:manual__2026-01-01T00:00:00+00:00" in tags and "airflow-try:2" in tags
    assert TaskIdentity.from_tags(["team:x", *tags]) == ident
    assert ident.state_key == "train_3"
    assert TaskIdentity("d", "r", "t").state_key == "t"
    assert TaskIdentity.from_tags(["team:x"]) is None
