"""The trainer's report lines (engine/reports.py) and how a job record applies them; no processes."""

from __future__ import annotations

from airflow_training_platform.engine.records import JobRecord, JobSpec
from airflow_training_platform.engine.reports import (
    CompletedReport,
    StartedReport,
    StepReport,
    decode,
    encode,
)


def test_a_report_is_one_compact_json_line_in_field_order():
    step = StepReport(type="step", epoch=1, step=2, total_steps=3, loss=0.5)
    assert encode(step) == '{"type":"step","epoch":1,"step":2,"total_steps":3,"loss":0.5}'
    assert decode(encode(step)) == step


def test_lines_that_are_not_reports_decode_to_none():
    for line in (
        "Traceback (most recent call last):",
        "[1, 2]",
        "{}",
        '{"type": "progress"}',
        '{"type": []}',
    ):
        assert decode(line) is None


def test_a_record_applies_reports_by_type():
    job = JobRecord(
        job_id="j", spec=JobSpec(name="j"), config={}, job_dir="/nonexistent", resume_path=None, created_at=0
    )
    job.set_state("starting")
    started = StartedReport(
        type="started",
        pid=1,
        dataset="iris",
        n_train=120,
        n_val=30,
        n_classes=3,
        epochs=2,
        start_epoch=1,
        start_step=0,
        steps_per_epoch=4,
        total_steps=8,
        batch_size=32,
        learning_rate=0.01,
        hidden_units=8,
        seconds_per_epoch=0.0,
        resumed_from=None,
    )
    for report in (started, StepReport(type="step", epoch=1, step=1, total_steps=8, loss=1.5)):
        job.apply_report(report)
    assert job.state == "running"
    assert job.progress["step"] == 1 and job.progress["total_epochs"] == 2
    assert job.metrics == {"learning_rate": 0.01, "loss": 1.5}
    job.apply_report(CompletedReport(type="completed", epoch=2, step=8, metrics={}))
    assert job.completed_seen
    assert [e["type"] for e in job.events] == ["training_start", "training_complete"]
