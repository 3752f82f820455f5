"""``stream_logs`` reads that must not go wrong when something around them does: a cursor or a
secret not readable at first, a malformed cursor, a logs endpoint that hangs or fails, a log cut
at the job's end (driven without a socket: the trigger's own helpers, the sans-IO operations)."""

from __future__ import annotations

import asyncio
import json
import logging

from airflow_training_provider.lifecycle.operations import JobOperations, LogFollow, NewLogLines, advance
from airflow_training_provider.platforms.base import ApiRequest
from airflow_training_provider.triggers import training_job as trigger_module
from airflow_training_provider.triggers.training_job import TrainingJobTrigger
from tests.unit.canned import FakeClock
from tests.unit.test_program_logs import JOB, LINES, Paged, pages_of

IDENTITY = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "try_number": 1}


def flaky(value, failures: int = 1):
    """An XCom read (or a secret lookup) that fails ``failures`` times, as one does before the
    triggerer reaches the API server, then answers ``value``; ``calls`` counts the tries."""

    def read(*_):
        read.calls += 1
        if read.calls <= failures:
            raise ConnectionError("API server not reachable yet")
        return value

    read.calls = 0
    return read


def test_the_saved_log_cursor_is_read_with_retries_like_the_event_cursor(monkeypatch):
    read = flaky("17")
    monkeypatch.setattr(trigger_module, "get_log_cursor", read)
    trigger = TrainingJobTrigger(conn_id="c", job_id="j", stream_logs=True, **IDENTITY)
    logs, _ = asyncio.run(trigger._follow_log(Paged()))
    assert read.calls == 2 and logs is not None and logs.cursor == "17", "resumed, not from the start"


def drive_follow(ops: JobOperations, logs: LogFollow, answer, pages: int = 5, until: float | None = None):
    """One ``follow_log`` against ``answer(request)`` (a page body or an exception to throw in).
    → (the requests sent, the reports, whether it read to the end)."""
    operation = ops.follow_log(JOB, logs, pages, until)
    sent, reports, reply, error = [], [], None, None
    while True:
        done, step = advance(operation, reply, error)
        if done:
            return sent, reports, step
        reply = error = None
        if isinstance(step, ApiRequest):
            sent.append(step)
            got = answer(step)
            if isinstance(got, BaseException):
                error = got
            else:
                reply = json.dumps(got).encode()
        else:
            reports.append(step)


def test_a_cursor_of_another_format_is_warned_about_once_and_the_log_read_from_its_start(caplog):
    ops = JobOperations(Paged(), "http://h")
    logs = LogFollow("{'stream': 'an older version'}")  # Paged's cursor is a number of lines
    with caplog.at_level(logging.WARNING):
        _, reports, _ = drive_follow(ops, logs, pages_of)
        _, again, _ = drive_follow(ops, logs, pages_of)
    assert reports == [NewLogLines(tuple(LINES[:10]), "10")], "from the start"
    assert again == [NewLogLines(tuple(LINES[10:20]), "20")], "then from the new cursor"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith(
        "The program log's saved position for job af-demo-1 is not one this version reads (ValueError: "
    )


def test_log_pages_are_one_attempt_each_and_none_starts_after_the_poll_bound():
    clock = FakeClock(1_000.0)
    ops = JobOperations(Paged(), "http://h", clock)

    def slow(request: ApiRequest) -> dict:  # each page takes 3 s to answer
        clock.now += 3.0
        return pages_of(request)

    sent, reports, complete = drive_follow(ops, LogFollow(), slow, pages=50, until=1_007.0)
    assert [r.timeout for r in sent] == [7.0, 4.0, 1.0], "each call may take only the time left"
    assert {r.budget for r in sent} == {0.0}, "one attempt: a failed page is read at the next poll"
    assert reports == [NewLogLines(tuple(LINES[:6]), "6")] and complete is False
