"""K1–K24 on a real Airflow 3.3 stack, for every platform a scenario applies to, judged by the
platform's own records (submits, cancel requests, states, checkpoint files).

The scenarios (``airflow_training_devel.killpaths.scenarios``) run once per session in
the ``outcomes`` fixture (see conftest); each test asserts on its (scenario, platform) outcome.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from airflow_training_devel.killpaths import Outcome, pairs
from airflow_training_devel.killpaths.flavors import ALL_FLAVORS, GUARD_RULE, flavor_of
from airflow_training_devel.killpaths.scenarios import loss_plateau
from airflow_training_devel.killpaths.user_code import (
    checkpoint_epoch,
    first_epoch,
    resumed_epoch,
    stopped_at_epoch,
)
from airflow_training_platform.control import LocalPlatformControl

# The first test's setup runs every selected scenario (see conftest.outcomes): give it the time.
# They share one stack: under pytest-xdist (--dist loadgroup) one worker runs them all.
pytestmark = [pytest.mark.killpaths, pytest.mark.timeout(3000), pytest.mark.xdist_group(name="killpaths")]


def scenario(key: str, only=lambda flavor: True):
    """Mark a test with its scenario and run it on every platform the scenario applies to (of those
    ``only(flavor)`` keeps)."""
    flavors = sorted(name for _, name in pairs([key]) if only(ALL_FLAVORS[name]))

    def mark(test):
        test = pytest.mark.scenario(key)(test)
        return pytest.mark.parametrize("flavor", flavors, indirect=True)(test)

    return mark


def _provider_lines(log: str) -> list[str]:
    """The task log's lines about training jobs (what a failed assertion should show)."""
    return [line[:300] for line in log.splitlines() if "raining job" in line or "earlier try" in line]


def assert_cancelled_once_keeping_checkpoints(o: Outcome, job: dict | None = None) -> dict:
    """One accepted cancel; checkpoints kept — and where the platform can, a final one written."""
    job = job or o.jobs[0]
    accepted = LocalPlatformControl.accepted_cancels(job)
    assert job["state"] == "cancelled", job["state"]
    assert len(accepted) == 1, job["cancel_requests"]
    assert accepted[0]["preserve_checkpoints"] is True
    files = [Path(c["path"]) for c in job["checkpoints"]]
    assert files and all(f.is_file() for f in files), job["checkpoints"]
    if flavor_of(job).final_checkpoint:
        assert accepted[0]["create_final_checkpoint"] is True
        assert o.final_checkpoint_files(job), job["checkpoints"]
    return job


@scenario("k1_mark_failed")
def test_k1_mark_failed_cancels_once(outcome):
    assert outcome.submits == 1
    assert_cancelled_once_keeping_checkpoints(outcome)
    assert outcome.ti_state == "failed"


@scenario("k2_clear")
def test_k2_clear_cancels_old_job_before_the_new_try_submits(outcome):
    old, new = outcome.notes["old"], outcome.notes["new"]
    assert outcome.submits == 2  # the old try's job and exactly one for the new try
    assert_cancelled_once_keeping_checkpoints(outcome, old)
    assert new["job_id"] != old["job_id"] and outcome.notes["xcom_job"] == new["job_id"]
    assert new["created_at"] >= old["finished_at"], "two jobs ran at once for the task"


@scenario("k2b_clear_reattach")
def test_k2b_clear_with_reattach_on_clear_keeps_the_job(outcome):
    assert outcome.submits == 1 and outcome.cancels == []
    assert outcome.notes["try_number"] == 2 and outcome.notes["xcom_job"] == outcome.notes["job"]["job_id"]


@scenario("k3_mark_success")
def test_k3_mark_success_does_not_cancel(outcome):
    assert outcome.cancels == [] and outcome.notes["job_state"] == "running"
    assert outcome.ti_state == "success"


@scenario("k3b_mark_success_option")
def test_k3b_mark_success_cancels_when_asked(outcome):
    assert_cancelled_once_keeping_checkpoints(outcome)
    assert outcome.ti_state == "success"


@scenario("k4_dag_run_failed")
def test_k4_dag_run_failed_cancels_once(outcome):
    assert_cancelled_once_keeping_checkpoints(outcome)
    assert outcome.ti_state == "failed"


@scenario("k4b_dagrun_timeout")
def test_k4b_dagrun_timeout_cancels_once(outcome):
    assert_cancelled_once_keeping_checkpoints(outcome)
    assert outcome.ti_state == "skipped"


@scenario("k5_execution_timeout_deferred")
def test_k5_execution_timeout_while_deferred(outcome):
    first, second = outcome.notes["first"], outcome.notes["second"]
    assert_cancelled_once_keeping_checkpoints(outcome, first)
    assert abs(outcome.latency) < 15, f"cancel arrived {outcome.latency:.1f} s from the 25 s deadline"
    if flavor_of(first).cancel_reason:
        assert "execution_timeout" in first["cancel_requests"][0]["reason"]
    assert second["created_at"] >= first["finished_at"], "the retry ran beside the first job"


# -- the user's own training code (SageMaker script mode, flavor "aws-code"): K1, K5, K5b ----------------
def user_code_scenario(key: str):
    """Mark a test with its scenario and run it on the user-code flavors only."""
    flavors = sorted(name for _, name in pairs([key]) if ALL_FLAVORS[name].user_code)

    def mark(test):
        test = pytest.mark.scenario(key)(test)
        return pytest.mark.parametrize("flavor", flavors, indirect=True)(test)

    return mark


def assert_stopped_with_its_checkpoint(job: dict, log: str, data_dir: str | None) -> int:
    """The script received SIGTERM and saved a checkpoint after the stop signal, which the platform
    kept at ``CheckpointConfig.S3Uri`` (read there under ``data_dir``; ``None``: a later job of the
    run wrote there since, the caller checks otherwise); the task log's cancel result says it was
    written after the stop and names it there. Returns the epoch the checkpoint holds."""
    epoch = stopped_at_epoch(job)  # the script's own output, read through /_local
    assert epoch is not None and epoch >= 1, job["logs"][-5:]
    assert job["state"] == "cancelled" and job["returncode"] == 0, (job["state"], job["returncode"])
    program, cancel = job["program"], job["cancel"]
    assert program["stop_signal_at"] and not program["killed_after_grace"], program
    assert cancel["final_checkpoint_written"] and cancel["final_checkpoints"] == ["checkpoint.json"], cancel
    (final,) = [Path(c["path"]) for c in job["checkpoints"] if c["kind"] == "final"]
    assert final.stat().st_mtime >= program["stop_signal_at"], "written before the stop signal"
    # kept at CheckpointConfig.S3Uri: the local S3 is <data dir>/s3/<bucket>/<key>
    uri = job["request"]["CheckpointConfig"]["S3Uri"]
    assert checkpoint_epoch(final) == epoch, final
    if data_dir is not None:
        kept = Path(data_dir) / "s3" / uri.removeprefix("s3://") / "checkpoint.json"
        assert checkpoint_epoch(kept) == epoch, kept
    # the cancel result in the task log names the checkpoint the script wrote after the stop signal,
    # under CheckpointConfig.S3Uri: DescribeTrainingJob lists no checkpoint files, the local
    # platform's x_local_final_checkpoint says which were written after the stop
    lines = [r["event"] for r in map(json.loads, log.splitlines()) if job["job_id"] in r.get("event", "")]
    cancel_lines = [line for line in lines if "final checkpoint" in line]
    written = f"final checkpoint written after the stop: {uri.rstrip('/')}/checkpoint.json"
    assert cancel_lines and all(written in line for line in cancel_lines), lines
    return epoch


@user_code_scenario("k1_mark_failed")
def test_k1_user_code_saves_its_checkpoint_on_the_stop(outcome, kill_path_stack):
    job = assert_cancelled_once_keeping_checkpoints(outcome)
    assert_stopped_with_its_checkpoint(job, outcome.notes["log1"], kill_path_stack.server.data_dir)
    assert any(
        f"on_kill: job {job['job_id']} cancelled" in line for line in outcome.notes["log1"].splitlines()
    )


@user_code_scenario("k5_execution_timeout_deferred")
def test_k5_user_code_saves_its_checkpoint_and_the_retry_starts_from_it(outcome, kill_path_stack):
    first, second = outcome.notes["first"], outcome.notes["second"]
    # the retry's job has the same CheckpointConfig.S3Uri (per DAG run) and wrote its own checkpoint
    # there when the scenario stopped it: what the location held is what the retry found in it
    epoch = assert_stopped_with_its_checkpoint(first, outcome.notes["log1"], None)
    second = kill_path_stack.platform.wait_job(second["job_id"], lambda j: resumed_epoch(j) is not None, 30)
    assert resumed_epoch(second) == epoch, second["logs"][:5]


@user_code_scenario("k5b_timeout_retry_resumes")
def test_k5b_user_code_retry_resumes_from_the_checkpoint_written_on_the_stop(outcome, kill_path_stack):
    first, second = outcome.notes["first"], outcome.notes["second"]
    assert outcome.submits == 2 and second["job_id"] != first["job_id"]
    job = assert_cancelled_once_keeping_checkpoints(outcome, first)
    # try 2 wrote no checkpoint (it completed): try 1's is still at the location
    epoch = assert_stopped_with_its_checkpoint(job, outcome.notes["log1"], kill_path_stack.server.data_dir)
    # the spec's S3Uri is per try: only resume_from_checkpoint points try 2 at try 1's checkpoints
    uri = first["request"]["CheckpointConfig"]["S3Uri"]
    assert uri.endswith("/try-1") and second["request"]["CheckpointConfig"]["S3Uri"] == uri
    # the script found it in its checkpoint directory and went on from the next epoch
    assert resumed_epoch(second) == epoch and first_epoch(second) == epoch + 1, second["logs"][:5]
    assert second["state"] == "succeeded" and "training complete" in second["logs"]
    assert outcome.ti_state == "success" and outcome.notes["try_number"] == 2


@scenario("k6_defer_timeout")
def test_k6_defer_timeout_cancels(outcome):
    job = assert_cancelled_once_keeping_checkpoints(outcome)
    assert outcome.ti_state == "failed"
    # the trigger cancels at the deadline itself (Airflow's own check runs every 15 s, then a worker);
    # counted from the trigger's row, written a few ms after the deadline was set: it may be below 0
    assert -1 < outcome.latency < 10, f"cancel arrived {outcome.latency:.2f} s after defer_timeout ran out"
    if flavor_of(job).cancel_reason:
        assert job["cancel_requests"][0]["reason"] == "Airflow defer_timeout reached"
    assert "defer_timeout reached" in outcome.notes["log"] and "TaskDeferralTimeout" in outcome.notes["log"]


@scenario("k7_triggerer_restart")
def test_k7_triggerer_restart_never_cancels(outcome):
    assert outcome.cancels == [] and outcome.submits == 1
    assert outcome.jobs[0]["state"] == "succeeded" and outcome.ti_state == "success"


@scenario("k7b_guards_across_triggerer_restart")
def test_k7b_early_stopping_is_judged_across_a_triggerer_restart(outcome):
    notes, patience = outcome.notes, GUARD_RULE["patience"]
    best_epoch, best_at, since = notes["plateau_at_stop"]
    assert 2 <= since < patience, (
        f"the triggerers went down {since} epochs after the best (need 2..{patience - 1})"
    )
    assert best_at < notes["stopped_at"], "the best epoch was reported before the triggerers went down"
    assert outcome.ti_state == "success" and outcome.submits == 1
    job = assert_cancelled_once_keeping_checkpoints(outcome)
    (cancel,) = outcome.cancels
    assert cancel["received_at"] > notes["restarted_at"], "the restarted trigger stopped the job"
    if flavor_of(job).cancel_reason:
        assert cancel["reason"].startswith("Airflow guard: early stopping: validation_loss"), cancel
    guard = notes["result"]["guard"]
    assert guard["guard"] == "early_stopping" and guard["succeed"], guard
    # judged on the platform's own per-epoch record up to the epoch the guard read: the best epoch
    # from before the restart, and exactly `patience` epochs without an improvement after it
    # (a poll every second, an epoch every 0.6 s: the guard reads the history at most 2 epochs late)
    seen = [h for h in notes["history"] if h[0] <= guard["epoch"]]
    best, _, since = loss_plateau(seen, GUARD_RULE["min_delta"])
    assert best == guard["best_epoch"] == best_epoch, "the best epoch from before the restart was kept"
    assert patience <= since <= patience + 2, (guard, seen)


@scenario("k8_triggerer_reassignment")
def test_k8_reassigned_trigger_is_not_cancelled(outcome):
    assert outcome.notes["taken_by"] != outcome.notes["owner_job"]
    assert outcome.notes["state_after_wake"] == "running"
    assert outcome.cancels == [] and outcome.submits == 1
    assert outcome.ti_state == "success" and outcome.jobs[0]["state"] == "succeeded"
    # the same for a deferred sensor with cancel_on_kill=True: its trigger moved, the job it watches
    # is not cancelled by the stale copy
    sensor = outcome.notes["sensor"]
    assert sensor.notes["taken_by"] != sensor.notes["owner_job"]
    assert sensor.notes["state_after_wake"] == "running"
    assert sensor.cancels == [] and sensor.submits == 1
    assert sensor.ti_state == "success" and sensor.jobs[0]["state"] == "succeeded"


@scenario("k9_slow_cancel")
def test_k9_slow_cancel_still_completes(outcome):
    assert_cancelled_once_keeping_checkpoints(outcome)
    assert outcome.latency is not None and outcome.latency < 20


@scenario("k10_sigterm_task")
def test_k10_sigterm_to_running_task_cancels_and_stops_it(outcome):
    assert_cancelled_once_keeping_checkpoints(outcome)
    assert outcome.ti_state == "failed"
    assert outcome.notes["stopped_after"] < 30


@scenario("k11_execution_timeout_running")
def test_k11_execution_timeout_while_running(outcome):
    assert_cancelled_once_keeping_checkpoints(outcome)
    assert outcome.ti_state == "failed"


@scenario("k12_mark_failed_running")
def test_k12_mark_failed_running_cancels_before_sigkill(outcome):
    job = outcome.jobs[0]
    assert job["state"] == "cancelled"
    assert len([r for r in job["cancel_requests"] if r["outcome"] == "accepted"]) == 1
    assert outcome.latency < 10  # on_kill ran within the 5 s SIGTERM→SIGKILL window (heartbeat ~4 s)


@scenario("k13_worker_crash_reattach")
def test_k13_worker_crash_retry_reattaches(outcome):
    assert outcome.submits == 1, "the retry submitted a duplicate"
    assert outcome.notes["try_number"] == 2 and outcome.notes["xcom_job"] == outcome.notes["job"]["job_id"]
    assert outcome.notes["job_state"] == "running"


@scenario("k13c_celery_worker_killed")
def test_k13c_celery_worker_killed_retry_reattaches(outcome):
    assert outcome.notes["worker"].startswith("celery-worker-"), "the task ran on a Celery worker"
    assert outcome.submits == 1 and outcome.cancels == [], "the retry submitted a duplicate or cancelled"
    assert outcome.notes["try_number"] == 2 and outcome.notes["xcom_job"] == outcome.notes["job"]["job_id"]
    assert outcome.notes["job_state"] == "running"


@scenario("k13b_worker_crash_adopt")
def test_k13b_worker_crash_retry_adopts_finished_job(outcome):
    assert outcome.submits == 1 and outcome.cancels == []
    assert outcome.ti_state == "success" and outcome.notes["try_number"] == 2
    assert "already succeeded: adopting it" in outcome.notes["log"]


@scenario("k14_flaky_polling")
def test_k14_transient_polling_errors_are_not_job_failures(outcome):
    assert outcome.notes["fired"] == [1, 1, 1, 1], "every fault was hit"
    assert outcome.submits == 1 and outcome.cancels == []
    assert outcome.ti_state == "success" and outcome.jobs[0]["state"] == "succeeded"


@scenario("k15_outage_beyond_budget")
def test_k15_outage_beyond_budget_fails_without_cancel_and_retry_reattaches(outcome):
    assert "lost contact with the platform" in outcome.notes["log1"].lower()
    assert outcome.notes["state_during"] == "running"
    why = [(j["job_id"], j["state"]) for j in outcome.jobs], _provider_lines(outcome.notes["log2"])
    assert outcome.submits == 1 and outcome.cancels == [], why
    assert outcome.notes["try_number"] == 2 and outcome.ti_state == "success", why
    assert "Re-attaching to training job" in outcome.notes["log2"], why


@scenario("k16_cancelled_outside")
def test_k16_job_stopped_outside_airflow_fails_task(outcome):
    assert outcome.ti_state == "failed"
    assert outcome.notes["outside_cancels"] == 1  # only the console's own cancel
    assert "was cancelled outside Airflow" in outcome.notes["log"]


@scenario("k17_already_failed")
def test_k17_already_failed_job_fails_without_deferral(outcome):
    log = outcome.notes["log"]
    assert outcome.ti_state == "failed" and outcome.jobs[0]["state"] == "failed"
    assert ("learning_rate" in log or "CUDA error" in log) and "failed" in log
    assert "TrainingJobTrigger" not in log and "DEFERRED" not in log.upper()


@scenario("k18_reaper_when_triggerer_down")
def test_k18_reaper_cancels_orphan_when_triggerer_was_down(outcome):
    # the mark-failed listener's cancel was refused (once), so no provider code stopped the job
    assert outcome.notes["listener_refused"] == 1
    assert outcome.notes["untouched"] == "running"
    assert outcome.notes["reaper_state"] == "success"
    assert_cancelled_once_keeping_checkpoints(outcome)


@scenario("k19_platform_auto_cancel")
def test_k19_platform_auto_cancel_fails_task_with_the_event(outcome):
    assert outcome.ti_state == "failed" and outcome.jobs[0]["state"] == "cancelled"
    assert outcome.cancels == []  # the platform cancelled it, not Airflow
    assert [r["initiator"] for r in outcome.jobs[0]["cancel_requests"]] == ["platform"]
    failure = outcome.notes["log"].split("was cancelled outside Airflow", 1)[1][:500]
    reasons = [e["message"] for e in outcome.jobs[0]["events"] if e.get("level") == "error"]
    assert reasons and reasons[-1][:60] in failure


@scenario("k21_kill_one_mapped")
def test_k21_killing_one_mapped_task_instance_cancels_only_its_own_job(outcome):
    by_index = outcome.notes["by_index"]
    assert sorted(by_index) == [0, 1, 2] and outcome.submits == 3, "one job per mapped task instance"
    assert len({job["job_id"] for job in by_index.values()}) == 3
    assert_cancelled_once_keeping_checkpoints(outcome, by_index[1])
    assert outcome.ti_state == "failed"
    for index in (0, 2):  # the siblings: untouched, still training, still deferred
        assert by_index[index]["state"] == "running", by_index[index]["state"]
        assert LocalPlatformControl.accepted_cancels(by_index[index]) == []
    assert outcome.notes["sibling_states"] == {0: "deferred", 2: "deferred"}


@scenario("k14b_auxiliary_refused")
def test_k14b_a_refused_auxiliary_endpoint_never_fails_the_wait(outcome):
    assert outcome.notes["states"] == {"train": "success", "train_on_worker": "success"}
    assert outcome.submits == 2 and all(job["state"] == "succeeded" for job in outcome.jobs)
    assert outcome.cancels == []
    for task, log in outcome.notes["logs"].items():
        warnings = [line for line in log.splitlines() if "not readable (403" in line]
        kinds = [json.loads(line)["event"].split(" of job ")[0] for line in warnings]
        assert len(kinds) == len(set(kinds)), f"{task}: warned more than once per kind: {kinds}"
        assert not any("credential" in line.lower() for line in warnings), warnings
        assert "Events" in kinds, (task, _provider_lines(log))  # read at every poll, in both modes


@scenario("k21b_mapped_name_stem")
def test_k21b_mapped_task_instances_with_one_name_stem_each_get_their_own_job(outcome):
    by_index = outcome.notes["by_index"]
    assert outcome.notes["states"] == {0: "success", 1: "success", 2: "success"}, outcome.notes["states"]
    assert sorted(by_index) == [0, 1, 2] and outcome.submits == 3, [j["job_id"] for j in outcome.jobs]
    assert len({job["job_id"] for job in by_index.values()}) == 3
    assert all(job["state"] == "succeeded" for job in by_index.values())
    assert outcome.cancels == []


@scenario("k20_events_across_triggerer_restart", only=lambda flavor: flavor.events)
def test_k20_each_event_once_in_order_across_triggerer_restart(outcome):
    assert outcome.ti_state == "success"
    records = [json.loads(line) for line in outcome.notes["log"].splitlines()]
    logged = [r.get("event", "") for r in records if r.get("event", "").startswith("Platform event")]
    platform_events = [(e["type"], e["message"]) for e in outcome.notes["events"]]
    seen = [next((ev for ev in platform_events if f"[{ev[0]}] {ev[1]}" in line), line) for line in logged]
    # on failure: when each event line was written, and what the trigger said about its cursor
    trail = [
        f"{r.get('timestamp', '')} {r.get('event', '')}"
        for r in records
        if r.get("event", "").startswith("Platform event") or "cursor" in r.get("event", "").lower()
    ]
    assert seen == platform_events, "events missing, repeated or out of order in the task log:\n" + "\n".join(
        trail
    )


@user_code_scenario("k20_events_across_triggerer_restart")
def test_k20_stream_logs_writes_each_program_line_once_in_order_across_triggerer_restart(outcome):
    assert outcome.ti_state == "success"
    records = [json.loads(line) for line in outcome.notes["log"].splitlines()]
    written = [
        r["event"][len("[program] ") :] for r in records if r.get("event", "").startswith("[program] ")
    ]
    printed = [line for line in outcome.notes["program_lines"] if line]  # CloudWatch holds no empty line
    assert len(printed) > 24, "the script printed fewer lines than its epochs"
    restarts = [r.get("event", "") for r in records if "cursor" in r.get("event", "").lower()]
    assert written == printed, (
        "program lines missing, repeated or out of order in the task log:\n" + "\n".join(restarts)
    )


@scenario("k22_worker_shutdown")
def test_k22_a_worker_shutdown_keeps_the_job_and_the_retry_reattaches(outcome):
    job = outcome.notes["job"]
    assert outcome.submits == 1 and outcome.cancels == [], "a deploy must not cost the training"
    assert outcome.notes["try_number"] == 2 and outcome.notes["xcom_job"] == job["job_id"]
    assert outcome.notes["job_state"] == "running"
    # on_kill asks the API server whether the task instance still runs; when the SIGTERM lands while
    # the task is inside a request to its supervisor (saving the event cursor, say), that question
    # cannot be answered (the request's lock is the interrupted thread's) and the unverified branch
    # decides: the same decision, with a retry left
    log1 = outcome.notes["log1"]
    assert re.search(
        r"the worker stopped this try while (the task instance is still running|its state could not "
        r"be verified in time): an interruption, not a give-up; the job keeps running and the retry "
        r"re-attaches to it",
        log1,
    ), _provider_lines(log1)


@scenario("k23_retry_during_stop")
def test_k23_a_retry_never_adopts_a_job_that_is_stopping(outcome):
    first, second = outcome.notes["first"], outcome.notes["second"]
    assert outcome.submits == 2 and second["job_id"] != first["job_id"]
    assert_cancelled_once_keeping_checkpoints(outcome, first)
    assert second["created_at"] >= first["finished_at"], "the retry's job ran beside the dying one"
    log2 = outcome.notes["log2"]
    assert "is stopping: waiting up to" in log2, _provider_lines(log2)
    assert "Re-attaching" not in log2, _provider_lines(log2)
    assert second["resume_from"], "the retry did not resume from the stopped job's checkpoint"


# -- the API server's mark-failed listener (K24; and K1–K4 with the triggerers up) --------------------
def _run_of(o: Outcome) -> str:
    return next(t for t in o.jobs[0]["tags"] if t.startswith("airflow-run:")).split(":", 1)[1]


def _listener_lines(env, o: Outcome) -> list[str]:
    stack, _ = env
    text = stack.components["api-server"].log_path.read_text(errors="replace")
    run_id = _run_of(o)
    return [line[:400] for line in text.splitlines() if "Mark-failed listener" in line and run_id in line]


@scenario("k24_mark_failed_no_triggerer")
def test_k24_mark_failed_without_a_triggerer_cancels_at_once(outcome):
    from airflow_training_devel.killpaths.flavors import API_KEY
    from airflow_training_provider.listeners import CANCEL_REASON

    assert outcome.notes["triggerers_healthy"], "the triggerers came back"
    for o in (outcome, outcome.notes["dag_run"]):  # the task instance marked failed; its DAG run
        log = o.notes["listener_log"]
        assert o.submits == 1 and o.ti_state == "failed", o.case
        assert o.notes["state_while_down"] == "cancelled", (o.case, log)
        # one accepted cancel, also after the triggerers came back; checkpoints kept
        job = assert_cancelled_once_keeping_checkpoints(o)
        # from before the harness's PATCH (which itself takes up to ~2.5 s on a loaded 2-core machine)
        assert o.latency is not None and o.latency < 10, f"{o.case}: cancel {o.latency} s after the PATCH"
        if flavor_of(job).cancel_reason:
            assert o.cancels[0]["reason"] == CANCEL_REASON
        assert o.notes["trigger_after"] is None, "the listener claimed the trigger"
        assert any(f"cancelling job {job['job_id']}" in line for line in log), log
        assert not any(API_KEY in line for line in log)
    keep = outcome.notes.get("keep")  # cancel_on_kill=False (one platform, LocalExecutor)
    if keep is not None:
        assert keep.ti_state == "failed" and keep.notes["state_while_down"] == "running"
        assert keep.cancels == []
        assert any("cancel_on_kill is off" in line for line in keep.notes["listener_log"]), keep.notes
    success = outcome.notes.get("success")  # marked success (one platform): the listener is not called
    if success is None:
        return
    assert success.ti_state == "success" and success.notes["state_while_down"] == "running"
    assert success.cancels == [] and success.notes["listener_log"] == []


@scenario("k1_mark_failed")
def test_k1_listener_leaves_the_cancel_to_the_live_triggerer(outcome, kill_path_env):
    lines = _listener_lines(kill_path_env, outcome)
    assert lines and all("not cancelling" in line for line in lines), lines


@scenario("k4_dag_run_failed")
def test_k4_listener_leaves_the_cancel_to_the_live_triggerer(outcome, kill_path_env):
    lines = _listener_lines(kill_path_env, outcome)
    assert lines and all("not cancelling" in line for line in lines), lines


@scenario("k2_clear")
def test_k2_clear_never_reaches_the_listener(outcome, kill_path_env):
    # the clear calls no listener; only the scenario's clean-up (the new try, try 2, marked failed
    # with the triggerers up) does, and the listener leaves that one to the trigger's on_kill
    lines = _listener_lines(kill_path_env, outcome)
    assert not [line for line in lines if "[-1] try 1" in line], lines
    assert all("not cancelling" in line for line in lines), lines


@scenario("k3_mark_success")
def test_k3_mark_success_never_reaches_the_listener(outcome, kill_path_env):
    assert _listener_lines(kill_path_env, outcome) == []
