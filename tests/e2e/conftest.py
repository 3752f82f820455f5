"""Real Airflow 3.3 for end-to-end tests: its own AIRFLOW_HOME, SQLite DB, and a dags folder holding
the example DAGs plus the test DAGs. DAGs run with ``airflow dags test`` in a subprocess (the same
``dag.test()`` path, but isolated, so a test can signal it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_training_devel.local_fixtures import LOCAL_FIXTURES, connection_env, server_options
from airflow_training_platform.server import LocalPlatformServer

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).with_name("airflow"))


@dataclass
class AirflowEnv:
    """One Airflow home (database, dags folder) and the environment its commands run in."""

    home: Path
    env: dict[str, str]
    registry: Path

    def dags_test(self, dag_id: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [AIRFLOW, "dags", "test", dag_id, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def popen_dags_test(self, dag_id: str, log_path: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [AIRFLOW, "dags", "test", dag_id],
            env=self.env,
            stdout=log_path.open("w"),
            stderr=subprocess.STDOUT,
        )


@pytest.fixture(scope="session")
def broke_platform(tmp_path_factory):
    """A local platform whose Together account holds $0.002: a fine-tune runs out of balance."""
    with LocalPlatformServer(
        tmp_path_factory.mktemp("broke"), seconds_per_epoch=0.5, **server_options(together_balance_usd=0.002)
    ) as server:
        yield server


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory, platform, broke_platform) -> AirflowEnv:
    home = tmp_path_factory.mktemp("airflow")
    dags = home / "dags"
    dags.mkdir()
    for src in [*(ROOT / "example_dags").glob("*.py"), *(Path(__file__).parent / "dags").glob("*.py")]:
        shutil.copy(src, dags / src.name)
    # the user's own training code the own-script examples upload (``training_code/train.py``)
    shutil.copytree(ROOT / "example_dags" / "training_code", dags / "training_code")
    registry = home / "registry"
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        **connection_env(platform.url),
        "AIRFLOW_CONN_TOGETHER_BROKE": LOCAL_FIXTURES["together"].connection_json(broke_platform.url),
        "TRAINING_MODEL_REGISTRY": str(registry),
        "PYTHONUNBUFFERED": "1",
    }
    migrate = subprocess.run([AIRFLOW, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    return AirflowEnv(home=home, env=env, registry=registry)


@pytest.fixture(scope="session")
def user_code_platform(tmp_path_factory):
    """A local platform started with ``--allow-user-code``: it runs the training code a job names
    (SageMaker script mode, PAI ``CodeDir``, ModelArts ``code_dir``) by each platform's contract."""
    with LocalPlatformServer(
        tmp_path_factory.mktemp("user-code-platform"), gpus=3, allow_user_code=True, **server_options()
    ) as server:
        yield server


@pytest.fixture(scope="session")
def user_code_airflow_env(airflow_env, user_code_platform) -> AirflowEnv:
    """``airflow_env`` with every local connection pointing at :func:`user_code_platform`, and
    ``TRAINING_PLATFORM_DATA_DIR`` its data directory (the examples copy into its OSS and OBS)."""
    env = {
        **airflow_env.env,
        **connection_env(user_code_platform.url),
        "TRAINING_PLATFORM_DATA_DIR": user_code_platform.data_dir,
    }
    return AirflowEnv(home=airflow_env.home, env=env, registry=airflow_env.registry)


@dataclass
class DagRunProcess:
    """One ``airflow dags test`` started in the background, in an Airflow home of its own."""

    env: dict[str, str]
    home: Path
    log: Path
    proc: subprocess.Popen
    started: float

    def wait(self, timeout: float) -> tuple[int, str, float]:
        """Its exit status, output and seconds from start to end (killed after ``timeout`` s)."""
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode, self.log.read_text(), time.monotonic() - self.started


@pytest.fixture(scope="session")
def portable_platform(tmp_path_factory):
    """A local platform of its own for the portable example (its jobs are the only ones there)."""
    with LocalPlatformServer(
        tmp_path_factory.mktemp("portable-platform"), gpus=3, allow_user_code=True, **server_options()
    ) as server:
        yield server


@pytest.fixture(scope="session")
def portable_cancel_platform(tmp_path_factory):
    """A local platform of its own for the portable cancel DAG (``dags/e2e_portable_cancel.py``)."""
    with LocalPlatformServer(
        tmp_path_factory.mktemp("portable-cancel-platform"),
        gpus=3,
        allow_user_code=True,
        **server_options(
            sagemaker_stop_grace_seconds=10, pai_stop_grace_seconds=10, modelarts_stop_grace_seconds=10
        ),
    ) as server:
        yield server


@pytest.fixture(scope="session")
def user_code_dag_runs(
    airflow_env, user_code_airflow_env, portable_platform, portable_cancel_platform, tmp_path_factory
):
    """The user-code example DAGs started at once, each ``airflow dags test`` in its own copy of the
    Airflow home (SQLite takes one writer): they mostly wait (on Airflow's start, the jobs, the
    polls), so side by side they take about as long as one. The three own-script DAGs run on
    :func:`user_code_platform`, the portable one on :func:`portable_platform`, the portable cancel
    (``dags/e2e_portable_cancel.py``) on :func:`portable_cancel_platform`."""
    runs: dict[str, DagRunProcess] = {}
    plans = {
        f"{cloud}_retrain_own_script": user_code_airflow_env.env
        for cloud in ("sagemaker", "pai", "modelarts")
    }
    portable_home = tmp_path_factory.mktemp("airflow-portable")
    plans["portable_retrain_own_script"] = {
        **airflow_env.env,
        **connection_env(portable_platform.url),
        "TRAINING_MODEL_REGISTRY": str(portable_home / "registry"),
    }
    plans["e2e_portable_cancel"] = {**airflow_env.env, **connection_env(portable_cancel_platform.url)}
    for dag_id, base_env in plans.items():
        home = (
            portable_home if dag_id.startswith("portable") else tmp_path_factory.mktemp(f"airflow-{dag_id}")
        )
        shutil.copy(airflow_env.home / "airflow.db", home / "airflow.db")
        env = {
            **base_env,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        }
        log = home / "dags_test.log"
        proc = subprocess.Popen(
            [AIRFLOW, "dags", "test", dag_id], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT
        )
        runs[dag_id] = DagRunProcess(env, home, log, proc, time.monotonic())
    yield runs
    for run in runs.values():
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
