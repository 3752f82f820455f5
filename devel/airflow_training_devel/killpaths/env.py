"""The kill-path stack: PostgreSQL + Redis + a local training platform (running user code, with the
user-code flavor's script in its S3) + Airflow running both the LocalExecutor and the CeleryExecutor
(two Celery workers) with two triggerers, started together and stopped together, every process by
its PID."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from airflow_training_devel.killpaths.flavors import (
    ALL_FLAVORS,
    FLAVORS,
    secret_cases,
    secret_env,
)
from airflow_training_devel.killpaths.scenarios import Platform
from airflow_training_devel.killpaths.user_code import install as install_user_code
from airflow_training_devel.local_fixtures import server_options
from airflow_training_devel.postgres import PostgresServer
from airflow_training_devel.redis import RedisServer
from airflow_training_devel.stack import AirflowStack
from airflow_training_platform.server import LocalPlatformServer

DAGS = Path(__file__).parent / "dags"
SHAPES = [
    "kp_deferred",
    "kp_deferred_mark_success_cancels",
    "kp_deferred_reattach_on_clear",
    "kp_dagrun_timeout",
    "kp_exec_timeout_deferred",
    "kp_exec_timeout_resume",
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
    "kp_mapped",
    "kp_deferred_keep_on_kill",
]
CELERY_WORKERS = 2


def dag_ids() -> list[str]:
    """Every DAG ``dags/kp_dags.py`` defines."""
    ids = [f.dag(shape) for shape in SHAPES for f in ALL_FLAVORS.values() if f.runs(shape)]
    ids += [f.dag("kp_auto_cancel") for f in FLAVORS.values() if f.auto_cancel_spec is not None]
    ids += [f.dag("kp_events") for f in FLAVORS.values() if f.events]
    ids += [f.dag("kp_guarded") for f in FLAVORS.values() if f.guard_spec is not None]
    ids += [f.dag("kp_diverged") for f in FLAVORS.values() if f.reports_metrics]
    return [*ids, *secret_cases(), "kp_model_producer", "kp_model_consumer"]


class KillPathEnv:
    """Start everything under ``root``; ``stack`` (:class:`AirflowStack`), ``server`` and
    ``platform`` (its ``/_local`` client) are ready on return. ``stop()`` stops all of it.

    The connections ``<platform>_local`` are set for the Airflow processes and for this process
    (the scenarios read what a platform serves through the provider's own hook)."""

    def __init__(self, root: Path, triggerers: int = 2) -> None:
        self.postgres = PostgresServer().start()
        try:
            self.redis = RedisServer().start()
        except BaseException:
            self.postgres.stop()
            raise
        try:
            self.server, self.stack = self._start(root, triggerers)
        except BaseException:
            self.redis.stop()
            self.postgres.stop()
            raise
        self.platform = Platform(self.server.url)

    def celery_env(self) -> dict[str, str]:
        """Both executors (a task picks one with ``executor=``; the default stays LocalExecutor),
        Redis as the Celery broker, PostgreSQL as its result backend."""
        backend = "db+" + self.postgres.dsn  # db+postgresql+psycopg2://...
        return {
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor,CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": self.redis.url,
            "AIRFLOW__CELERY__RESULT_BACKEND": backend,
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "8",
        }

    def _start(self, root: Path, triggerers: int) -> tuple[LocalPlatformServer, AirflowStack]:
        server = LocalPlatformServer(
            str(root / "platform"),
            gpus=24,
            seconds_per_epoch=0.5,
            grace_seconds=40,  # K23: a stop writes a slow final checkpoint (up to 2 x 10 s, more on a busy machine)
            allow_user_code=True,  # the user-code flavor (SageMaker script mode): K1, K5, K5b
            **server_options(
                sagemaker_stop_grace_seconds=40, pai_stop_grace_seconds=40, modelarts_stop_grace_seconds=40
            ),
        )
        server.start()
        install_user_code(server.data_dir)  # in its S3 before any DAG runs
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
            home=root / "airflow",
            dags_folder=dags,
            extra_env={**conns, **secret_env(), **self.celery_env()},
            sql_alchemy_conn=self.postgres.dsn,
        )
        stack.home.mkdir(parents=True, exist_ok=True)
        try:
            stack.start(triggerers=triggerers)
            for i in range(CELERY_WORKERS):
                stack.start_celery_worker(f"celery-worker-{i}")
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
            self.redis.stop()
            self.postgres.stop()
