"""The trigger's kwargs: flat, JSON-only, no secret; options checked (pure logic)."""

from __future__ import annotations

import asyncio
import json

import pytest

from airflow_training_provider.cancellation import CancelPolicy
from airflow_training_provider.lifecycle.waiting import Polling
from airflow_training_provider.triggers.training_job import TrainingJobTrigger

IDENTITY = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": 2, "try_number": 3}


def test_trigger_serializes_flat_json_and_round_trips():
    trigger = TrainingJobTrigger(
        conn_id="c",
        job_id="j",
        deadline=1.5,
        event_cursor=7,
        poll_interval=5,
        cancel_on_kill=False,
        **IDENTITY,
    )
    path, kwargs = trigger.serialize()
    assert path == "airflow_training_provider.triggers.training_job.TrainingJobTrigger"
    assert all(not isinstance(v, dict | list) for v in kwargs.values()), "flat kwargs"
    assert json.loads(json.dumps(kwargs)) == kwargs
    assert kwargs["event_cursor"] == 7 and kwargs["deadline"] == 1.5 and kwargs["poll_interval"] == 5.0
    assert set(CancelPolicy.model_fields) <= set(kwargs) and kwargs["cancel_on_kill"] is False
    rebuilt = TrainingJobTrigger(**kwargs)
    assert rebuilt.serialize() == (path, kwargs)
    assert rebuilt.policy == CancelPolicy(cancel_on_kill=False)
    assert rebuilt.polling == Polling(poll_interval=5)
    assert rebuilt.identity.state_key == "t_2" and rebuilt.identity.try_number == 3
    assert "password" not in json.dumps(kwargs).lower() and "key" not in kwargs


def test_trigger_refuses_unknown_options():
    with pytest.raises(TypeError, match="cancel_on_kil"):
        TrainingJobTrigger(conn_id="c", job_id="j", cancel_on_kil=True)


def test_a_stop_signal_to_the_trigger_runner_is_recorded_and_forwarded_nowhere_else():
    import os
    import signal

    from airflow_training_provider.triggers import shutdown

    class TriggerRunner:  # stands in for Airflow's: its handlers are what the runner installs
        received: list[int] = []

        def _handle_signal(self, signum, frame):
            self.received.append(signum)

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    saved_state = dict(shutdown._state)
    try:
        shutdown._state.update(installed=False, stopping=False)
        assert shutdown.watch_stop_signals() is False  # not a trigger runner's handlers: left alone
        assert signal.getsignal(signal.SIGTERM) is saved[signal.SIGTERM]
        runner = TriggerRunner()
        for sig in saved:
            signal.signal(sig, runner._handle_signal)
        assert shutdown.watch_stop_signals() is True and shutdown.watch_stop_signals() is False
        assert not shutdown.stopping()
        os.kill(os.getpid(), signal.SIGTERM)
        assert shutdown.stopping() and runner.received == [signal.SIGTERM]  # the runner still stops
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        shutdown._state.clear()
        shutdown._state.update(saved_state)


def test_events_arriving_while_the_triggerer_stops_are_not_written_or_counted(monkeypatch):
    import logging

    from airflow_training_provider.lifecycle.operations import NewEvents
    from airflow_training_provider.models import JobEvent
    from airflow_training_provider.triggers import shutdown
    from airflow_training_provider.triggers.training_job import _CursorSavingReport

    saves = []

    async def save(cursor):
        saves.append(cursor)

    report = _CursorSavingReport(logging.getLogger("t"), 0, save)
    first = NewEvents((JobEvent(type="a", message="one"),), 1)
    pending = report(first)
    assert pending is not None and report.cursor == 1
    asyncio.run(pending)
    assert saves == [1]
    monkeypatch.setitem(shutdown._state, "stopping", True)
    assert report(NewEvents((JobEvent(type="b", message="two"),), 2)) is None
    assert report.cursor == 1 and saves == [1]


def test_a_cancel_while_a_cursor_is_read_reaches_the_triggerer_with_its_message():
    """The triggerer tells a user's action ("mark failed": call on_kill) from a shutdown by the
    cancel's message; a cursor read in a thread (which itself calls back into async code, as the
    Task SDK's comms do) must not replace it with a bare CancelledError."""
    import asyncio

    from asgiref.sync import async_to_sync

    from airflow_training_provider.triggers.training_job import _retried

    def read_cursor() -> int:
        async_to_sync(asyncio.sleep)(0.5)
        return 3

    async def cancelled_while_reading():
        task = asyncio.create_task(_retried(read_cursor, 1))
        await asyncio.sleep(0.1)
        task.cancel("__airflow_user_action__")
        try:
            await task
        except asyncio.CancelledError as exc:
            return exc.args
        return "not cancelled"

    assert asyncio.run(cancelled_while_reading()) == ("__airflow_user_action__",)
