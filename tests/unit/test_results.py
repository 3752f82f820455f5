"""A finished job's result always reaches the user: non-finite numbers as data, bounded results,
what travels from a platform into Airflow's database made safe (``json_values``, ``results``)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import pytest

from airflow_training_provider.json_values import (
    EVENT_MESSAGE_CHARS,
    MESSAGE_CHARS,
    bounded_text,
    dump,
    json_value,
    non_finite_metrics,
)
from airflow_training_provider.lifecycle.guards import EarlyStopping, early_stop
from airflow_training_provider.lifecycle.waiting import JobFinished, outcome_payload, parse_outcome
from airflow_training_provider.models import (
    Checkpoint,
    Cost,
    JobEvent,
    JobState,
    MetricPoint,
    TrainingJob,
    best_checkpoint,
)
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.progress import JobReport, diverged_text
from airflow_training_provider.results import (
    RESULT_BYTES,
    RESULT_CHECKPOINTS,
    RESULT_EVENTS,
    RESULT_HISTORY_POINTS,
    bounded_job,
    result_size,
)
from airflow_training_provider.testing.inprocess import as_stored, task_context

NAN, INF = math.nan, math.inf


def long_job(epochs: int, state: JobState = JobState.SUCCEEDED, metrics_per_point: int = 4) -> TrainingJob:
    """A TensorOne-like finished job of ``epochs`` epochs: a checkpoint and a metric point per epoch
    (the metrics saved with each checkpoint), an event per checkpoint, the final checkpoint last."""
    names = ["loss", "accuracy", "validation_loss", "validation_accuracy", *(f"m{i}" for i in range(60))]
    values = {name: 1 / (i + 2) for i, name in enumerate(names[:metrics_per_point])}
    at = datetime(2026, 12, 1, tzinfo=UTC)
    checkpoints = [
        Checkpoint(
            id=f"ckpt_epoch_{e}",
            epoch=e,
            step=e * 45,
            kind="final" if e == epochs else "automatic",
            path=f"/data/platform/jobs/job_0123456789/checkpoints/ckpt_epoch_{e}.joblib",
            metrics={**values, "validation_loss": 1 / (e + 1)} if "validation_loss" in values else values,
            created_at=at,
        )
        for e in range(1, epochs + 1)
    ]
    return TrainingJob(
        id="job_0123456789",
        platform="tensorone",
        state=state,
        raw_status=state.value,
        name="digits-20261201",
        message=None if state is JobState.SUCCEEDED else "CUDA out of memory",
        metrics=values,
        checkpoints=checkpoints,
        metric_history=[MetricPoint(step=e * 45, kind="epoch", epoch=e, values=values) for e in range(1, epochs + 1)],
        events=[JobEvent(type="checkpoint_save", message=f"saved ckpt_epoch_{e}", created_at=at) for e in range(1, epochs + 1)],
        cost=Cost(total_usd=12.5),
        console_url="https://console.tensorone.ai/training/jobs/job_0123456789",
        tags=["airflow-dag:d", "airflow-task:t"],
        created_at=at,
    )  # fmt: skip


# -- non-finite numbers ---------------------------------------------------------------------------
def test_nan_and_infinity_are_written_as_their_names_and_read_back_as_floats():
    job = TrainingJob(
        id="j",
        platform="together",
        state=JobState.SUCCEEDED,
        raw_status="completed",
        metrics={"loss": NAN, "validation_loss": INF, "grad_norm": -INF, "accuracy": 0.5},
        metric_history=[MetricPoint(step=1, epoch=1, values={"loss": NAN})],
    )
    stored = as_stored(dump(job))  # strict JSON, as PostgreSQL takes it
    assert stored["metrics"] == {
        "loss": "NaN",
        "validation_loss": "Infinity",
        "grad_norm": "-Infinity",
        "accuracy": 0.5,
    }
    again = TrainingJob.model_validate(stored)
    assert math.isnan(again.metrics["loss"]) and again.metrics["validation_loss"] == INF
    assert again.metrics["grad_norm"] == -INF and math.isnan(again.metric_history[0].values["loss"])
    assert (
        non_finite_metrics(stored["metrics"])
        == non_finite_metrics(job.metrics)
        == {
            "loss": "NaN",
            "validation_loss": "Infinity",
            "grad_norm": "-Infinity",
        }
    )


def test_a_trigger_event_with_nan_metrics_round_trips_through_strict_json():
    job = TrainingJob(
        id="j", platform="tensorone", state=JobState.SUCCEEDED, raw_status="completed", metrics={"loss": NAN}
    )
    with pytest.raises(ValueError, match="Out of range float"):
        as_stored(JobFinished(job_id="j", job=job).model_dump(mode="json"))  # what broke before
    outcome = parse_outcome(as_stored(outcome_payload(JobFinished(job_id="j", job=job))))
    assert math.isnan(outcome.job.metrics["loss"])


def test_a_diverged_run_succeeds_and_its_log_names_the_metric(caplog):
    op = SubmitTrainingJobOperator(task_id="t", conn_id="no_such_connection", spec={"name": "n"})
    job = TrainingJob(
        id="j1",
        platform="tensorone",
        state=JobState.SUCCEEDED,
        raw_status="completed",
        metrics={"loss": NAN, "validation_loss": INF, "accuracy": 0.1},
    )
    context = task_context(op)
    with caplog.at_level("WARNING"):
        result = op.execute_complete(context, as_stored(outcome_payload(JobFinished(job_id="j1", job=job))))
    assert result["state"] == "succeeded" and result["metrics"]["loss"] == "NaN"
    assert as_stored(result) == result
    assert (
        diverged_text(job)
        == "metric loss is NaN, validation_loss is Infinity: the run diverged (training job j1)"
    )


def test_the_progress_log_says_once_that_a_metric_went_nan_and_an_unchanged_nan_is_no_change():
    lines: list[tuple[str, str]] = []

    class Log:
        def info(self, msg, *args):
            lines.append(("info", msg % args))

        def warning(self, msg, *args):
            lines.append(("warning", msg % args))

    report = JobReport(Log())  # type: ignore[arg-type]
    running = dict(id="j1", platform="together", state=JobState.RUNNING, raw_status="running")
    assert report.progress(TrainingJob(**running, metrics={"loss": 0.5}))
    assert report.progress(TrainingJob(**running, metrics={"loss": NAN}))
    assert not report.progress(TrainingJob(**running, metrics={"loss": float("nan")}))  # a new NaN object
    assert [level for level, _ in lines] == ["info", "info", "warning"]
    assert lines[1][1].endswith("loss nan") and "loss is NaN: the run diverged" in lines[2][1]


def test_early_stopping_never_takes_a_nan_epoch_as_the_best_and_stops_a_diverged_run():
    rule = EarlyStopping(metric="validation_loss", mode="min", patience=2)
    history = [
        MetricPoint(step=e, kind="epoch", epoch=e, values={"validation_loss": v})
        for e, v in enumerate([0.9, 0.5, NAN, INF], start=1)
    ]
    stop = early_stop(rule, history)
    assert stop is not None and stop.best_epoch == 2 and stop.best_value == 0.5
    assert "now Infinity: the run diverged" in stop.reason
    assert early_stop(rule, history[:3]) is None  # one diverged epoch: patience 2 not yet spent
    never = [MetricPoint(step=e, kind="epoch", epoch=e, values={"validation_loss": NAN}) for e in (1, 2)]
    stop = early_stop(rule, never)
    assert stop is not None and stop.best_epoch is None and "never finite" in stop.reason
    assert stop.succeed is False  # no model to keep: the task fails
    assert as_stored(dump(stop))["metric_value"] == "NaN"


def test_a_non_finite_cost_is_unknown_and_the_best_checkpoint_is_never_a_nan_one():
    assert Cost(total_usd=NAN, estimated_total_usd=INF, billable_seconds=12).model_dump() == {
        "total_usd": None,
        "estimated_total_usd": None,
        "breakdown_usd": {},
        "billable_seconds": 12.0,
    }
    checkpoints = [
        Checkpoint(id="a", epoch=1, metrics={"validation_loss": 0.4}),
        Checkpoint(id="b", epoch=2, metrics={"validation_loss": NAN}),
        Checkpoint(id="c", epoch=3, metrics={"validation_loss": -INF}),
    ]
    assert best_checkpoint(checkpoints).id == "a"


# -- what else travels from the platform -------------------------------------------------------------
def test_nul_characters_and_lone_surrogates_are_cleaned_and_long_texts_cut():
    assert json_value({"a\x00": ["x\x00y", "bad \udcff byte"]}) == {"a": ["xy", "bad \ufffd byte"]}
    cut = bounded_text("x" * 100_000, 500)
    assert len(cut) <= 500 and cut.endswith("characters cut]") and "99" in cut
    job = TrainingJob(
        id="j",
        platform="pai",
        state=JobState.FAILED,
        raw_status="Failed",
        message="Traceback\x00 " + "y" * 1_000_000,
        events=[JobEvent(type="log", message="z" * 100_000 + "\udcfe")],
    )
    assert len(job.message) <= MESSAGE_CHARS and len(job.events[0].message) <= EVENT_MESSAGE_CHARS
    stored = as_stored(dump(job))
    assert "\x00" not in json.dumps(stored) and stored["message"].startswith("Traceback ")


# -- bounded results -----------------------------------------------------------------------------------
def test_a_short_job_is_returned_whole():
    job = long_job(5)
    assert bounded_job(job) is job and job.omitted == {}


@pytest.mark.parametrize("epochs", [10, 1_000, 10_000])
def test_the_bytes_a_finished_task_writes_stay_within_the_budget_at_any_length(epochs, capsys):
    """Everything a finished task writes into the metadata database for its job: the trigger event
    (``next_kwargs``), the return value, the job reference (XCom ``training_job``) and this try's
    record in the task state store, and the small XComs (job id, console link)."""
    job = long_job(epochs)
    op = SubmitTrainingJobOperator(task_id="t", conn_id="no_such_connection", spec={"name": "n"})
    context = task_context(op)
    event = as_stored(outcome_payload(JobFinished(job_id=job.id, job=job)))
    result = op.execute_complete(context, event)
    written = {
        "trigger event": event,
        "return value": as_stored(result),
        **{f"XCom {k}": v for k, v in context["ti"].xcoms.items()},
        **{f"state store {k}": v for k, v in context["task_state_store"].values.items()},
    }
    sizes = {name: len(json.dumps(value, separators=(",", ":")).encode()) for name, value in written.items()}
    total = sum(sizes.values())
    whole = len(json.dumps(dump(job), separators=(",", ":")).encode())
    print(f"\n{epochs} epochs: the whole job {whole} B; written per task {total} B: {sizes}")
    assert sizes["return value"] <= RESULT_BYTES and sizes["trigger event"] <= RESULT_BYTES + 200
    assert total <= 2 * RESULT_BYTES + 2048  # the event and the return value, and small records
    assert context["ti"].xcoms["training_job"]["job"] is None  # the record does not repeat the result
    assert (
        result["checkpoints"][-1]["kind"] == "final"
        and result["checkpoints"][-1]["id"] == f"ckpt_epoch_{epochs}"
    )
    kept = min(epochs, RESULT_CHECKPOINTS)
    assert len(result["checkpoints"]) == kept and len(result["events"]) == min(epochs, RESULT_EVENTS)
    assert len(result["metric_history"]) == min(epochs, RESULT_HISTORY_POINTS)
    assert result["metric_history"][0]["epoch"] == 1 and result["metric_history"][-1]["epoch"] == epochs
    expected = {
        name: count
        for name, count in {
            "checkpoints": epochs - kept,
            "metric_history": epochs - min(epochs, RESULT_HISTORY_POINTS),
            "events": epochs - min(epochs, RESULT_EVENTS),
        }.items()
        if count
    }
    assert result.get("omitted", {}) == expected


def test_many_metrics_per_point_shrink_the_history_until_the_result_fits():
    job = long_job(400, metrics_per_point=60)
    bounded = bounded_job(job)
    assert result_size(bounded) <= RESULT_BYTES
    assert len(bounded.metric_history) < RESULT_HISTORY_POINTS  # the history goes first
    assert bounded.checkpoints[-1].kind == "final" and bounded.checkpoints[-1].epoch == 400
    assert bounded.omitted["metric_history"] == 400 - len(bounded.metric_history)
    assert bounded_job(bounded).omitted == bounded.omitted  # bounding twice counts once


def test_the_best_checkpoint_is_kept_wherever_it_is():
    job = long_job(50)
    checkpoints = [
        c.model_copy(update={"metrics": {"validation_loss": 0.01 if c.epoch == 7 else 0.5}})
        for c in job.checkpoints
    ]
    kept = bounded_job(job.model_copy(update={"checkpoints": checkpoints})).checkpoints
    assert [c.epoch for c in kept] == [7, *range(41, 51)]


def test_a_cancel_s_nan_final_metrics_survive_the_trigger_event_and_a_huge_error_is_cut():
    from airflow_training_provider.lifecycle.guards import GuardStop
    from airflow_training_provider.lifecycle.waiting import GuardStopped, LostContact
    from airflow_training_provider.models import CancelResult

    cancel = CancelResult(
        job_id="j",
        state=JobState.CANCELLED,
        final_metrics={"loss": NAN, "finalEpoch": 3, "trainingDuration": "44m"},
    )
    stopped = GuardStopped(
        job_id="j",
        job=TrainingJob(id="j", platform="tensorone", state=JobState.CANCELLED, raw_status="cancelled"),
        stop=GuardStop(guard="early_stopping", succeed=True, reason="diverged", metric_value=NAN),
        cancel=cancel,
    )
    payload = as_stored(outcome_payload(stopped))
    assert payload["cancel"]["final_metrics"] == {"loss": "NaN", "finalEpoch": 3, "trainingDuration": "44m"}
    assert payload["stop"]["metric_value"] == "NaN"
    again = parse_outcome(payload)
    assert again.cancel.final_metrics["finalEpoch"] == 3 and math.isnan(again.stop.metric_value)
    lost = LostContact(job_id="j", message="404: " + "x" * 1_000_000)
    assert len(json.dumps(as_stored(outcome_payload(lost)))) < MESSAGE_CHARS + 200


def test_without_a_return_value_the_record_keeps_the_job():
    op = SubmitTrainingJobOperator(
        task_id="t", conn_id="no_such_connection", spec={"name": "n"}, do_xcom_push=False
    )
    context = task_context(op)
    job = long_job(3)
    op.execute_complete(context, as_stored(outcome_payload(JobFinished(job_id=job.id, job=job))))
    record = context["ti"].xcoms["training_job"]
    assert record["job_in_return_value"] is False and record["job"]["id"] == job.id


# -- what the attack on this change found (each: a finished job's answer stays readable) -----------
def test_a_tensorone_poll_with_a_lone_surrogate_escape_is_read():
    from airflow_training_provider.platforms.tensorone import TensorOneDialect

    raw = (
        b'{"jobId": "job_1", "status": "failed", "message": "b\'\\udcff\' is not UTF-8", "name": "r\\udce9"}'
    )
    job = TensorOneDialect().read_poll(raw)
    assert job.state is JobState.FAILED and job.message == "b'\ufffd' is not UTF-8"
    as_stored(dump(job))


def test_an_informational_time_that_does_not_read_or_is_a_sentinel_is_unknown_not_a_broken_job():
    from airflow_training_provider.platforms.tensorone import TensorOneDialect

    body = {
        "jobId": "job_1",
        "status": "completed",
        "timestamps": {
            "createdAt": "2026-12-03T09:00:00Z",
            "startedAt": "0001-01-01T00:00:00Z",  # Go's zero time: "not started", not year 1
            "lastUpdated": "2026-12-03T10:00:00 UTC",
        },
        "checkpoints": [
            {"checkpointId": "c1", "createdAt": "2026-12-31T23:59:60Z"},  # a leap second
            {"checkpointId": "c2", "createdAt": "later"},
        ],
    }
    job = TensorOneDialect().parse_job(body)
    assert job.state is JobState.SUCCEEDED and job.started_at is None and job.updated_at is None
    assert job.created_at == datetime(2026, 12, 3, 9, tzinfo=UTC)
    assert job.checkpoints[0].created_at == datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert job.checkpoints[1].created_at is None


def test_an_infinite_step_makes_the_metrics_answer_malformed_not_a_crash():
    from airflow_training_provider.errors import MalformedResponseError
    from airflow_training_provider.platforms.base import parse_answer
    from airflow_training_provider.platforms.together import TogetherDialect

    dialect = TogetherDialect()
    request = dialect.metrics_request("ft-1")
    with pytest.raises(MalformedResponseError):
        parse_answer(
            request, dialect.parse_metrics, {"metrics": [{"train/global_step": INF, "train/loss": NAN}]}
        )


def test_null_values_where_numbers_belong_are_left_out():
    from airflow_training_provider.platforms.sagemaker import SageMakerDialect

    body = {
        "TrainingJobName": "t1",
        "TrainingJobArn": "arn:aws:sagemaker:us-east-1:1:training-job/t1",
        "TrainingJobStatus": "Completed",
        "SecondaryStatus": "Completed",
        "CreationTime": 1764752400.0,
        "FinalMetricDataList": [{"MetricName": "loss", "Value": None}, {"MetricName": "acc", "Value": 0.9}],
    }
    job = SageMakerDialect().parse_job(body)
    assert job.metrics == {"acc": 0.9}


def test_a_console_link_with_nul_is_stored_cleaned():
    op = SubmitTrainingJobOperator(task_id="t", conn_id="no_such_connection", spec={"name": "n"})
    context = task_context(op)
    job = long_job(2).model_copy(update={"console_url": "https://console/x\x00y"})
    op.execute_complete(context, as_stored(outcome_payload(JobFinished(job_id=job.id, job=job))))
    assert context["ti"].xcoms["_link_TrainingJobConsoleLink"] == "https://console/xy"
