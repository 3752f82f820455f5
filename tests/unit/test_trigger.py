"""The trigger's kwargs: flat, JSON-only, no secret; options checked (pure logic)."""

from __future__ import annotations

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
