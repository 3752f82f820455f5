"""A real Airflow 3.3 stack (api-server, scheduler + LocalExecutor, dag-processor, triggerer) plus a
local training platform, started once for the kill-path tests and stopped by PID afterwards."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from airflow_training_provider.local_platform.server import LocalPlatformServer
from tests.killpaths.scenarios import API_KEY, Platform
from tests.killpaths.stack import AirflowStack

DAGS = Path(__file__).parent / "dags"
DAG_IDS = [
    "kp_deferred",
    "kp_deferred_mark_success_cancels",
    "kp_deferred_reattach_on_clear",
    "kp_dagrun_timeout",
    "kp_exec_timeout_deferred",
    "kp_defer_timeout",
    "kp_running",
    "kp_running_exec_timeout",
    "kp_worker_crash_reattach",
    "kp_worker_crash_adopt",
    "kp_short_deferred",
    "kp_outage_retry",
    "kp_fails_fast",
    "kp_sensor",
    "kp_reaper",
]


def start_kill_path_stack(root: Path, triggerers: int = 1) -> tuple[LocalPlatformServer, AirflowStack]:
    """Start platform + Airflow under ``root``; the caller stops both (``stack.stop()``, ``server.stop()``)."""
    server = LocalPlatformServer(str(root / "platform"), gpus=16, seconds_per_epoch=0.5, api_key=API_KEY)
    server.start()
    dags = root / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    for src in DAGS.glob("*.py"):
        shutil.copy(src, dags / src.name)
    conn = json.dumps({"conn_type": "tensorone", "host": server.url, "password": API_KEY})
    stack = AirflowStack(
        home=root / "airflow", dags_folder=dags, extra_env={"AIRFLOW_CONN_TENSORONE_LOCAL": conn}
    )
    stack.home.mkdir(parents=True, exist_ok=True)
    try:
        stack.start(triggerers=triggerers)
        stack.wait_for_dags(DAG_IDS)
    except BaseException:
        stack.stop()
        server.stop()
        raise
    return server, stack


@pytest.fixture(scope="session")
def kill_path_env(tmp_path_factory):
    server, stack = start_kill_path_stack(tmp_path_factory.mktemp("killpaths"))
    try:
        yield stack, Platform(server.url)
    finally:
        stack.stop()
        server.stop()
