"""``stream_logs`` reads that must not go wrong when something around them does: a cursor or a
secret not readable at first, a malformed cursor, a logs endpoint that hangs or fails, a log cut
at the job's end (driven without a socket: the trigger's own helpers, the sans-IO operations)."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime

from airflow_training_provider.lifecycle.operations import (
    LOG_PAGES_AT_END,
    LOG_SETTLE_SECONDS,
    JobOperations,
    LogFollow,
    NewLogLines,
    Progress,
    Sleep,
    advance,
)
from airflow_training_provider.models import JobState
from airflow_training_provider.platforms.base import ApiRequest
from airflow_training_provider.program_logs import SecretLines
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
    """One ``follow_log`` (see :func:`drive`) → (the requests sent, the reports, whether it read to the end)."""
    return drive(ops.follow_log(JOB, logs, pages, until), answer)


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


def drive(operation, answer, clock: FakeClock | None = None):
    """Drive ``operation`` against ``answer(request)``; a sleep moves ``clock``.
    → (the requests sent, the reports and sleeps in order, the result)."""
    sent, steps, reply, error = [], [], None, None
    while True:
        done, step = advance(operation, reply, error)
        if done:
            return sent, steps, step
        reply = error = None
        if isinstance(step, ApiRequest):
            sent.append(step)
            got = answer(step)
            if isinstance(got, BaseException):
                error = got
            else:
                reply = json.dumps(got).encode()
        else:
            steps.append(step)
            if isinstance(step, Sleep) and clock is not None:
                clock.now += step.seconds


def test_a_log_longer_than_the_end_read_says_where_the_rest_is(caplog):
    ops = JobOperations(Paged(), "http://h")
    ended = JOB.model_copy(update={"state": JobState.FAILED, "console_url": "https://console/af-demo-1"})
    endless = lambda r: {"lines": ["more", "more"], "more": True}  # noqa: E731
    with caplog.at_level(logging.WARNING):
        sent, steps, _ = drive(ops.log_tail(ended, LogFollow(), 10.0), endless)
    assert len(sent) == LOG_PAGES_AT_END and steps == [NewLogLines(("more",) * 2 * LOG_PAGES_AT_END, "100")]
    assert [r.getMessage() for r in caplog.records] == [
        f"stream_logs: job af-demo-1 printed more than the task log took at its end ({LOG_PAGES_AT_END} "
        "pages); the rest is in its log on the platform: https://console/af-demo-1"
    ]


def test_a_job_that_just_ended_is_read_once_more_after_the_settle(caplog):
    clock = FakeClock(1_000.0)
    ops = JobOperations(Paged(), "http://h", clock)
    ended = JOB.model_copy(
        update={"state": JobState.SUCCEEDED, "updated_at": datetime.fromtimestamp(999.0, tz=UTC)}
    )
    log = LINES[:4]  # the last two lines reach the log service during the settle
    late = lambda r: {"lines": (log if clock.now < 1_002.0 else LINES[:6])[r.params["from"] :], "more": False}  # noqa: E731
    _, steps, _ = drive(ops.log_tail(ended, LogFollow(), 10.0), late, clock)
    assert steps == [
        NewLogLines(tuple(LINES[:4]), "4"),
        Sleep(LOG_SETTLE_SECONDS - 1.0),
        NewLogLines(tuple(LINES[4:6]), "6"),
    ]
    older = ended.model_copy(update={"updated_at": datetime.fromtimestamp(900.0, tz=UTC)})
    _, steps, _ = drive(ops.log_tail(older, LogFollow("6"), 10.0), late, clock)
    assert steps == [], "ended long ago: no settle"
    assert not caplog.records


def test_secrets_not_resolvable_at_first_are_tried_again_and_no_line_is_read_until_they_are(monkeypatch):
    resolve = flaky(SecretLines(["s3cr3t-value"]), failures=2)
    monkeypatch.setattr(trigger_module, "resolve_secrets", resolve)
    monkeypatch.setattr(trigger_module, "get_log_cursor", lambda identity: "4")
    monkeypatch.setattr(trigger_module, "CURSOR_READ_ATTEMPTS", 1)  # no waits between tries here
    trigger = TrainingJobTrigger(conn_id="c", job_id="j", stream_logs=True, **IDENTITY)
    logs, secrets = asyncio.run(trigger._follow_log(Paged()))
    assert secrets is None and logs is not None and logs.paused and logs.cursor == "4"
    ops = JobOperations(Paged(), "http://h")
    assert drive_follow(ops, logs, pages_of) == ([], [], True), "paused: nothing read, the cursor kept"

    async def save(cursor):
        return None

    task_log = logging.getLogger("task")
    report = trigger_module._CursorSavingReport(task_log, 0, save, None, save, logs, trigger._resolve_secrets)
    for _ in range(2):  # the polls: the second try (the third in all) resolves them
        outcome = report(Progress(JOB))
        assert outcome is not None, "one more try at each poll while paused"
        asyncio.run(outcome)
    assert resolve.calls == 3 and not logs.paused and report.secrets.mask("a s3cr3t-value") == "a ***"
    assert report(Progress(JOB)) is None, "resolved: no more tries"
    _, reports, _ = drive_follow(ops, logs, pages_of)
    assert reports == [NewLogLines(tuple(LINES[4:14]), "14")], "read from the cursor, none lost"
