"""How a task ends from each wait outcome (= each trigger event kind), and parameter checking.
No platform is reached: the connection id names no connection, so any call would fail loudly."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowTaskTimeout,
    TaskDeferralError,
    TaskDeferralTimeout,
)

from airflow_training_provider.job_task import LostContactWithPlatform, TrainingJobFailed, log_cancel
from airflow_training_provider.lifecycle.waiting import DeadlineReached, JobFinished, LostContact, PollFailed
from airflow_training_provider.models import (
    Checkpoint,
    JobState,
    TrainingJob,
    complete_cancel_result,
    no_cancel_needed,
)
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.sensors.training_job import TrainingJobSensor
from airflow_training_provider.testing.inprocess import task_context

NO_CONN = "no_such_connection"


def job(state: JobState, message: str | None = None) -> TrainingJob:
    return TrainingJob(id="j1", platform="tensorone", state=state, raw_status=state.value, message=message)


def operator(**kwargs) -> SubmitTrainingJobOperator:
    return SubmitTrainingJobOperator(task_id="t", conn_id=NO_CONN, spec={"name": "n"}, **kwargs)


def complete(op, outcome):
    return op.execute_complete(task_context(op), outcome.model_dump(mode="json"))


def test_a_succeeded_job_is_the_return_value():
    result = complete(operator(), JobFinished(job_id="j1", job=job(JobState.SUCCEEDED)))
    assert result["id"] == "j1" and result["state"] == "succeeded"


@pytest.mark.parametrize(
    ("state", "message", "expected"),
    [
        (
            JobState.FAILED,
            "CUDA out of memory",
            "TensorOne training job j1 failed: CUDA out of memory (platform status failed)",
        ),
        (
            JobState.CANCELLED,
            "billing_limit: no money",
            "TensorOne training job j1 was cancelled outside Airflow (platform status cancelled): "
            "billing_limit: no money",
        ),
    ],
)
def test_a_failed_or_outside_cancelled_job_fails_the_task_saying_why(state, message, expected):
    with pytest.raises(TrainingJobFailed, match=expected.replace("(", r"\(").replace(")", r"\)")):
        complete(operator(), JobFinished(job_id="j1", job=job(state, message)))


def test_lost_contact_fails_the_task_with_its_message():
    with pytest.raises(LostContactWithPlatform, match="NOT cancelled"):
        complete(operator(), LostContact(job_id="j1", message="Lost contact ... the job was NOT cancelled"))


def test_a_refused_poll_fails_the_task_with_its_message():
    with pytest.raises(AirflowException, match="job j1 not found"):
        complete(
            operator(), PollFailed(job_id="j1", message="Polling training job j1 failed: job j1 not found")
        )


def test_a_sensor_past_its_deadline_times_out_without_touching_the_job():
    sensor = TrainingJobSensor(task_id="s", conn_id=NO_CONN, job_id="j1", deferrable=True)
    outcome = DeadlineReached(job_id="j1", message="execution_timeout reached", job=job(JobState.RUNNING))
    with pytest.raises(AirflowTaskTimeout, match="cancel_on_kill is off"):
        complete(sensor, outcome)  # a cancel would need the (missing) connection


def test_durations_take_timedeltas_and_bad_values_name_the_parameter():
    op = operator(poll_interval=timedelta(seconds=2), outage_budget=timedelta(minutes=5), defer_timeout=90)
    assert (op.polling.poll_interval, op.polling.outage_budget, op.defer_timeout) == (2.0, 300.0, 90.0)
    with pytest.raises(ValueError, match="parameter 'poll_interval'"):
        operator(poll_interval=0)
    with pytest.raises(ValueError, match="parameter 'confirm_cancel_timeout'"):
        operator(confirm_cancel_timeout="soon")
    with pytest.raises(ValueError, match="parameter 'defer_timeout'"):
        operator(defer_timeout=-5)


def test_conn_id_is_required():
    with pytest.raises(TypeError, match="conn_id"):
        SubmitTrainingJobOperator(task_id="t", spec={})


@pytest.mark.parametrize(
    ("error", "exception"), [("Trigger failure", TaskDeferralError), ("Trigger timeout", TaskDeferralTimeout)]
)
def test_a_failed_deferral_names_the_platform_the_job_and_what_became_of_it(error, exception, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", '{"conn_type": "aws", "login": "AKIAX", "password": "s"}')
    sensor = TrainingJobSensor(task_id="s", conn_id="aws_default", job_id="churn-1-t1", deferrable=True)
    kwargs = {"error": error, "traceback": ["Traceback (most recent call last):", "KeyError: 'x'"]}
    with pytest.raises(exception) as raised:
        sensor.resume_execution("__fail__", kwargs, task_context(sensor))
    assert str(raised.value) == (
        f"{error} while waiting on AWS SageMaker training job churn-1-t1: the job was left running "
        "(Airflow gave up waiting (trigger timeout or failure), but cancel_on_kill is off: the job keeps running)"
    )


def test_execution_timeout_counts_from_the_try_start_not_from_execute():
    from datetime import UTC, datetime
    from types import SimpleNamespace

    op = operator(execution_timeout=timedelta(seconds=25))
    started = datetime.now(UTC) - timedelta(seconds=7)  # the worker took 7 s to reach execute()
    deadline = op.deadline_from_now({"ti": SimpleNamespace(start_date=started)})
    assert deadline == pytest.approx(started.timestamp() + 25, abs=1e-6)
    assert op.deadline_from_now() == pytest.approx(datetime.now(UTC).timestamp() + 25, abs=1)
    assert operator().deadline_from_now({"ti": SimpleNamespace(start_date=started)}) is None


def test_a_succeeded_try_s_record_points_at_its_return_value_instead_of_repeating_it():
    from airflow_training_provider.links import try_record_key

    op = operator()
    context = task_context(op, try_number=3)
    result = op.execute_complete(context, JobFinished(job_id="j1", job=job(JobState.SUCCEEDED)).model_dump())
    record = context["task_state_store"].get(try_record_key(3))
    assert result["id"] == "j1" and result["state"] == "succeeded"
    assert record["try_number"] == 3 and record["job_id"] == "j1"
    assert record["job"] is None and record["job_in_return_value"] is True
    assert record == context["ti"].xcoms["training_job"]


def test_a_failed_try_keeps_its_bounded_job_in_its_record_or_none_when_too_big_for_the_store(monkeypatch):
    from airflow_training_provider.links import try_record_key
    from airflow_training_provider.models import MetricPoint

    op = operator()
    history = [
        MetricPoint(step=i, kind="train", epoch=i / 10, values={"loss": 1 / (i + 1)}) for i in range(500)
    ]
    failed = job(JobState.FAILED).model_copy(update={"metric_history": history, "message": "x" * 10_000})
    context = task_context(op, try_number=1)
    with pytest.raises(TrainingJobFailed):
        op.execute_complete(context, JobFinished(job_id="j1", job=failed).model_dump(mode="json"))
    record = context["task_state_store"].get(try_record_key(1))
    assert record["job"]["id"] == "j1" and record["job_in_return_value"] is False
    assert len(record["job"]["metric_history"]) == 50 and record["job"]["omitted"] == {"metric_history": 450}
    assert 3990 <= len(record["job"]["message"]) <= 4000 and record["job"]["message"].endswith(
        "characters cut]"
    )

    monkeypatch.setenv("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "2000")
    context = task_context(op, try_number=2)
    with pytest.raises(TrainingJobFailed):
        op.execute_complete(context, JobFinished(job_id="j1", job=failed).model_dump(mode="json"))
    record = context["task_state_store"].get(try_record_key(2))
    assert record["job"] is None and record["job_id"] == "j1"  # the UI asks the platform for it
    assert len(context["ti"].xcoms["training_job"]["job"]["metric_history"]) == 50  # XCom: bounded


@pytest.mark.parametrize(
    ("checkpoints", "tail"),
    [
        (
            [Checkpoint(id="checkpoints", kind="location", path="s3://kp/ck/run-1")],
            "; final checkpoint None (s3://kp/ck/run-1)",
        ),
        ([], ""),
    ],
)
def test_a_cancel_that_found_the_job_ended_still_names_its_checkpoint(checkpoints, tail, caplog):
    # K5 deferred: the trigger stopped the job at the deadline; the resumed task finds it Stopped
    stopped = TrainingJob(
        id="j1", platform="aws", state=JobState.CANCELLED, raw_status="Stopped", checkpoints=checkpoints
    )
    result = no_cancel_needed(stopped)
    assert result is not None
    with caplog.at_level(logging.INFO, logger="kp.task"):
        log_cancel(logging.getLogger("kp.task"), complete_cancel_result(result, stopped), stopped)
    assert caplog.messages == [f"Training job j1 had already ended (cancelled); nothing to cancel{tail}"]
