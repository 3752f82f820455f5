"""The mark-failed listener (API server): which calls it takes, the pure decision, and the flow
examine → read the connection → claim → cancel, with fakes for the database and the platform."""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from typing import Any

import pytest

from airflow_training_provider.cancellation import CancelPolicy
from airflow_training_provider.identity import TaskIdentity
from airflow_training_provider.listeners import (
    CANCEL_REASON,
    LISTENER,
    TRIGGER_CLASSPATH,
    MarkedFailed,
    MarkFailedListener,
    TriggerFacts,
    Verdict,
    decide,
    marked_failed,
)
from airflow_training_provider.models import CancelResult, JobState, TrainingJob

MANUAL = "TaskInstance's state was manually set to `failed`."

# Airflow's ORM task instance as the API server passes it (only the class's module is checked)
OrmTaskInstance = type("TaskInstance", (), {"__module__": "airflow.models.taskinstance"})
RuntimeTaskInstance = type(
    "RuntimeTaskInstance", (), {"__module__": "airflow.sdk.execution_time.task_runner"}
)


def ti(cls: type = OrmTaskInstance, **fields: Any) -> Any:
    obj = cls()
    values = dict(
        id=uuid.uuid4(), dag_id="d", run_id="r", task_id="train", map_index=-1, try_number=1, trigger_id=7
    )
    values.update(fields)
    obj.__dict__.update(values)
    return obj


def test_marked_failed_takes_the_api_servers_manual_path_of_a_deferred_task():
    mark = marked_failed(None, ti(map_index=2, try_number=3), MANUAL)
    assert mark is not None and mark.trigger_id == 7
    assert mark.identity == TaskIdentity("d", "r", "train", 2, 3)


@pytest.mark.parametrize(
    ("previous_state", "task_instance", "error", "why"),
    [
        ("running", ti(), MANUAL, "the scheduler's or a worker's failure has a previous state"),
        (None, ti(RuntimeTaskInstance), MANUAL, "a worker's RuntimeTaskInstance"),
        (None, ti(), RuntimeError("boom"), "a task's own exception"),
        (None, ti(), "TaskInstance's state was manually set to `success`.", "not failed"),
        (None, ti(), "Task failed", "another message"),
        (None, ti(trigger_id=None), MANUAL, "not deferred (a running task: its on_kill on the worker)"),
    ],
)
def test_marked_failed_ignores_everything_else(previous_state, task_instance, error, why):
    assert marked_failed(previous_state, task_instance, error) is None, why


def test_marked_failed_reads_an_unmapped_map_index_as_minus_one():
    assert marked_failed(None, ti(map_index=None), MANUAL).identity.map_index == -1


def test_trigger_classpath_is_the_one_the_trigger_serializes_to():
    from airflow_training_provider.triggers.training_job import TrainingJobTrigger

    assert TrainingJobTrigger(conn_id="c", job_id="j").serialize()[0] == TRIGGER_CLASSPATH


# -- the decision ----------------------------------------------------------------------------------
MARK = MarkedFailed("ti-1", TaskIdentity("d", "r", "train", -1, 2), trigger_id=7, marked_at=0.0)
KWARGS = {
    "conn_id": "tensorone_local",
    "job_id": "job_a",
    "dag_id": "d",
    "run_id": "r",
    "task_id": "train",
    "map_index": -1,
    "try_number": 2,
    "confirm_interval": 0.5,
    **CancelPolicy(confirm_timeout=30, create_final_checkpoint=False).model_dump(),
}
ORPHAN = TriggerFacts(
    ti_state="failed",
    ti_try_number=2,
    classpath=TRIGGER_CLASSPATH,
    kwargs=KWARGS,
    triggerer_id=5,
    triggerer_live=False,
    published_job_id="job_a",
)


def test_decide_acts_when_no_live_triggerer_runs_the_trigger():
    verdict = decide(MARK, ORPHAN)
    assert verdict.act and "triggerer 5 is not alive" in verdict.reason
    assert (verdict.conn_id, verdict.job_id, verdict.confirm_interval) == ("tensorone_local", "job_a", 0.5)
    assert verdict.policy == CancelPolicy(confirm_timeout=30, create_final_checkpoint=False)


def test_decide_acts_when_no_triggerer_ever_took_the_trigger():
    verdict = decide(MARK, replace(ORPHAN, triggerer_id=None))
    assert verdict.act and "no triggerer took it" in verdict.reason


@pytest.mark.parametrize(
    ("facts", "reason"),
    [
        (replace(ORPHAN, triggerer_live=True), "triggerer 5 is alive"),
        (replace(ORPHAN, classpath=None, kwargs={}), "trigger is gone"),
        (replace(ORPHAN, classpath="airflow.triggers.temporal.DateTimeTrigger"), "not a training task"),
        (replace(ORPHAN, kwargs={**KWARGS, "try_number": 1}), "not this task instance's current try"),
        (replace(ORPHAN, ti_try_number=3), "not this task instance's current try"),
        (replace(ORPHAN, kwargs={**KWARGS, "map_index": 1}), "not this task instance's current try"),
        (replace(ORPHAN, kwargs={**KWARGS, "task_id": "other"}), "not this task instance's current try"),
        (replace(ORPHAN, ti_state="success"), "success now"),
        (replace(ORPHAN, ti_state=None), "without a state"),
        (replace(ORPHAN, ti_state="scheduled"), "scheduled now"),  # cleared meanwhile
        (replace(ORPHAN, kwargs={**KWARGS, "cancel_on_kill": False}), "cancel_on_kill is off"),
        (replace(ORPHAN, published_job_id="job_b"), "published job job_b"),
        (replace(ORPHAN, published_job_id=None), "published job None"),
    ],
)
def test_decide_leaves_the_job(facts, reason):
    verdict = decide(MARK, facts)
    assert not verdict.act and reason in verdict.reason


# -- the flow, with fakes ----------------------------------------------------------------------------
ACT = decide(MARK, ORPHAN)


class FakeMetadata:
    """Answers ``examine`` from a script: one verdict (or ``None``: not committed) per call."""

    def __init__(self, *answers: Verdict | None) -> None:
        self.answers = list(answers)
        self.calls: list[bool] = []

    def examine(self, mark: MarkedFailed, claim: bool) -> Verdict | None:
        self.calls.append(claim)
        return self.answers.pop(0)


class FakeHook:
    def __init__(self, cancel: Any = None, fail_connection: bool = False) -> None:
        self.cancels: list[tuple[str, Any]] = []
        self._cancel = cancel or CancelResult(job_id="job_a", state=JobState.STOPPING)
        self.fail_connection = fail_connection

    @property
    def platform_connection(self) -> Any:
        if self.fail_connection:
            raise LookupError("The conn_id `tensorone_local` isn't defined")
        platform = type("P", (), {"display_name": "TensorOne"})()
        return type("C", (), {"platform": platform})()

    def cancel_job(self, job_id: str, request: Any) -> CancelResult:
        self.cancels.append((job_id, request))
        if isinstance(self._cancel, Exception):
            raise self._cancel
        return self._cancel

    def wait_until(self, job_id, until, timeout, interval) -> TrainingJob:
        return TrainingJob(id=job_id, platform="tensorone", state=JobState.CANCELLED, raw_status="cancelled")


def listener(metadata: FakeMetadata, hook: FakeHook, confirms: list | None = None) -> MarkFailedListener:
    def run_now(fn, *args):
        fn(*args)
        return True

    def confirm(fn, *args):
        (confirms if confirms is not None else []).append(args)
        return True

    return MarkFailedListener(metadata, lambda conn_id: hook, run_now, confirm, sleep=lambda s: None)


def test_waits_for_the_commit_then_claims_and_cancels_once():
    metadata, hook, confirms = FakeMetadata(None, None, ACT, ACT), FakeHook(), []
    listener(metadata, hook, confirms).on_task_instance_failed(None, ti(try_number=2), MANUAL)
    assert metadata.calls == [False, False, False, True]  # two looks before the commit, then the claim
    ((job_id, request),) = hook.cancels
    assert job_id == "job_a" and request.reason == CANCEL_REASON
    assert request.preserve_checkpoints and not request.create_final_checkpoint  # the task's policy
    assert len(confirms) == 1


def test_a_triggerer_taking_the_trigger_before_the_claim_keeps_the_cancel_its_own():
    alive = decide(MARK, replace(ORPHAN, triggerer_live=True))
    metadata, hook = FakeMetadata(ACT, alive), FakeHook()
    listener(metadata, hook).handle(MARK)
    assert metadata.calls == [False, True] and hook.cancels == []


def test_no_claim_without_a_readable_connection(caplog):
    metadata, hook = FakeMetadata(ACT), FakeHook(fail_connection=True)
    with caplog.at_level(logging.ERROR):
        assert listener(metadata, hook).handle(MARK) is None
    assert metadata.calls == [False]  # the trigger stays: a triggerer coming back runs its on_kill
    assert "not readable in the API server" in caplog.text


def test_leaves_it_without_claiming_when_the_verdict_is_no():
    no = decide(MARK, replace(ORPHAN, triggerer_live=True))
    metadata, hook = FakeMetadata(no), FakeHook()
    assert listener(metadata, hook).handle(MARK) == no
    assert metadata.calls == [False] and hook.cancels == []


def test_gives_up_when_the_change_never_commits():
    metadata, hook = FakeMetadata(*[None] * 1000), FakeHook()
    import airflow_training_provider.listeners as listeners

    original, listeners.COMMIT_WAIT = listeners.COMMIT_WAIT, 0.0
    try:
        assert listener(metadata, hook).handle(MARK) is None
    finally:
        listeners.COMMIT_WAIT = original
    assert hook.cancels == []


def test_a_failed_cancel_is_logged_for_the_reaper(caplog):
    from airflow_training_provider.errors import TrainingPlatformError

    metadata, hook, confirms = FakeMetadata(ACT, ACT), FakeHook(cancel=TrainingPlatformError("refused")), []
    with caplog.at_level(logging.INFO):
        listener(metadata, hook, confirms).handle(MARK)
    assert "orphan reaper will cancel it" in caplog.text and confirms == []


def test_a_job_that_already_ended_is_not_confirmed():
    ended = CancelResult(job_id="job_a", state=JobState.SUCCEEDED, already_terminal=True)
    metadata, hook, confirms = FakeMetadata(ACT, ACT), FakeHook(cancel=ended), []
    listener(metadata, hook, confirms).handle(MARK)
    assert len(hook.cancels) == 1 and confirms == []


def test_confirm_logs_the_final_state(caplog):
    with caplog.at_level(logging.WARNING):
        MarkFailedListener.confirm(FakeHook(), CancelResult(job_id="job_a", state=JobState.STOPPING), ACT)
    assert "job job_a cancelled" in caplog.text


@pytest.mark.parametrize(
    ("previous_state", "error"),
    [("running", MANUAL), (None, "TaskInstance's state was manually set to `success`.")],
)
def test_other_calls_never_reach_the_threads(previous_state, error):
    submitted = []
    MarkFailedListener(FakeMetadata(), submit=lambda *a: submitted.append(a) or True).on_task_instance_failed(
        previous_state, ti(), error
    )
    assert submitted == []


def test_turned_off_by_configuration(monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING_PROVIDER__MARK_FAILED_LISTENER", "False")
    submitted = []
    MarkFailedListener(FakeMetadata(), submit=lambda *a: submitted.append(a) or True).on_task_instance_failed(
        None, ti(), MANUAL
    )
    assert submitted == []


def test_a_full_queue_or_an_error_never_fails_the_request(caplog):
    full = MarkFailedListener(FakeMetadata(), submit=lambda *a: False)
    with caplog.at_level(logging.ERROR):
        full.on_task_instance_failed(None, ti(), MANUAL)
    assert "left to the orphan reaper" in caplog.text

    def boom(*a):
        raise RuntimeError("boom")

    MarkFailedListener(FakeMetadata(), submit=boom).on_task_instance_failed(None, ti(), MANUAL)  # no raise


def test_the_default_workers_run_it_off_the_calling_thread():
    import threading

    from airflow_training_provider.listeners import _DaemonWorkers

    done, where = threading.Event(), []
    workers = _DaemonWorkers("test-listener", 1, capacity=1)
    assert workers.submit(lambda: (where.append(threading.current_thread()), done.set()))
    assert done.wait(5) and where[0] is not threading.current_thread() and where[0].daemon


def test_the_plugin_registers_the_listener():
    from airflow_training_provider.ui.plugin import TrainingJobViewPlugin

    assert TrainingJobViewPlugin.listeners == [LISTENER]
    assert hasattr(LISTENER.on_task_instance_failed, "airflow_impl")  # pluggy's hookimpl mark


def test_warm_up_only_in_the_api_server(monkeypatch):
    import sys
    import threading

    from airflow_training_provider.listeners import warm_up

    started = []
    monkeypatch.setattr(threading.Thread, "start", lambda self: started.append(self.name))
    monkeypatch.delitem(sys.modules, "airflow.api_fastapi.main", raising=False)
    warm_up()
    assert started == []
    monkeypatch.setitem(sys.modules, "airflow.api_fastapi.main", object())
    warm_up()
    assert started == ["training-mark-failed-warm-up"]
