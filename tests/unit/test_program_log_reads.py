"""``stream_logs`` reads that must not go wrong when something around them does: a cursor or a
secret not readable at first, a malformed cursor, a logs endpoint that hangs or fails, a log cut
at the job's end (driven without a socket: the trigger's own helpers, the sans-IO operations)."""

from __future__ import annotations

import asyncio

from airflow_training_provider.triggers import training_job as trigger_module
from airflow_training_provider.triggers.training_job import TrainingJobTrigger
from tests.unit.test_program_logs import Paged

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
