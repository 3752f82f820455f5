"""Submit operator, sensor and trigger end to end in this process: execute → TaskDeferred →
trigger.run() → execute_complete (or the worker-side wait), against the local platform."""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowTaskTimeout, TaskDeferralError, TaskDeferralTimeout

from airflow_training_platform.platforms.together.wire import events_to_wire
from airflow_training_provider.cancellation import GiveUp
from airflow_training_provider.hooks.transport import RetryPolicy
from airflow_training_provider.job_task import (
    LostContactWithPlatform,
    TrainingJobCancelledByAirflow,
    TrainingJobFailed,
)
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.platforms.together import TogetherDialect
from airflow_training_provider.sensors.training_job import TrainingJobSensor
from airflow_training_provider.testing.inprocess import (
    InMemoryAirflow,
    TaskInstanceRecord,
    first_event,
    run_task,
    task_context,
)
from airflow_training_provider.triggers.training_job import TrainingJobTrigger

FAST = {"seconds_per_epoch": 0.2}


def tensorone_spec(epochs: int = 2, **training) -> dict:
    name = f"ip-{uuid.uuid4().hex[:8]}"
    return {
        "name": name,
        "datasetId": "digits",
        "config": {"training": {"epochs": epochs, **FAST, **training}},
    }


def together_spec(epochs: int = 2) -> dict:
    return {
        "model": "local/mlp-1b",
        "training_file": "file-digits",
        "n_epochs": epochs,
        "n_checkpoints": 1,
        "learning_rate": 0.001,
        "suffix": uuid.uuid4().hex[:8],
        "x_local": FAST,
    }


def sagemaker_spec(epochs: int = 2, **hyper) -> dict:
    return {
        "RoleArn": "arn:aws:iam::123456789012:role/InProcess",
        "AlgorithmSpecification": {"TrainingImage": "local/digits-mlp:1"},
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://d/digits/"}},
            }
        ],
        "OutputDataConfig": {"S3OutputPath": "s3://ip/output"},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "CheckpointConfig": {"S3Uri": f"s3://ip/checkpoints/{uuid.uuid4().hex[:8]}"},
        "HyperParameters": {"epochs": epochs, "seconds_per_epoch": FAST["seconds_per_epoch"], **hyper},
    }


def submit(conn: str, spec: dict, **kwargs) -> SubmitTrainingJobOperator:
    kwargs.setdefault("poll_interval", 0.5)
    return SubmitTrainingJobOperator(task_id="train", conn_id=f"{conn}_local", spec=spec, **kwargs)


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferred", "worker"])
@pytest.mark.parametrize(
    ("conn", "spec"), [("tensorone", tensorone_spec), ("together", together_spec), ("aws", sagemaker_spec)]
)
def test_submit_and_wait_succeeds_the_same_way_deferred_or_on_the_worker(
    control, conn, spec, deferrable, capfd
):
    op = submit(conn, spec(), deferrable=deferrable)
    ctx = task_context(op)
    result = run_task(op, ctx)
    job = control.job(ctx["ti"].xcoms["job_id"])
    assert job["state"] == "succeeded" and result["state"] == "succeeded"
    assert result["id"] == job["job_id"] and result["console_url"] == ctx["ti"].xcoms["console_url"]
    assert result["checkpoints"] and all(c["path"] for c in result["checkpoints"])
    assert job["checkpoints"] and all(Path(c["path"]).is_file() for c in job["checkpoints"])
    assert ctx["task_state_store"].get("training_job")["job_id"] == job["job_id"]
    # published for people: the job reference (the UI view) and the console link, final job included
    ref = ctx["ti"].xcoms["training_job"]
    assert (
        ref["job_id"] == job["job_id"]
        and ref["conn_id"] == op.conn_id
        and ref["platform"] == result["platform"]
    )
    assert ref["job"] is None and ref["job_in_return_value"]  # the UI reads the job from return_value
    if result["console_url"]:
        assert ctx["ti"].xcoms["_link_TrainingJobConsoleLink"] == result["console_url"] == ref["console_url"]
    if conn == "tensorone":  # no metrics endpoint: one point per epoch from the checkpoints' metrics
        epochs = [p["epoch"] for p in result["metric_history"]]
        assert epochs == [1, 2] and {p["kind"] for p in result["metric_history"]} == {"epoch"}
        last = result["metric_history"][-1]["values"]
        assert last["validation_accuracy"] == pytest.approx(job["metrics"]["val_accuracy"])
        assert set(last) >= {"loss", "accuracy", "validation_loss", "validation_accuracy"}
    if conn == "together":  # every platform event in the task log, once, in order
        captured = capfd.readouterr()
        logged = re.findall(r"Platform event \S+ \[(\w+)\] (.*?) \[", captured.out + captured.err)
        served = [(e.type, e.message) for e in TogetherDialect().parse_events(together_events(job))]
        assert logged == [(t, m) for t, m in served]
        assert logged[-1][0] == "job_complete"
        # the metric history comes from the metrics endpoint: one evaluation per epoch, the job's own
        evals = [p for p in result["metric_history"] if p["kind"] == "eval"]
        assert [p["epoch"] for p in evals] == [1.0, 2.0]
        assert evals[-1]["values"]["validation_accuracy"] == pytest.approx(job["metrics"]["val_accuracy"])
        assert result["metrics"]["validation_accuracy"] == evals[-1]["values"]["validation_accuracy"]
        assert result["metric_history"][-1]["step"] == job["progress"]["total_steps"]


@pytest.mark.slow  # waits out three Retry-After answers (about 6 s)
def test_sagemaker_create_throttled_three_times_makes_exactly_one_job(control):
    op = submit("aws", sagemaker_spec(), deferrable=True)
    rule = control.add_fault(
        method="POST", path_prefix="/", header="X-Amz-Target", header_value="SageMaker.CreateTrainingJob",
        body_contains=op.spec["CheckpointConfig"]["S3Uri"], status=400, code="ThrottlingException", count=3,
    )  # fmt: skip
    op.hook.retry_policy = RetryPolicy(initial_backoff=0.1, max_backoff=0.2)
    ctx = task_context(op, run_id="throttled")
    result = run_task(op, ctx)
    assert control.fault(rule["id"])["fired"] == 3
    jobs = control.jobs(tags=["airflow-run:throttled"], platform="sagemaker")
    assert [j["job_id"] for j in jobs] == [result["id"]] and result["state"] == "succeeded"


@pytest.mark.slow
def test_sagemaker_max_runtime_stops_the_job_and_fails_the_task(control):
    spec = sagemaker_spec(epochs=300)
    spec["StoppingCondition"] = {"MaxRuntimeInSeconds": 6}  # past the trainer's start, even on a busy machine
    op = submit("aws", spec, deferrable=True)
    ctx = task_context(op, run_id="max-runtime")
    with pytest.raises(TrainingJobFailed, match="MaxRuntimeExceeded"):
        run_task(op, ctx)
    job = control.job(ctx["ti"].xcoms["job_id"])
    assert job["state"] == "cancelled" and job["cancel"]["initiator"] == "platform"
    assert [c for c in job["checkpoints"] if c["kind"] == "final"], (
        "the SIGTERM grace saved a final checkpoint"
    )


def test_a_failed_job_fails_the_task_with_the_platform_reason(control):
    op = submit("tensorone", tensorone_spec(learning_rate=-0.5), deferrable=True)
    with pytest.raises(TrainingJobFailed, match="learning_rate"):
        run_task(op, task_context(op))


@pytest.mark.parametrize(
    ("limit", "exception", "why"),
    [
        ({"execution_timeout": timedelta(seconds=5)}, AirflowTaskTimeout, GiveUp.EXECUTION_TIMEOUT),
        pytest.param(
            {"defer_timeout": 5, "execution_timeout": timedelta(minutes=5)},
            TaskDeferralTimeout,
            GiveUp.DEFER_TIMEOUT,
            marks=pytest.mark.slow,
        ),
    ],
    ids=["execution_timeout", "defer_timeout"],
)
def test_a_deferred_timeout_cancels_once_at_the_deadline(control, limit, exception, why):
    """Both timeouts are the trigger's deadline: Airflow checks its own deferral timeout only every
    15 s, then a worker has to start before anything is cancelled."""
    op = submit("tensorone", tensorone_spec(epochs=300), deferrable=True, **limit)
    ctx = task_context(op)
    started = time.time()
    with pytest.raises(exception) as raised:
        run_task(op, ctx)
    assert str(raised.value).endswith(
        "TensorOne training job " + ctx["ti"].xcoms["job_id"] + " was cancelled"
    )
    job = control.wait_job(ctx["ti"].xcoms["job_id"], {"cancelled"})
    (cancel,) = control.accepted_cancels(job)
    assert cancel["reason"] == why.value and cancel["create_final_checkpoint"] is True
    assert 4.5 <= cancel["received_at"] - started <= 12, "the trigger cancels at the deadline"
    assert [c for c in job["checkpoints"] if c["kind"] == "final"]
    assert ctx["ti"].xcoms["cancel_result"]["final_checkpoint_id"] == "ckpt_final"


def test_on_the_worker_the_wait_itself_cancels_just_before_execution_timeout(control):
    """Not left to Airflow's SIGALRM (whose handler can hang on a logging lock, so ``on_kill`` never
    runs): here no alarm is armed at all, and the job is still cancelled, a second before the deadline."""
    op = submit(
        "tensorone", tensorone_spec(epochs=300), poll_interval=timedelta(seconds=30),
        execution_timeout=timedelta(seconds=5),
    )  # fmt: skip
    ctx = task_context(op)
    started = time.time()
    with pytest.raises(AirflowTaskTimeout, match="was cancelled"):
        run_task(op, ctx)
    assert time.time() - started < 5, "the task ended before Airflow's alarm would fire"
    job = control.wait_job(ctx["ti"].xcoms["job_id"], {"cancelled"})
    (cancel,) = control.accepted_cancels(job)
    assert cancel["reason"] == GiveUp.EXECUTION_TIMEOUT.value
    assert 3.5 <= cancel["received_at"] - started <= 4.8, "cancelled at the deadline less 1 s (a fifth)"


def test_a_crashed_trigger_cancels_the_job_it_watched_when_the_worker_resumes(control):
    """``__fail__`` (a trigger crash, or Airflow's own deferral timeout as a backstop): the job id
    comes from XCom, the cancel from the policy, and the failure names the platform and the job."""
    op = submit("tensorone", tensorone_spec(epochs=300), wait_for_completion=False)
    ctx = task_context(op)
    job_id = run_task(op, ctx)["id"]
    resumed = submit("tensorone", op.spec, deferrable=True)
    ti = ("inprocess", ctx["run_id"], "train", -1)
    with InMemoryAirflow({ti: TaskInstanceRecord("running", job_id)}).installed():
        with pytest.raises(TaskDeferralError) as raised:
            resumed.resume_execution("__fail__", {"error": "Trigger failure"}, ctx)
    assert str(raised.value).startswith(
        f"Trigger failure while waiting on TensorOne training job {job_id}: the job was cancelled (state cancelled"
    )
    (cancel,) = control.accepted_cancels(control.job(job_id))
    assert cancel["reason"] == GiveUp.DEFERRAL_FAILED.value and cancel["preserve_checkpoints"] is True


def test_a_sensor_past_its_execution_timeout_never_cancels_the_job_it_watches(control):
    owner = submit("tensorone", tensorone_spec(epochs=300), wait_for_completion=False)
    job_id = run_task(owner, task_context(owner))["id"]
    try:
        sensor = TrainingJobSensor(
            task_id="watch",
            conn_id="tensorone_local",
            job_id=job_id,
            deferrable=True,
            poll_interval=timedelta(seconds=0.5),
            execution_timeout=timedelta(seconds=3),
        )
        with pytest.raises(AirflowTaskTimeout, match="cancel_on_kill is off"):
            run_task(sensor, task_context(sensor))
        job = control.job(job_id)
        assert job["state"] in ("starting", "running") and job["cancel_requests"] == []
    finally:
        control_cancel(control, job_id)


def test_a_retry_re_attaches_to_the_running_job_instead_of_submitting(control):
    op = submit("tensorone", tensorone_spec(epochs=2), deferrable=True, retries=1)
    first = task_context(op)
    op_first = submit("tensorone", op.spec, wait_for_completion=False, retries=1)
    job_id = run_task(op_first, first)["id"]
    retry = task_context(op, try_number=2, state=first)
    result = run_task(op, retry)
    assert result["id"] == job_id and result["state"] == "succeeded"
    assert len(control.jobs(name=op.spec["name"])) == 1, "no second submit"


def test_a_try_after_a_clear_cancels_the_old_job_then_submits_one(control):
    spec = tensorone_spec(epochs=300)
    first = task_context(submit("tensorone", spec))
    old_id = run_task(submit("tensorone", spec, wait_for_completion=False), first)["id"]
    control.wait_job(old_id, {"running"})
    op = submit("tensorone", spec, wait_for_completion=False)
    op.polling = op.polling.model_copy(update={"clear_grace": 1.0})
    new_id = run_task(op, task_context(op, try_number=2, cleared=True, state=first))["id"]
    old = control.job(old_id)
    assert new_id != old_id and old["state"] == "cancelled"
    assert [c["reason"] for c in control.accepted_cancels(old)] == [GiveUp.CLEARED.value]
    assert control.job(new_id)["created_at"] >= old["finished_at"], "never two jobs at once"
    control_cancel(control, new_id)


class LockedLog:
    """A logger whose every call takes one non-reentrant lock, as structlog's write to the task's
    log file does. Airflow runs ``on_kill`` in its SIGTERM handler on the main thread, which the
    signal may have interrupted inside a write: a log call from ``on_kill`` then waits forever."""

    def __init__(self, real) -> None:
        self.real, self.lock, self.holder = real, threading.Lock(), None

    def __getattr__(self, name):
        method = getattr(self.real, name)

        def locked(*args, **kwargs):
            if self.holder == threading.get_ident():
                raise AssertionError(f"log.{name}() from on_kill while the log lock is held: a deadlock")
            with self.lock:
                return method(*args, **kwargs)

        return locked


def test_worker_on_kill_cancels_and_stops_execute(control, capfd):
    op = submit("tensorone", tensorone_spec(epochs=300), deferrable=False)
    op._cached_logger = log = LockedLog(op.log)
    ctx = task_context(op)
    outcome: dict = {}

    def run():
        try:
            run_task(op, ctx)
        except BaseException as exc:  # noqa: BLE001 - the assertion below says which
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    job_id = wait_for_xcom(ctx, "job_id")
    control.wait_job(job_id, {"running"})
    with log.lock:  # the signal interrupted a log write
        log.holder = threading.get_ident()
        op.on_kill()
        log.holder = None
    thread.join(60)
    assert isinstance(outcome.get("error"), TrainingJobCancelledByAirflow), outcome
    assert f"Task killed: cancel of training job {job_id} requested" in "".join(capfd.readouterr())
    job = control.job(job_id)
    (cancel,) = control.accepted_cancels(job)
    assert job["state"] == "cancelled" and cancel["reason"] == GiveUp.WORKER_KILLED.value
    assert ctx["ti"].xcoms["cancel_result"]["state"] == "cancelled"


def test_an_outage_beyond_the_budget_fails_the_task_and_leaves_the_job_alone(control):
    op = submit("tensorone", tensorone_spec(epochs=300), deferrable=True, outage_budget=2)
    ctx = task_context(op)
    job_id = run_task(submit("tensorone", op.spec, wait_for_completion=False), ctx)["id"]
    prefix = f"/v2/training/jobs/{job_id}"
    control.add_fault(method="GET", path_prefix=prefix, status=503, count=-1)
    try:
        trigger = TrainingJobTrigger(
            conn_id="tensorone_local", job_id=job_id, outage_budget=2, poll_interval=0.5
        )
        event = asyncio.run(first_event(trigger))
    finally:
        control.clear_faults(prefix)
    assert event.payload["status"] == "lost_contact"
    with pytest.raises(LostContactWithPlatform, match="NOT cancelled"):
        op.execute_complete(ctx, event.payload)
    job = control.job(job_id)
    assert job["state"] in ("starting", "running") and job["cancel_requests"] == []
    control_cancel(control, job_id)


def together_events(record: dict) -> dict:
    """The events the Together API serves for a job record."""
    return {"data": events_to_wire(record)}


def wait_for_xcom(ctx: dict, key: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while key not in ctx["ti"].xcoms:
        assert time.monotonic() < deadline, f"{key} never pushed"
        time.sleep(0.05)
    return ctx["ti"].xcoms[key]


def control_cancel(control, job_id: str) -> None:
    """Clean up a long job through the platform's API (not a provider cancel)."""
    from airflow_training_provider.hooks.training import TrainingPlatformHook

    TrainingPlatformHook("tensorone_local").cancel_job(job_id)
