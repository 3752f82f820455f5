"""A real Airflow 3.3 stack (api-server, scheduler + LocalExecutor, dag-processor, triggerer) plus a
local training platform, started once for the kill-path tests and stopped by PID afterwards."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from airflow_training_provider.local_platform.server import LocalPlatformServer
from tests.killpaths.postgres import PostgresServer
from tests.killpaths.scenarios import API_KEY, FLAVORS, Platform, run_scenarios
from tests.killpaths.stack import AirflowStack

DAGS = Path(__file__).parent / "dags"
SHAPES = [
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
    "kp_medium_deferred",
    "kp_outage_retry",
    "kp_fails_fast",
    "kp_reaper",
]
DAG_IDS = [f.dag(shape) for shape in SHAPES for f in FLAVORS.values()] + [
    "kp_bad_wandb_key_together",
    "kp_events_together",
]


class KillPathEnv:
    """PostgreSQL + local platform + Airflow (two triggerers), started together, stopped together."""

    def __init__(self, root: Path, triggerers: int = 2) -> None:
        self.postgres = PostgresServer().start()
        try:
            self.server, self.stack = start_kill_path_stack(root, self.postgres.dsn, triggerers)
        except BaseException:
            self.postgres.stop()
            raise
        self.platform = Platform(self.server.url)

    def stop(self) -> None:
        try:
            self.stack.stop()
            self.server.stop()
        finally:
            self.postgres.stop()


def start_kill_path_stack(root: Path, dsn: str, triggerers: int) -> tuple[LocalPlatformServer, AirflowStack]:
    """Start platform + Airflow under ``root``; the caller stops both (``stack.stop()``, ``server.stop()``)."""
    server = LocalPlatformServer(str(root / "platform"), gpus=16, seconds_per_epoch=0.5, api_key=API_KEY)
    server.start()
    dags = root / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    for src in DAGS.glob("*.py"):
        shutil.copy(src, dags / src.name)
    conns = {
        f"AIRFLOW_CONN_{name.upper()}_LOCAL": json.dumps(
            {"conn_type": name, "host": server.url, "password": API_KEY}
        )
        for name in FLAVORS
    }
    stack = AirflowStack(home=root / "airflow", dags_folder=dags, extra_env=conns, sql_alchemy_conn=dsn)
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
    env = KillPathEnv(tmp_path_factory.mktemp("killpaths"))
    try:
        yield env.stack, env.platform
    finally:
        env.stop()


@pytest.fixture(scope="session")
def outcomes(request, kill_path_env):
    """Every selected (scenario, platform) pair, run once up front — exclusive scenarios alone, the
    others three at a time — so the suite takes minutes, not the sum of all cases."""
    wanted = set()
    for item in request.session.items:
        marker = item.get_closest_marker("scenario")
        if marker:
            wanted.add((marker.args[0], item.callspec.params["flavor"]))
    return run_scenarios(*kill_path_env, wanted)


@pytest.fixture
def flavor(request) -> str:
    """The platform a kill-path test runs on (parametrized: ``tensorone``, ``together``)."""
    return request.param


@pytest.fixture
def outcome(request, outcomes, flavor):
    result = outcomes[(request.node.get_closest_marker("scenario").args[0], flavor)]
    if isinstance(result, BaseException):
        raise result
    return result
