"""One way to read time (:mod:`airflow_training_provider.timestamps`): the parser over every form a
platform documents or plausibly sends, always an aware UTC ``datetime``; on every platform a list
answer mixing those forms reads, sorts and is found by tag, and a row whose time does not read is
left out alone (the malformed-row rule of ``Dialect.listed_jobs``); the orphan reaper's ``min_age``
check over such rows. Canned answers, no socket."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from airflow_training_provider.hooks.training import TrainingPlatformHook
from airflow_training_provider.hooks.transport import decode_response
from airflow_training_provider.identity import TaskIdentity
from airflow_training_provider.lifecycle.operations import JobOperations
from airflow_training_provider.models import JobEvent, TrainingJob
from airflow_training_provider.operators.reaper import ReapOrphanedTrainingJobsOperator
from airflow_training_provider.platforms.base import LOCAL_FINAL_CHECKPOINT_FIELD, local_final_checkpoint
from airflow_training_provider.platforms.modelarts import ModelArtsDialect
from airflow_training_provider.platforms.pai import PaiDialect
from airflow_training_provider.testing.inprocess import (
    InMemoryAirflow,
    TaskInstanceRecord,
    run_task,
    task_context,
)
from airflow_training_provider.timestamps import UtcDateTime, UtcDateTimeMs, parse_timestamp
from tests.unit import test_modelarts_dialect as ma
from tests.unit import test_pai_dialect as pa
from tests.unit.canned import Canned
from tests.unit.test_dialect_conformance import CASES, Case

AT_10 = datetime(2025, 3, 1, 10, tzinfo=UTC)
DIALECTS = "airflow_training_provider.platforms.base"


# -- the parser --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2025-03-01T10:00:00Z", AT_10),
        ("2025-03-01T10:00:00z", AT_10),
        ("2025-03-01T10:00:00.123456789Z", AT_10.replace(microsecond=123456)),  # nanoseconds: cut
        ("2025-03-01T10:00:00.5Z", AT_10.replace(microsecond=500000)),
        ("2025-03-01T10:00:00,25Z", AT_10.replace(microsecond=250000)),
        ("2025-03-01T18:00:00+08:00", AT_10),
        ("2025-03-01T18:00:00+0800", AT_10),
        ("2025-03-01T18:00:00+08", AT_10),
        ("2025-03-01T05:30:00-04:30", AT_10),
        ("2025-03-01T10:00:00+00:00", AT_10),
        ("2025-03-01T10:00:00", AT_10),  # no zone: UTC
        ("2025-03-01 10:00:00", AT_10),  # a space for the T
        ("2025-03-01 10:00:00.123456789", AT_10.replace(microsecond=123456)),
        ("2025-03-01 18:00:00 +08:00", AT_10),
        ("2025-03-01T10:00", AT_10),
        ("2025-03-01", datetime(2025, 3, 1, tzinfo=UTC)),
        ("  2025-03-01T10:00:00Z\n", AT_10),
        (1740823200, AT_10),  # epoch seconds (SageMaker)
        (1740823200.25, AT_10.replace(microsecond=250000)),
        ("1740823200", AT_10),
        (1740823200000, AT_10),  # above 1e11: milliseconds
        ("1740823200000", AT_10),
        (datetime(2025, 3, 1, 10), AT_10),  # naive: UTC
        (datetime(2025, 3, 1, 18, tzinfo=timezone(timedelta(hours=8))), AT_10),
        (AT_10, AT_10),
    ],
)
def test_every_form_reads_as_the_same_aware_utc_instant(value, expected):
    parsed = parse_timestamp(value)
    assert parsed == expected
    assert parsed.tzinfo is UTC


def test_milliseconds_where_the_platform_documents_them():
    assert parse_timestamp(1740823200000, unit="ms") == AT_10
    assert parse_timestamp("1740823200123", unit="ms") == AT_10.replace(microsecond=123000)
    assert parse_timestamp(1740823200, unit="ms") == AT_10  # seconds where ms are documented: its size says
    for undated in ("20250301", "2025"):  # a date without separators, not a time
        with pytest.raises(ValueError, match="not a timestamp"):
            parse_timestamp(undated)
    assert parse_timestamp("2025-03-01T10:00:00Z", unit="ms") == AT_10  # text is text whatever the unit


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "   ",
        "yesterday",
        "2025-02-30T10:00:00Z",
        "2025-03-01T25:00:00Z",
        "2025-03-01T10:00:00+25:00",
        "2025-03-01T10:00:00 UTC",
        "03/01/2025 10:00",
        "Sat, 01 Mar 2025 10:00:00 GMT",
        True,
        float("nan"),
        float("inf"),
        "1e400",
        10**30,
        [1740823200],
        {"at": 1740823200},
    ],
)
def test_garbage_is_a_value_error_naming_the_value(value):
    with pytest.raises(ValueError, match="not a timestamp") as err:
        parse_timestamp(value)
    assert repr(value)[:20] in str(err.value)


class _Stamped(BaseModel):
    at: UtcDateTime | None = None
    ms: UtcDateTimeMs | None = None


def test_the_field_types_read_python_and_json_and_name_the_field_they_refuse():
    model = _Stamped.model_validate({"at": "2025-03-01 18:00:00+0800", "ms": 1740823200000})
    assert model.at == model.ms == AT_10 and model.at.tzinfo is UTC and model.ms.tzinfo is UTC
    raw = '{"at": "2025-03-01T10:00:00.123456789", "ms": "1740823200000"}'
    assert _Stamped.model_validate_json(raw).at == AT_10.replace(microsecond=123456)
    assert _Stamped().at is None and _Stamped(at=None).at is None
    with pytest.raises(ValidationError) as err:
        _Stamped.model_validate({"at": "yesterday"})
    assert err.value.errors()[0]["loc"] == ("at",) and "not a timestamp: 'yesterday'" in str(err.value)
    assert isinstance(err.value, ValueError)  # one of MALFORMED_ERRORS


def test_the_normalized_models_hold_aware_utc_times_whatever_they_are_given():
    job = TrainingJob(
        id="j",
        platform="p",
        state="running",
        raw_status="r",
        created_at="2025-03-01T10:00:00",
        started_at=datetime(2025, 3, 1, 10),
        updated_at="2025-03-01T18:00:00+08:00",
        events=[JobEvent(type="t", created_at=1740823200)],
    )
    assert job.created_at == job.started_at == job.updated_at == job.events[0].created_at == AT_10
    assert all(t.tzinfo is UTC for t in (job.created_at, job.started_at, job.updated_at))
    again = TrainingJob.model_validate_json(job.model_dump_json())  # XCom and trigger events
    assert again.created_at == AT_10 and again.created_at.utcoffset() == timedelta(0)


# -- every platform's list answer -----------------------------------------------------------------
def _set(path: str) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """A function setting the dotted ``path`` of a copy of a job body to a value."""
    *parents, leaf = path.split(".")

    def apply(body: dict[str, Any], value: Any) -> dict[str, Any]:
        out = dict(body)
        node = out
        for part in parents:
            node[part] = dict(node.get(part) or {})
            node = node[part]
        node[leaf] = value
        return out

    return apply


#: each platform's creation time in its job object (``docs/platforms/<platform>.md``, "The job")
CREATED_FIELD = {
    "tensorone": "timestamps.createdAt",
    "together": "created_at",
    "sagemaker": "CreationTime",
    "pai": "GmtCreateTime",
    "modelarts": "metadata.create_time",
}
#: the form the platform documents, for 2025-03-01T09:00:00Z
NATIVE = {
    "tensorone": "2025-03-01T09:00:00Z",
    "together": "2025-03-01T09:00:00Z",
    "sagemaker": 1740819600.0,  # epoch seconds
    "pai": "2025-03-01T09:00:00Z",
    "modelarts": 1740819600000,  # epoch milliseconds
}
#: (job id, creation time as sent, the instant it is): zone-less, nanoseconds, offsets, documented
MIXED = [
    ("job-nozone", "2025-03-01 12:00:00", datetime(2025, 3, 1, 12, tzinfo=UTC)),
    ("job-nanos", "2025-03-01T10:30:00.123456789Z", datetime(2025, 3, 1, 10, 30, 0, 123456, tzinfo=UTC)),
    ("job-offset", "2025-03-01T19:00:00+0800", datetime(2025, 3, 1, 11, tzinfo=UTC)),
    ("job-colon", "2025-03-01T09:30:00-00:30", AT_10),
]
UNREADABLE = "2025-02-30T10:00:00Z"  # ISO-looking, but no such day
TASK = TaskIdentity("churn", "scheduled__2025-03-01", "train", -1, 1, "prod")
OTHER = TaskIdentity("churn", "scheduled__2025-03-01", "evaluate", -1, 1, "prod")
every_platform = pytest.mark.parametrize("case", CASES, ids=[c.platform.dialect.name for c in CASES])


def _rows(case: Case, times: list[tuple[str, Any]], tags: list[str]) -> list[dict[str, Any]]:
    stamp = _set(CREATED_FIELD[case.platform.dialect.name])
    return [stamp(case.with_tags_in_job(case.with_id(case.job, job_id), tags), at) for job_id, at in times]


def _times(case: Case) -> list[tuple[str, Any]]:
    return [(job_id, at) for job_id, at, _ in MIXED] + [("job-native", NATIVE[case.platform.dialect.name])]


EXPECTED_ORDER = ["job-native", "job-colon", "job-nanos", "job-offset", "job-nozone"]


@every_platform
def test_a_list_mixing_time_forms_reads_aware_utc_sorts_and_is_found_by_tag(case, caplog):
    dialect = case.platform.dialect()
    rows = _rows(case, _times(case), TASK.tags()) + _rows(
        case, [("job-other", "2025-03-01T08:00:00")], OTHER.tags()
    )
    with caplog.at_level(logging.WARNING, logger=DIALECTS):
        jobs = dialect.parse_list(case.list_answer(rows))
    assert not [r for r in caplog.records if r.name == DIALECTS], "every row reads"
    assert len(jobs) == 6
    for job in jobs:
        for at in (job.created_at, job.started_at, job.updated_at):
            assert at is None or (at.tzinfo is not None and at.utcoffset() == timedelta(0)), (job.id, at)
    instants = {j.id: j.created_at for j in jobs}
    assert {job_id: instants[job_id] for job_id, _, _ in MIXED} == {job_id: at for job_id, _, at in MIXED}
    assert instants["job-native"] == datetime(2025, 3, 1, 9, tzinfo=UTC)
    ordered = [j.id for j in sorted(jobs, key=lambda j: j.created_at)]
    assert ordered == ["job-other", *EXPECTED_ORDER]
    # found by tag through the lifecycle, as re-attach and the reaper find them
    request = dialect.list_request(TASK.task_tags())
    canned = Canned({(request.method, request.path): [case.list_answer(rows)]})
    found = canned.drive(JobOperations(dialect, "http://p", canned.clock).list_jobs(TASK.task_tags()))
    assert sorted(j.id for j in found) == sorted(EXPECTED_ORDER)
    assert [j.id for j in sorted(found, key=lambda j: j.created_at)] == EXPECTED_ORDER


def test_together_sorts_its_list_oldest_first_across_time_forms():
    case = next(c for c in CASES if c.platform.dialect.name == "together")
    jobs = case.platform.dialect().parse_list(case.list_answer(_rows(case, _times(case), TASK.tags())))
    assert [j.id for j in jobs] == EXPECTED_ORDER


@every_platform
def test_a_row_whose_time_does_not_read_is_a_malformed_row_left_out_alone(case, caplog):
    dialect = case.platform.dialect()
    field = CREATED_FIELD[dialect.name]
    rows = _rows(case, [*_times(case), ("job-bad", UNREADABLE)], TASK.tags())
    with pytest.raises(ValueError, match="not a timestamp"):  # the job alone does not read
        dialect.parse_job(rows[-1])
    with caplog.at_level(logging.WARNING, logger=DIALECTS):
        jobs = dialect.parse_list(case.list_answer(rows))
    assert sorted(j.id for j in jobs) == sorted(EXPECTED_ORDER)
    (warning,) = [r.getMessage() for r in caplog.records if r.name == DIALECTS]
    assert warning.startswith(f"{dialect.name}: listed job 'job-bad' (row 6) is left out")
    assert f"field '{field}'" in warning and f"not a timestamp: '{UNREADABLE}'" in warning
    assert warning.endswith("the other rows are kept")
    # the batch status read (coalesced polling) keeps the other rows too
    if dialect.status_batch_request(["job-bad"]) is not None:
        assert sorted(j.id for j in dialect.parse_status_batch(case.list_answer(rows)).jobs) == sorted(
            EXPECTED_ORDER
        )


# -- platform details --------------------------------------------------------------------------------
def test_pai_running_since_reads_any_form_and_an_unreadable_one_is_not_known():
    dialect = PaiDialect()
    running = {
        **pa.JOB,
        "StatusTransitions": [{"Status": "Running", "StartTime": "2025-03-01T18:00:00+08:00"}],
    }
    assert dialect.parse_job(running).started_at == AT_10
    empty = {**pa.JOB, "StatusTransitions": [{"Status": "Running", "StartTime": ""}]}
    assert dialect.parse_job(empty).started_at is None  # not started: no time, as before
    # an informational time that does not read never blocks the job's answer (its state, its result)
    broken = {**pa.JOB, "StatusTransitions": [{"Status": "Running", "StartTime": "2025-03-01 10:00:00 CST"}]}
    job = dialect.parse_job(broken)
    assert job.started_at is None and job.state is not None


def test_pai_an_event_line_whose_time_does_not_read_is_kept_as_it_is():
    events = PaiDialect().parse_events(
        {"Events": ["2025-03-01T1 job started by cron", "2025-03-01T10:00:01Z [Error] real failure"]}
    )
    assert [(e.type, e.message, e.level) for e in events] == [
        ("event", "2025-03-01T1 job started by cron", "info"),
        ("Error", "real failure", "error"),
    ]


def test_pai_events_and_metrics_read_any_time_form_in_time_order():
    dialect = PaiDialect()
    events = dialect.parse_events(
        {"Events": ["2025-03-01T18:00:00+08:00 [Running] started", "2025-03-01T10:00:01.123456789Z [X] y"]}
    )
    assert [(e.type, e.created_at) for e in events] == [
        ("Running", AT_10),
        ("X", datetime(2025, 3, 1, 10, 0, 1, 123456, tzinfo=UTC)),
    ]
    metrics = [  # epoch 2 written with an offset: as text it would sort first
        {"Name": "epoch", "Value": 2, "Timestamp": "2025-03-01T18:02:00+08:00"},
        {"Name": "loss", "Value": 0.5, "Timestamp": "2025-03-01T18:02:00+08:00"},
        {"Name": "epoch", "Value": 1, "Timestamp": "2025-03-01T10:01:00Z"},
        {"Name": "loss", "Value": 0.9, "Timestamp": "2025-03-01T10:01:00.000000000Z"},
    ]
    points = dialect.parse_metrics({"Metrics": metrics})
    assert [(p.epoch, p.values) for p in points] == [(1.0, {"loss": 0.9}), (2.0, {"loss": 0.5})]
    with pytest.raises(ValueError, match="not a timestamp"):  # the metrics answer is malformed
        dialect.parse_metrics({"Metrics": [{"Name": "loss", "Value": 1.0, "Timestamp": "later"}]})


def test_modelarts_times_are_milliseconds_and_a_zero_start_is_not_started():
    dialect = ModelArtsDialect()
    job = dialect.parse_job(ma.JOB)
    assert job.created_at == AT_10 and job.created_at.tzinfo is UTC
    not_started = {**ma.JOB, "status": {**ma.JOB["status"], "start_time": 0}}
    assert dialect.parse_job(not_started).started_at is None
    events = dialect.parse_events(
        {"events": [{"time": "2025-03-01T18:00:00+08:00", "level": "Info", "message": "m", "source": "Job"}]}
    )
    assert events[0].created_at == AT_10


@pytest.mark.parametrize(
    ("at", "expected"),
    [(1740823200, AT_10), (1740823200000, AT_10), ("2025-03-01T10:00:00", AT_10), (None, None)],
)
def test_the_local_platforms_final_checkpoint_time_reads_any_form(at, expected):
    field = {"written": True, "files": ["model.pt"], "location": "s3://b/ck", "at": at}
    written, checkpoints = local_final_checkpoint({LOCAL_FINAL_CHECKPOINT_FIELD: field}, None)
    assert written is True and checkpoints[-1].created_at == expected


def test_the_local_platforms_final_checkpoint_with_an_unreadable_time_is_a_malformed_field():
    field = {"written": True, "files": ["model.pt"], "at": "later"}
    assert local_final_checkpoint({LOCAL_FINAL_CHECKPOINT_FIELD: field}, None) == (None, [])


# -- the orphan reaper ---------------------------------------------------------------------------------
@every_platform
def test_the_reaper_s_min_age_check_runs_over_rows_of_mixed_time_forms(case, monkeypatch):
    dialect = case.platform.dialect()
    name = dialect.name
    conn_id = f"ts_{name}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(case.connection))
    young = datetime.now(UTC) - timedelta(seconds=60)
    jobs = {  # task → creation time as sent: old ones in every form, young ones in three
        "old-nozone": "2025-03-01 12:00:00",
        "old-nanos": "2025-03-01T10:30:00.123456789Z",
        "old-offset": "2025-03-01T19:00:00+0800",
        "old-native": NATIVE[name],
        "young-offset": young.astimezone(timezone(timedelta(hours=8))).isoformat(),
        "young-nozone": young.replace(tzinfo=None).isoformat(sep=" "),
        "young-nanos": young.strftime("%Y-%m-%dT%H:%M:%S.%f") + "789Z",
        "bad": UNREADABLE,
    }
    stamp = _set(CREATED_FIELD[name])
    rows = []
    for task, at in jobs.items():
        ident = TaskIdentity("reaped", "run", task, -1, 1, "ts")
        rows.append(stamp(case.with_tags_in_job(case.with_id(case.job, f"job-{task}"), ident.tags()), at))
    request = dialect.list_request(["airflow-deployment:ts"])
    canned = Canned({(request.method, request.path): [case.list_answer(rows)]})

    def send_now(hook: TrainingPlatformHook, request: Any) -> Any:  # the wire, as the transport reads it
        return decode_response(hook.dialect, request, 200, {}, json.dumps(canned.reply(request)))

    monkeypatch.setattr(TrainingPlatformHook, "_send_now", send_now)
    airflow = InMemoryAirflow({("reaped", "run", task, -1): TaskInstanceRecord("failed") for task in jobs})
    reaper = ReapOrphanedTrainingJobsOperator(
        task_id="reap", conn_id=conn_id, deployment="ts", min_age=3600, dry_run=True
    )
    with airflow.installed():
        report = run_task(reaper, task_context(reaper, run_id="reaper"))
    decisions = {row["job_id"]: (row["decision"], row["reason"]) for row in report}
    assert "job-bad" not in decisions, "the row whose time does not read is left out, alone"
    assert {job_id for job_id, (decision, _) in decisions.items() if decision == "cancel"} == {
        "job-old-nozone",
        "job-old-nanos",
        "job-old-offset",
        "job-old-native",
    }
    assert {job_id: d for job_id, d in decisions.items() if job_id.startswith("job-young")} == {
        "job-young-offset": ("keep", "too young"),
        "job-young-nozone": ("keep", "too young"),
        "job-young-nanos": ("keep", "too young"),
    }
