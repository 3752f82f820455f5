"""The kill-path stack: PostgreSQL + a local training platform + Airflow with two triggerers,
started together and stopped together, every process by its PID."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from airflow_training_provider.local_platform.server import LocalPlatformServer
from airflow_training_provider.testing.killpaths.flavors import (
    API_KEY,
    AWS_ACCESS_KEY_ID,
    FLAVORS,
    MODELARTS_ACCESS_KEY,
    PAI_ACCESS_KEY_ID,
)
from airflow_training_provider.testing.killpaths.scenarios import Platform
from airflow_training_provider.testing.postgres import PostgresServer
from airflow_training_provider.testing.stack import AirflowStack

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


def dag_ids() -> list[str]:
    """Every DAG ``dags/kp_dags.py`` defines."""
    ids = [f.dag(shape) for shape in SHAPES for f in FLAVORS.values()]
    ids += [f.dag("kp_auto_cancel") for f in FLAVORS.values() if f.auto_cancel_spec is not None]
    ids += [f.dag("kp_events") for f in FLAVORS.values() if f.events]
    return [*ids, "kp_model_producer", "kp_model_consumer"]


class KillPathEnv:
    """Start everything under ``root``; ``stack`` (:class:`AirflowStack`), ``server`` and
    ``platform`` (its ``/_local`` client) are ready on return. ``stop()`` stops all of it.

    The connections ``<platform>_local`` are set for the Airflow processes and for this process
    (the scenarios read what a platform serves through the provider's own hook)."""

    def __init__(self, root: Path, triggerers: int = 2) -> None:
        self.postgres = PostgresServer().start()
        try:
            self.server, self.stack = self._start(root, triggerers)
        except BaseException:
            self.postgres.stop()
            raise
        self.platform = Platform(self.server.url)

    def _start(self, root: Path, triggerers: int) -> tuple[LocalPlatformServer, AirflowStack]:
        server = LocalPlatformServer(
            str(root / "platform"),
            gpus=24,
            seconds_per_epoch=0.5,
            api_key=API_KEY,
            sagemaker_access_key_id=AWS_ACCESS_KEY_ID,
            sagemaker_secret_access_key=API_KEY,
            sagemaker_stop_grace_seconds=20,
            pai_access_key_id=PAI_ACCESS_KEY_ID,
            pai_access_key_secret=API_KEY,
            pai_stop_grace_seconds=20,
            modelarts_access_key=MODELARTS_ACCESS_KEY,
            modelarts_secret_key=API_KEY,
            modelarts_stop_grace_seconds=20,
        )
        server.start()
        dags = root / "dags"
        dags.mkdir(parents=True, exist_ok=True)
        for src in DAGS.glob("*.py"):
            shutil.copy(src, dags / src.name)
        conns = {
            f"AIRFLOW_CONN_{f.conn_id.upper()}": json.dumps(f.connection(server.url))
            for f in FLAVORS.values()
        }
        os.environ.update(conns)
        stack = AirflowStack(
            home=root / "airflow", dags_folder=dags, extra_env=conns, sql_alchemy_conn=self.postgres.dsn
        )
        stack.home.mkdir(parents=True, exist_ok=True)
        try:
            stack.start(triggerers=triggerers)
            stack.wait_for_dags(dag_ids())
        except BaseException:
            stack.stop()
            server.stop()
            raise
        return server, stack

    def stop(self) -> None:
        try:
            self.stack.stop()
            self.server.stop()
        finally:
            self.postgres.stop()
