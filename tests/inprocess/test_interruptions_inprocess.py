"""An interruption is not a give-up, in this process against the local platform: a worker stopped
while its task instance is still running keeps the job for the retry, and a retry never adopts a
job that is being stopped. The task instance's state comes from Airflow's API server through the
supervisor, which this tier does not have: the tests say what it answers
(``job_task.task_instance_state``); the real-stack cases K22 and K23 ask the real one."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_training_provider.cancellation import GiveUp
from airflow_training_provider.hooks.training import TrainingPlatformHook
from airflow_training_provider.job_task import (
    TrainingJobCancelledByAirflow,
    TrainingJobInterrupted,
    TrainingJobStillStopping,
)
from airflow_training_provider.testing.inprocess import run_task, task_context
from tests.inprocess.test_operators_inprocess import (
    control_cancel,
    sagemaker_spec,
    submit,
    tensorone_spec,
    wait_for_xcom,
)


def ti_state_is(monkeypatch, state: str | None) -> list:
    """Airflow's answer to "what is the task instance's state now?"; the questions asked."""
    asked: list = []

    def answer(identity):
        asked.append(identity)
        return state

    monkeypatch.setattr("airflow_training_provider.job_task.task_instance_state", answer)
    return asked


def run_in_thread(op, ctx) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = run_task(op, ctx)
        except BaseException as exc:  # noqa: BLE001 - the test asserts which
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_a_worker_shutdown_keeps_the_job_and_the_retry_reattaches(control, monkeypatch):
    asked = ti_state_is(monkeypatch, "running")  # nobody gave up: the worker is being stopped
    spec = tensorone_spec(epochs=12)
    op = submit("tensorone", spec, deferrable=False, retries=1)
    ctx = task_context(op)
    thread, outcome = run_in_thread(op, ctx)
    job_id = wait_for_xcom(ctx, "job_id")
    control.wait_job(job_id, {"running"})
    op.on_kill()  # what the supervisor's forwarded SIGTERM does
    thread.join(30)
    assert isinstance(outcome.get("error"), TrainingJobInterrupted), outcome
    assert "keeps running and the retry re-attaches" in str(outcome["error"])
    assert [(i.dag_id, i.task_id, i.try_number) for i in asked] == [("inprocess", "train", 1)]
    job = control.job(job_id)
    assert job["state"] == "running" and job["cancel_requests"] == []
    # try 2 (the retry) re-attaches to the same job and ends with it
    retry = submit("tensorone", spec, deferrable=False, retries=1)
    result = run_task(retry, task_context(retry, try_number=2, state=ctx))
    assert result["id"] == job_id and result["state"] == "succeeded"
    assert [j["job_id"] for j in control.jobs(name=spec["name"])] == [job_id], "one job in all"


@pytest.mark.parametrize(
    ("retries", "on_worker_shutdown", "cancelled"),
    [(0, "keep_for_retry", True), (0, "keep", False), (1, "cancel", True)],
)
def test_on_worker_shutdown_decides_what_an_interruption_does(
    control, monkeypatch, retries, on_worker_shutdown, cancelled
):
    ti_state_is(monkeypatch, "running")
    op = submit(
        "tensorone",
        tensorone_spec(epochs=300),
        deferrable=False,
        retries=retries,
        on_worker_shutdown=on_worker_shutdown,
    )
    ctx = task_context(op)
    thread, outcome = run_in_thread(op, ctx)
    job_id = wait_for_xcom(ctx, "job_id")
    control.wait_job(job_id, {"running"})
    op.on_kill()
    thread.join(60)
    job = control.job(job_id)
    if cancelled:
        assert isinstance(outcome.get("error"), TrainingJobCancelledByAirflow), outcome
        (cancel,) = control.accepted_cancels(job)
        assert job["state"] == "cancelled" and cancel["reason"] == GiveUp.WORKER_KILLED.value
    else:
        assert isinstance(outcome.get("error"), TrainingJobInterrupted), outcome
        assert job["state"] == "running" and job["cancel_requests"] == []
        control_cancel(control, job_id)


def test_a_task_marked_failed_while_running_cancels(control, monkeypatch):
    ti_state_is(monkeypatch, "failed")  # the supervisor's SIGTERM after a heartbeat said "failed"
    op = submit("tensorone", tensorone_spec(epochs=300), deferrable=False, retries=1)
    ctx = task_context(op)
    thread, outcome = run_in_thread(op, ctx)
    job_id = wait_for_xcom(ctx, "job_id")
    control.wait_job(job_id, {"running"})
    op.on_kill()
    thread.join(60)
    assert isinstance(outcome.get("error"), TrainingJobCancelledByAirflow), outcome
    assert control.job(job_id)["state"] == "cancelled"


def test_an_unanswered_state_question_is_given_up_on_in_time(control, monkeypatch):
    """The signal may land while this very thread holds the supervisor channel's lock: the question
    then never gets through, and on_kill must still return in time (SIGKILL comes 5 s after)."""
    never = threading.Event()
    monkeypatch.setattr("airflow_training_provider.job_task.task_instance_state", lambda _: never.wait(30))
    op = submit("tensorone", tensorone_spec(epochs=300), deferrable=False, retries=1)
    ctx = task_context(op)
    thread, outcome = run_in_thread(op, ctx)
    job_id = wait_for_xcom(ctx, "job_id")
    control.wait_job(job_id, {"running"})
    t0 = time.monotonic()
    op.on_kill()
    took = time.monotonic() - t0
    never.set()
    thread.join(30)
    assert took < 2.0, f"on_kill took {took:.1f} s"
    # unverified with a retry left: kept for the retry (cancel_if_unverified is off)
    assert isinstance(outcome.get("error"), TrainingJobInterrupted), outcome
    assert control.job(job_id)["state"] == "running"
    control_cancel(control, job_id)


@pytest.mark.slow  # the try then takes seconds to end
def test_on_kill_keeps_to_its_budget_when_airflow_and_the_platform_are_slow(control, monkeypatch):
    """A slow state answer (just under ON_KILL_VERIFY_TIMEOUT) and a cancel the platform sits on:
    on_kill still returns within ON_KILL_BUDGET (SIGKILL comes 5 s after SIGTERM), the cancel's
    call given up on with what the state question left of the budget."""
    from airflow_training_provider.job_task import ON_KILL_BUDGET, ON_KILL_VERIFY_TIMEOUT

    def slow_answer(identity):
        time.sleep(ON_KILL_VERIFY_TIMEOUT - 0.1)
        return "failed"

    monkeypatch.setattr("airflow_training_provider.job_task.task_instance_state", slow_answer)
    op = submit("tensorone", tensorone_spec(epochs=300), deferrable=False, retries=1)
    ctx = task_context(op)
    thread, outcome = run_in_thread(op, ctx)
    job_id = wait_for_xcom(ctx, "job_id")
    control.wait_job(job_id, {"running"})
    rule = control.add_fault(
        method="POST", path_prefix=f"/v2/training/jobs/{job_id}/cancel", delay_seconds=20
    )
    try:
        t0 = time.monotonic()
        op.on_kill()
        took = time.monotonic() - t0
        assert control.fault(rule["id"])["fired"] == 1, "the cancel reached the platform and hung there"
    finally:
        control.clear_faults(rule_id=rule["id"])
    thread.join(60)
    assert ON_KILL_VERIFY_TIMEOUT - 0.1 < took < ON_KILL_BUDGET + 0.3, f"on_kill took {took:.2f} s"
    assert outcome.get("error") is not None, (
        outcome
    )  # the try ends either way (cancelled by execute's confirm, or failed)
    control_cancel(control, job_id)


def stopping_job(control, **kwargs) -> tuple[dict, dict, str]:
    """A SageMaker job whose try 1 is over and whose stop takes a few seconds (its final checkpoint
    takes 3 s to write, like a big model's upload): (spec, try 1's context, job id)."""
    spec = sagemaker_spec(epochs=300, checkpoint_seconds=3)
    spec["TrainingJobName"] = f"stop-{spec['CheckpointConfig']['S3Uri'][-8:]}"
    op = submit("aws", spec, wait_for_completion=False, retries=1, **kwargs)
    first = task_context(op)
    job_id = run_task(op, first)["id"]
    control.wait_job(job_id, lambda j: j["progress"].get("completed_epochs", 0) >= 1)
    TrainingPlatformHook("aws_local").cancel_job(job_id)  # try 1's give-up asked for the stop
    assert control.job(job_id)["state"] == "stopping"
    return spec, first, job_id


@pytest.mark.slow  # a stop that takes seconds, as K23 on the real stack
def test_a_retry_waits_for_a_stopping_job_then_submits_its_own_resuming_from_it(control):
    spec, first, old_id = stopping_job(control, resume_from_checkpoint=True)
    retry = submit("aws", spec, wait_for_completion=False, retries=1, resume_from_checkpoint=True)
    new_id = run_task(retry, task_context(retry, try_number=2, state=first))["id"]
    old, new = control.job(old_id), control.job(new_id)
    assert new_id != old_id and old["state"] == "cancelled"
    assert new["created_at"] >= old["finished_at"], "the retry ran beside the dying job"
    saved = [c["path"] for c in old["checkpoints"]]  # SageMaker: what the stopped job left in its location
    assert saved and new["resume_from"] == saved[-1], (new["resume_from"], saved)
    control.wait_job(new_id, {"running"})
    TrainingPlatformHook("aws_local").cancel_job(new_id)


@pytest.mark.slow  # a stop that takes seconds, as K23 on the real stack
def test_a_job_still_stopping_after_the_wait_is_reported_not_adopted(control):
    spec, first, old_id = stopping_job(control, confirm_cancel_timeout=1)
    before = {j["job_id"] for j in control.jobs(platform="sagemaker")}
    retry = submit("aws", spec, wait_for_completion=False, retries=1, confirm_cancel_timeout=1)
    with pytest.raises(
        TrainingJobStillStopping, match=rf"AWS SageMaker training job {old_id} .*still stopping"
    ):
        run_task(retry, task_context(retry, try_number=2, state=first))
    assert {j["job_id"] for j in control.jobs(platform="sagemaker")} == before, "nothing submitted beside it"
    assert len(control.accepted_cancels(control.job(old_id))) == 1  # try 1's, and no other
    control.wait_job(old_id, {"cancelled"})


def test_a_second_sigterm_inside_on_kill_changes_nothing(control, monkeypatch):
    """The process group's SIGTERM, then the supervisor's forwarded one, may land in the first
    handler: the nested on_kill returns at once, and the job is cancelled once."""
    op = submit("tensorone", tensorone_spec(epochs=300), deferrable=False, retries=1)

    def answer(identity):
        op.on_kill()  # the second SIGTERM, while the first asks for the state
        return "failed"

    monkeypatch.setattr("airflow_training_provider.job_task.task_instance_state", answer)
    ctx = task_context(op)
    thread, outcome = run_in_thread(op, ctx)
    job_id = wait_for_xcom(ctx, "job_id")
    control.wait_job(job_id, {"running"})
    op.on_kill()
    thread.join(60)
    assert isinstance(outcome.get("error"), TrainingJobCancelledByAirflow), outcome
    job = control.job(job_id)
    assert job["state"] == "cancelled" and len(job["cancel_requests"]) == 1, job["cancel_requests"]


def test_a_task_marked_success_while_running_keeps_its_job_and_is_no_interruption(control, monkeypatch):
    ti_state_is(monkeypatch, "success")
    op = submit("tensorone", tensorone_spec(epochs=300), deferrable=False, retries=1)
    ctx = task_context(op)
    thread, outcome = run_in_thread(op, ctx)
    job_id = wait_for_xcom(ctx, "job_id")
    control.wait_job(job_id, {"running"})
    op.on_kill()
    thread.join(60)
    error = outcome.get("error")
    assert isinstance(error, TrainingJobCancelledByAirflow) and "was not cancelled" in str(error), outcome
    assert control.job(job_id)["cancel_requests"] == []
    control_cancel(control, job_id)
