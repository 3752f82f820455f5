"""K1–K18 (shared/cases/kill-paths.md) on a real Airflow 3.3 stack, judged by the platform's records."""

from __future__ import annotations

import pytest

from tests.killpaths import scenarios as s

pytestmark = pytest.mark.killpaths


@pytest.fixture
def env(kill_path_env):
    return kill_path_env


def assert_cancelled_once_with_final_checkpoint(outcome: s.Outcome, job: dict | None = None) -> dict:
    job = job or outcome.jobs[0]
    accepted = [r for r in job["cancel_requests"] if r.get("outcome") == "accepted"]
    assert job["state"] == "cancelled", job["state"]
    assert len(accepted) == 1, job["cancel_requests"]
    assert accepted[0]["create_final_checkpoint"] is True and accepted[0]["preserve_checkpoints"] is True
    assert outcome.final_checkpoint_files(job), job["checkpoints"]
    return job


def test_k1_mark_failed_cancels_once(env):
    o = s.k1_mark_failed(*env)
    assert o.submits == 1
    assert_cancelled_once_with_final_checkpoint(o)
    assert o.ti_state == "failed"


def test_k2_clear_cancels_old_job_before_the_new_try_submits(env):
    o = s.k2_clear(*env)
    old, new = o.notes["old"], o.notes["new"]
    assert o.submits == 2  # the old try's job and exactly one for the new try
    assert_cancelled_once_with_final_checkpoint(o, old)
    assert new["job_id"] != old["job_id"] and o.notes["xcom_job"] == new["job_id"]
    assert new["created_at"] >= old["finished_at"], "two jobs ran at once for the task"


def test_k2b_clear_with_reattach_on_clear_keeps_the_job(env):
    o = s.k2b_clear_reattach(*env)
    assert o.submits == 1 and o.cancels == []
    assert o.notes["try_number"] == 2 and o.notes["xcom_job"] == o.notes["job"]["job_id"]


def test_k3_mark_success_does_not_cancel(env):
    o = s.k3_mark_success(*env)
    assert o.cancels == [] and o.notes["job_state"] == "running"
    assert o.ti_state == "success"


def test_k3b_mark_success_cancels_when_asked(env):
    o = s.k3b_mark_success_option(*env)
    assert_cancelled_once_with_final_checkpoint(o)
    assert o.ti_state == "success"


def test_k4_dag_run_failed_cancels_once(env):
    o = s.k4_dag_run_failed(*env)
    assert_cancelled_once_with_final_checkpoint(o)
    assert o.ti_state == "failed"


def test_k4b_dagrun_timeout_cancels_once(env):
    o = s.k4b_dagrun_timeout(*env)
    assert_cancelled_once_with_final_checkpoint(o)
    assert o.ti_state == "skipped"


def test_k5_execution_timeout_while_deferred(env):
    o = s.k5_execution_timeout_deferred(*env)
    first, second = o.notes["first"], o.notes["second"]
    assert_cancelled_once_with_final_checkpoint(o, first)
    assert abs(o.latency) < 15, f"cancel arrived {o.latency:.1f} s from the 25 s deadline"
    assert "execution_timeout" in first["cancel_requests"][0]["reason"]
    assert second["created_at"] >= first["finished_at"], "the retry ran beside the first job"


def test_k6_defer_timeout_cancels(env):
    o = s.k6_defer_timeout(*env)
    assert_cancelled_once_with_final_checkpoint(o)
    assert o.ti_state == "failed"
    assert "Trigger timeout" in o.notes["log"] or "TaskDeferralTimeout" in o.notes["log"]


def test_k7_triggerer_restart_never_cancels(env):
    o = s.k7_triggerer_restart(*env)
    assert o.cancels == [] and o.submits == 1
    assert o.jobs[0]["state"] == "completed" and o.ti_state == "success"


def test_k9_slow_cancel_still_completes(env):
    o = s.k9_slow_cancel(*env)
    assert_cancelled_once_with_final_checkpoint(o)
    assert o.latency is not None and o.latency < 20


def test_k10_sigterm_to_running_task_cancels_and_stops_it(env):
    o = s.k10_sigterm_task(*env)
    assert_cancelled_once_with_final_checkpoint(o)
    assert o.ti_state == "failed"
    assert o.notes["stopped_after"] < 30


def test_k11_execution_timeout_while_running(env):
    o = s.k11_execution_timeout_running(*env)
    assert_cancelled_once_with_final_checkpoint(o)
    assert o.ti_state == "failed"


def test_k12_mark_failed_running_cancels_before_sigkill(env):
    o = s.k12_mark_failed_running(*env)
    job = o.jobs[0]
    assert job["state"] == "cancelled"
    assert len([r for r in job["cancel_requests"] if r["outcome"] == "accepted"]) == 1
    assert o.latency < 10  # on_kill ran within the 5 s SIGTERM→SIGKILL window (heartbeat ~4 s)


def test_k13_worker_crash_retry_reattaches(env):
    o = s.k13_worker_crash_reattach(*env)
    assert o.submits == 1, "the retry submitted a duplicate"
    assert o.notes["try_number"] == 2 and o.notes["xcom_job"] == o.notes["job"]["job_id"]
    assert o.notes["job_state"] == "running"


def test_k13b_worker_crash_retry_adopts_finished_job(env):
    o = s.k13b_worker_crash_adopt(*env)
    assert o.submits == 1 and o.cancels == []
    assert o.ti_state == "success" and o.notes["try_number"] == 2
    assert "already succeeded: adopting it" in o.notes["log"]


def test_k14_transient_polling_errors_are_not_job_failures(env):
    o = s.k14_flaky_polling(*env)
    assert o.notes["fired"] == [1, 1, 1, 1], "every fault was hit"
    assert o.submits == 1 and o.cancels == []
    assert o.ti_state == "success" and o.jobs[0]["state"] == "completed"


def test_k15_outage_beyond_budget_fails_without_cancel_and_retry_reattaches(env):
    o = s.k15_outage_beyond_budget(*env)
    assert (
        "Lost contact with the platform" in o.notes["log1"]
        or "lost contact with the platform" in o.notes["log1"]
    )
    assert o.notes["state_during"] == "running"
    assert o.submits == 1 and o.cancels == []
    assert o.notes["try_number"] == 2 and o.ti_state == "success"


def test_k16_job_stopped_outside_airflow_fails_task(env):
    o = s.k16_cancelled_outside(*env)
    assert o.ti_state == "failed"
    assert o.notes["outside_cancels"] == 1  # only the console's own cancel
    assert "was cancelled outside Airflow" in o.notes["log"]


def test_k17_already_failed_job_fails_without_deferral(env):
    o = s.k17_already_failed(*env)
    log = o.notes["log"]
    assert o.ti_state == "failed" and o.jobs[0]["state"] == "failed"
    assert "learning_rate" in log and "failed" in log
    assert "TrainingJobTrigger" not in log and "DEFERRED" not in log.upper().replace("NOT DEFERRED", "")


def test_k18_reaper_cancels_orphan_when_triggerer_was_down(env):
    o = s.k18_reaper_when_triggerer_down(*env)
    assert o.notes["untouched"] == "running"  # no provider code ran for the mark-failed
    assert o.notes["reaper_state"] == "success"
    assert_cancelled_once_with_final_checkpoint(o)
