"""Events in the task log and failure reasons from events (pure logic)."""

from __future__ import annotations

import logging

from airflow_training_provider.events import explain_failure, write_events
from airflow_training_provider.lifecycle.operations import NewEvents, Progress
from airflow_training_provider.models import JobEvent, JobState, TrainingJob
from airflow_training_provider.platforms.tensorone import TensorOneDialect
from airflow_training_provider.platforms.together import TogetherDialect
from airflow_training_provider.progress import JobReport

EVENTS = [
    JobEvent(type="job_pending", message="created"),
    JobEvent(type="job_start", message="started"),
    JobEvent(type="wandb_init", message="W&B login failed: invalid key", level="error"),
    JobEvent(type="cancel_requested", message="Job cancelled due to error in W&B login/init"),
]


def test_report_writes_events_in_order_and_moves_the_cursor(caplog):
    report = JobReport(logging.getLogger("t"), cursor=0)
    with caplog.at_level(logging.INFO, "t"):
        report(NewEvents(tuple(EVENTS[:2]), 2))
        report(NewEvents(tuple(EVENTS[2:]), 4))
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split("] ", 1)[0].rsplit("[", 1)[1] for line in lines] == [
        "job_pending",
        "job_start",
        "wandb_init",
        "cancel_requested",
    ]
    assert report.cursor == 4
    assert caplog.records[2].levelno == logging.WARNING


def test_report_logs_progress_only_when_it_moved(caplog):
    report = JobReport(logging.getLogger("t"))
    running = TrainingJob(id="j", platform="tensorone", state=JobState.RUNNING, raw_status="running")
    with caplog.at_level(logging.INFO, "t"):
        report(Progress(running))
        report(Progress(running))
        report(Progress(running.model_copy(update={"metrics": {"loss": 0.5}})))
    assert len(caplog.records) == 2 and "loss 0.5000" in caplog.records[1].getMessage()


def test_failure_reason_quotes_decisive_event():
    job = TrainingJob(id="j", platform="tensorone", state=JobState.CANCELLED, raw_status="cancelled")
    explained = explain_failure(job, EVENTS, TensorOneDialect())
    assert explained.message == "wandb_init: W&B login failed: invalid key"
    ok = TrainingJob(id="j", platform="tensorone", state=JobState.SUCCEEDED, raw_status="completed")
    assert explain_failure(ok, EVENTS, TensorOneDialect()).message is None


def test_a_platform_level_spelling_is_the_dialects_to_normalize(caplog):
    # Together's legacy SDK level: the dialect reads it as an error, the shared code knows only "error"
    together = TogetherDialect()
    [event] = together.parse_events(
        {"data": [{"type": "job_error", "level": "legacy_ierror", "message": "OOM"}]}
    )
    with caplog.at_level(logging.INFO, "t"):
        write_events(logging.getLogger("t"), [event])
    assert caplog.records[-1].levelno == logging.WARNING
    failed = TrainingJob(id="ft-1", platform="together", state=JobState.FAILED, raw_status="error")
    assert explain_failure(failed, [event], together).message == "job_error: OOM"
