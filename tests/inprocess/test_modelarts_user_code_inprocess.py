"""The ModelArts operator submitting a ``code_dir`` + ``boot_file`` job (the user's own script) to a
local platform that runs user code: the task succeeds, its result names the outputs' OBS locations,
and the model the script wrote is there. On the worker (not deferred): the deferred path adds
seconds here, its trigger retrying the event cursor it cannot read outside a task runner."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from airflow_training_devel.local_fixtures import LOCAL_FIXTURES, server_options
from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.server import LocalPlatformServer
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.testing.inprocess import run_task, task_context
from tests.modelarts_user_code import algorithm, put_code_and_data

CONN_ID = "modelarts_user_code"


@pytest.fixture(scope="module")
def user_code_platform(tmp_path_factory):
    with LocalPlatformServer(
        str(tmp_path_factory.mktemp("ma-usercode-inprocess")),
        log_level="warning",
        allow_user_code=True,
        **server_options(modelarts_stop_grace_seconds=2),
    ) as server:
        put_code_and_data(server.data_dir)
        yield server


def test_the_modelarts_operator_runs_a_code_dir_job_and_reports_its_outputs(user_code_platform, monkeypatch):
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN_ID.upper()}", LOCAL_FIXTURES["modelarts"].connection_json(user_code_platform.url)
    )
    outputs = f"/ip/{uuid.uuid4().hex[:8]}"
    spec = {
        "kind": "job",
        "metadata": {"name": "own-code"},
        "algorithm": algorithm(outputs, epochs=2, lr=0.5),
        "spec": {"resource": {"flavor_id": "modelarts.vm.cpu.2u", "node_count": 1}},
    }
    op = SubmitTrainingJobOperator(
        task_id="train", conn_id=CONN_ID, spec=spec, deferrable=False, poll_interval=0.3
    )
    ctx = task_context(op)
    result = run_task(op, ctx)
    job = LocalPlatformControl(user_code_platform.url).job(ctx["ti"].xcoms["job_id"])
    assert result["state"] == "succeeded", result
    assert job["program"]["argv"][-2:] == ["--epochs=2", "--lr=0.5"]
    assert result["artifacts"]["checkpoints"] == f"{outputs}/checkpoints/"
    model = Path(user_code_platform.data_dir) / "obs" / outputs.strip("/") / "model" / "model.json"
    assert json.loads(model.read_text())["epochs"] == 2
