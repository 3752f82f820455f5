"""The TensorOne dialect against the documented payloads (docs/platforms/tensorone.md). Pure logic, no I/O."""

from __future__ import annotations

import logging

import pytest

from airflow_training_provider.errors import (
    InvalidJobSpecError,
    JobNotFoundError,
    JobStateConflictError,
    PlatformAuthError,
)
from airflow_training_provider.models import CancelRequest, JobState
from airflow_training_provider.platforms import get_dialect
from airflow_training_provider.platforms.tensorone import TensorOneDialect, parse_duration

D = TensorOneDialect()

# The create, get and cancel responses of the vendor documentation (docs/platforms/tensorone.md).
CREATE_RESPONSE = {
    "jobId": "job_train_demo1",
    "name": "demo-lora-run",
    "status": "queued",
    "estimatedStartTime": "2025-03-01T10:05:00Z",
    "estimatedDuration": "1h 10m",
    "estimatedCost": {"gpuCost": 9.5, "storageCost": 0.4, "totalCost": 9.9},
    "createdAt": "2025-03-01T10:00:00Z",
}
GET_RESPONSE = {
    "jobId": "job_train_demo1",
    "name": "demo-lora-run",
    "status": "running",
    "progress": {
        "currentEpoch": 1,
        "totalEpochs": 2,
        "currentStep": 300,
        "totalSteps": 800,
        "percentComplete": 37.5,
        "estimatedTimeRemaining": "40m",
    },
    "metrics": {
        "loss": 1.02,
        "validationLoss": 1.10,
        "learningRate": 0.0002,
        "throughput": {"samplesPerSecond": 30.1, "tokensPerSecond": 1500, "stepTime": 1.1},
    },
    "checkpoints": [
        {
            "checkpointId": "ckpt_epoch_1",
            "epoch": 1,
            "step": 400,
            "metrics": {"loss": 1.0},
            "size": "1.1GB",
            "createdAt": "2025-03-01T10:40:00Z",
        }
    ],
    "costs": {
        "currentCost": 3.2,
        "estimatedTotalCost": 9.9,
        "costBreakdown": {"gpuCost": 3.0, "storageCost": 0.2},
    },
    "timestamps": {
        "createdAt": "2025-03-01T10:00:00Z",
        "startedAt": "2025-03-01T10:06:00Z",
        "lastUpdated": "2025-03-01T10:45:00Z",
    },
    "someFutureField": {"anything": True},
}
CANCEL_RESPONSE = {
    "jobId": "job_train_demo1",
    "status": "cancelling",
    "cancellationDetails": {
        "cancelledAt": "2025-03-01T10:50:00Z",
        "reason": "airflow task killed",
        "finalCheckpointCreated": True,
        "finalCheckpointId": "ckpt_final_demo1",
        "resourcesReleased": False,
    },
    "finalMetrics": {"finalEpoch": 1, "finalStep": 350, "finalLoss": 0.98, "trainingDuration": "44m"},
    "costSummary": {
        "totalCost": 3.4,
        "costBreakdown": {"gpuCost": 3.2, "storageCost": 0.2},
        "estimatedSavings": 6.5,
    },
}


def test_create_response_parses():
    job = D.parse_created(CREATE_RESPONSE)
    assert (job.id, job.state, job.raw_status) == ("job_train_demo1", JobState.QUEUED, "queued")
    assert job.cost.estimated_total_usd == 9.9
    assert job.created_at.year == 2025


def test_get_response_parses_progress_metrics_checkpoints_cost():
    job = D.parse_job(GET_RESPONSE)
    assert job.state is JobState.RUNNING
    assert (job.progress.epoch, job.progress.total_epochs, job.progress.step, job.progress.percent) == (
        1,
        2,
        300,
        37.5,
    )
    assert job.progress.eta_seconds == 2400
    assert job.metrics == {"loss": 1.02, "validation_loss": 1.10, "learning_rate": 0.0002}
    assert [c.id for c in job.checkpoints] == ["ckpt_epoch_1"]
    assert job.checkpoints[0].metrics == {"loss": 1.0}
    assert job.cost.total_usd == 3.2 and job.cost.estimated_total_usd == 9.9
    assert job.started_at.hour == 10 and job.started_at.minute == 6


def test_documented_cancel_response_parses():
    result = D.parse_cancel("job_train_demo1", CANCEL_RESPONSE)
    assert result.state is JobState.STOPPING
    assert result.final_checkpoint_id == "ckpt_final_demo1"
    assert result.final_metrics["finalStep"] == 350
    assert result.cost.total_usd == 3.4
    assert result.cost.breakdown_usd == {"gpuCost": 3.2, "storageCost": 0.2}


def test_cancel_request_body_uses_documented_names():
    req = D.cancel_request(
        "job_1", CancelRequest(reason="r", preserve_checkpoints=True, create_final_checkpoint=True)
    )
    assert (req.method, req.path) == ("POST", "/v2/training/jobs/job_1/cancel")
    assert req.body == {
        "reason": "r",
        "preserveCheckpoints": True,
        "createFinalCheckpoint": True,
        "force": False,
    }


def test_failed_job_surfaces_message():
    job = D.parse_job(
        {"jobId": "j", "status": "failed", "error": "TRAINING_FAILED", "message": "lr must be > 0"}
    )
    assert job.state is JobState.FAILED and job.message == "lr must be > 0"
    job = D.parse_job({"jobId": "j", "status": "failed", "error": {"message": "OOM"}})
    assert job.message == "OOM"


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        ("queued", JobState.QUEUED),
        ("initializing", JobState.STARTING),
        ("running", JobState.RUNNING),
        ("paused", JobState.RUNNING),
        ("cancelling", JobState.STOPPING),
        ("completed", JobState.SUCCEEDED),
        ("failed", JobState.FAILED),
        ("cancelled", JobState.CANCELLED),
    ],
)
def test_every_documented_status_maps(raw, state):
    assert D.map_status(raw) is state


def test_status_map_is_total_and_terminal_set_matches_reference():
    terminal = {raw for raw, s in D.status_map.items() if s.is_terminal}
    assert terminal == {"completed", "failed", "cancelled"}
    assert set(D.status_map.values()) <= set(JobState)


def test_unknown_status_is_running_and_logged(caplog):
    with caplog.at_level(logging.WARNING):
        job = D.parse_job({"jobId": "j", "status": "defragmenting"})
    assert job.state is JobState.RUNNING and not job.is_terminal
    assert "defragmenting" in caplog.text


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"datasetId": "digits"}, "name"),
        ({"name": "", "datasetId": "digits"}, "name"),
        ({"name": "x" * 101, "datasetId": "digits"}, "name"),
        ({"name": "n"}, "datasetId"),
        ({"name": "n", "datasetId": "d", "modelType": "audio"}, "modelType"),
        ({"name": "n", "datasetId": "d", "config": {"training": {"epochs": 0}}}, "config.training.epochs"),
        (
            {"name": "n", "datasetId": "d", "config": {"training": {"batch_size": "big"}}},
            "config.training.batch_size",
        ),
        ({"name": "n", "datasetId": "d", "maxWorkers": 64}, "maxWorkers"),
        ({"name": "n", "datasetId": "d", "hyperparameters": {"epochs": -1}}, "hyperparameters.epochs"),
        ("not a dict", "spec"),
    ],
)
def test_bad_spec_rejected_naming_the_field(spec, field):
    with pytest.raises(InvalidJobSpecError) as err:
        D.validate_spec(spec)
    assert err.value.field == field
    assert f"'{field}'" in str(err.value)


def test_both_documented_create_shapes_validate():
    prose = {
        "name": "demo-lora-run",
        "modelType": "llm",
        "datasetId": "ds_demo001",
        "config": {
            "baseModel": "org/base-7b",
            "strategy": "lora",
            "training": {"epochs": 2, "batch_size": 8},
        },
        "gpuType": "a100",
        "maxWorkers": 1,
        "priority": "normal",
    }
    openapi = {
        "name": "x",
        "framework": "pytorch",
        "modelConfig": {"modelType": "llm"},
        "datasetConfig": {"datasetId": "ds"},
        "hyperparameters": {"learningRate": 0.1, "batchSize": 4, "epochs": 3},
        "infrastructure": {"gpuType": "h100", "gpuCount": 2},
    }
    assert D.validate_spec(prose) == prose
    assert D.validate_spec(openapi) == openapi


def test_negative_learning_rate_is_left_to_the_trainer():
    # The platform, not the provider, decides this one (the failure path test needs it to reach a trainer).
    D.validate_spec({"name": "n", "datasetId": "digits", "config": {"training": {"learning_rate": -0.1}}})


def test_error_envelope_maps_to_error_types():
    env = {"error": "STATE_CONFLICT", "message": "Job already completed", "code": 409, "request_id": "req_1"}
    err = D.classify_error(409, {}, env)
    assert isinstance(err, JobStateConflictError)
    assert (err.code, err.message, err.request_id) == ("STATE_CONFLICT", "Job already completed", "req_1")
    assert isinstance(
        D.classify_error(404, {}, {"error": "RESOURCE_NOT_FOUND", "message": "no"}), JobNotFoundError
    )
    assert isinstance(D.classify_error(401, {}, {"error": "UNAUTHORIZED"}), PlatformAuthError)


def test_tags_are_merged_not_duplicated():
    spec = D.with_tags(
        {"name": "n", "tags": ["team:ml", "airflow-dag:d"]}, ["airflow-dag:d", "airflow-task:t"]
    )
    assert spec["tags"] == ["team:ml", "airflow-dag:d", "airflow-task:t"]


def test_durations():
    assert parse_duration("1h 10m") == 4200
    assert parse_duration("1m 20s") == 80
    assert parse_duration(12) == 12.0
    assert parse_duration("soon") is None


def test_dialect_registry():
    assert isinstance(get_dialect("tensorone"), TensorOneDialect)
    with pytest.raises(ValueError, match="not a training platform"):
        get_dialect("postgres")


def test_the_batch_status_read_lists_the_jobs_not_ended_with_their_metrics():
    request = D.status_batch_request(["a", "b"], None)
    assert (request.method, request.path) == ("GET", "/v2/training/jobs")
    assert request.params == [
        ("status", "queued,initializing,running,paused,cancelling"),
        ("includeMetrics", "true"),
        ("limit", 100),
        ("offset", 0),
    ]
    assert dict(D.status_batch_request(["a"], "200").params)["offset"] == 200
    assert D.batch_size >= 10_000 and D.batch_rows_complete is True


def test_a_batch_page_reads_whole_jobs_and_asks_the_next_offset_while_more_follow():
    rows = [{**GET_RESPONSE, "jobId": f"j{i}"} for i in range(100)]
    page = D.parse_status_batch({"jobs": rows, "totalCount": 150, "limit": 100, "offset": 0})
    assert len(page.jobs) == 100 and page.next_page == "100"
    assert page.jobs[0].model_dump(exclude={"id"}) == D.parse_job(GET_RESPONSE).model_dump(exclude={"id"})
    last = D.parse_status_batch({"jobs": rows[:50], "totalCount": 150, "limit": 100, "offset": 100}, "100")
    assert len(last.jobs) == 50 and last.next_page is None
