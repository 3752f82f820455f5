"""Event cursor and failure reasons from events (pure logic)."""

from __future__ import annotations

import logging

from airflow_training_provider.events import EventLog, explain_failure
from airflow_training_provider.models import JobEvent, JobState, TrainingJob
from airflow_training_provider.platforms.tensorone import TensorOneDialect
from airflow_training_provider.triggers.training_job import TrainingJobTrigger

EVENTS = [
    JobEvent(type="job_pending", message="created"),
    JobEvent(type="job_start", message="started"),
    JobEvent(type="wandb_init", message="W&B login failed: invalid key", level="error"),
    JobEvent(type="cancel_requested", message="Job cancelled due to error in W&B login/init"),
]


def test_event_log_writes_each_event_once_in_order(caplog):
    log = logging.getLogger("t")
    events = EventLog(log)
    with caplog.at_level(logging.INFO, "t"):
        events.write(events.new_events(EVENTS[:2]), 2)
        events.write(events.new_events(EVENTS[:2]), 2)  # same poll again: nothing new
        events.write(events.new_events(EVENTS), 4)
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split("] ", 1)[0].rsplit("[", 1)[1] for line in lines] == [
        "job_pending",
        "job_start",
        "wandb_init",
        "cancel_requested",
    ]
    assert events.cursor == 4
    assert caplog.records[2].levelno == logging.WARNING


def test_event_log_resumes_from_cursor(caplog):
    events = EventLog(logging.getLogger("t"), cursor=3)
    assert events.new_events(EVENTS) == EVENTS[3:]


def test_failure_reason_quotes_decisive_event():
    job = TrainingJob(id="j", platform="tensorone", state=JobState.CANCELLED, raw_status="cancelled")
    explained = explain_failure(job, EVENTS, TensorOneDialect())
    assert explained.message == "wandb_init: W&B login failed: invalid key"
    ok = TrainingJob(id="j", platform="tensorone", state=JobState.SUCCEEDED, raw_status="completed")
    assert explain_failure(ok, EVENTS, TensorOneDialect()).message is None


def test_trigger_serializes_only_json_and_no_secret():
    trigger = TrainingJobTrigger(
        conn_id="c",
        job_id="j",
        poll_interval=5,
        deadline=1.5,
        identity={"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "try_number": 1},
        event_cursor=7,
    )
    path, kwargs = trigger.serialize()
    assert path == "airflow_training_provider.triggers.training_job.TrainingJobTrigger"
    assert kwargs["event_cursor"] == 7 and kwargs["deadline"] == 1.5
    assert kwargs["cancel"]["cancel_on_mark_success"] is False
    assert TrainingJobTrigger(**kwargs).serialize() == (path, kwargs)
    assert "password" not in str(kwargs).lower()
