"""A real Airflow 3.3 stack for end-to-end and kill-path tests: api-server, scheduler (LocalExecutor), dag-processor
and one or more triggerers, on 127.0.0.1 with free ports, each started here and stopped by its PID
(its own process group, so the LocalExecutor workers and task processes go with it).

The REST helpers use the public API v2 (token-less: ``simple_auth_manager_all_admins``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from airflow_training_platform.server import free_port

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
TERMINAL_TI = {"success", "failed", "skipped", "upstream_failed", "removed"}


@dataclass
class Component:
    name: str
    proc: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, sig: int) -> None:
        """Signal the component's whole process group (it was made a group leader at start)."""
        os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float = 20.0, signalled: bool = False) -> None:
        """SIGTERM the component (unless ``signalled``: already sent), wait ``timeout`` seconds
        for it to exit, then SIGKILL. One SIGTERM only, as a deployment sends: a second one makes
        Airflow's triggerer and scheduler force their exit (the triggerer SIGKILLs its runner)."""
        if self.proc.poll() is not None:
            return
        try:
            if not signalled:
                self.signal(signal.SIGTERM)
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        except ProcessLookupError:
            pass


@dataclass
class AirflowStack:
    home: Path
    dags_folder: Path
    extra_env: dict[str, str]
    sql_alchemy_conn: str | None = None
    port: int = field(default_factory=free_port)
    components: dict[str, Component] = field(default_factory=dict)
    login: tuple[str, str] | None = None
    """``(user, password)``: the API and UI ask for a login (simple auth manager, an admin user);
    ``None``: everyone is an admin and the REST helpers send no token."""
    _token: str | None = None
    inherit_connections: bool = True
    """``False``: ``AIRFLOW_CONN_*`` variables of this process are not passed on (the stack's own
    connections, in its database or ``extra_env``, are the only ones)."""

    @property
    def url(self) -> str:
        """The UI's address."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v2"

    @property
    def env(self) -> dict[str, str]:
        home = self.home
        inherited = {
            k: v
            for k, v in os.environ.items()
            if self.inherit_connections or not k.startswith("AIRFLOW_CONN_")
        }
        return {
            **inherited,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "16",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__FERNET_KEY": "wZiJ8o1Lz0hMgFmzDXr5pRQb9hq0dM8vE8Yh6l6m7yU=",
            **self._auth_env(),
            "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.port}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": "kill-path-tests-jwt-secret-0123456789abcdef",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.sql_alchemy_conn or f"sqlite:///{home}/airflow.db",
            "AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "3",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "15",
            "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "2",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            **self.extra_env,
        }

    def _auth_env(self) -> dict[str, str]:
        if self.login is None:
            return {"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True"}
        user, password = self.login
        passwords = self.home / "simple_auth_manager_passwords.json"
        if not passwords.exists():
            self.home.mkdir(parents=True, exist_ok=True)
            passwords.write_text(json.dumps({user: password}))
        return {
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{user}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        }

    def token(self) -> str | None:
        """A JWT for the REST helpers (``None`` without a login): ``POST /auth/token``."""
        if self.login is None:
            return None
        if self._token is None:
            user, password = self.login
            response = requests.post(
                f"{self.url}/auth/token", json={"username": user, "password": password}, timeout=30
            )
            response.raise_for_status()
            self._token = response.json()["access_token"]
        return self._token

    # -- processes -----------------------------------------------------------------------------
    def migrate(self) -> None:
        run = subprocess.run(
            [AIRFLOW, "db", "migrate"], env=self.env, capture_output=True, text=True, timeout=300
        )
        if run.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{run.stdout}\n{run.stderr}")

    def start_component(self, name: str, *args: str) -> Component:
        log_path = self.home / f"{name}.log"
        proc = subprocess.Popen(
            [AIRFLOW, *args],
            env=self.env,
            stdout=log_path.open("a"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() reaches its workers too
        )
        component = Component(name, proc, log_path)
        self.components[name] = component
        return component

    def start(self, triggerers: int = 1, timeout: float = 180.0, migrate: bool = True) -> None:
        if migrate:
            self.migrate()
        self.start_component("api-server", "api-server", "--port", str(self.port), "--host", "127.0.0.1")
        self.start_component("scheduler", "scheduler")
        self.start_component("dag-processor", "dag-processor")
        for i in range(triggerers):
            self.start_triggerer(f"triggerer-{i}")
        self.wait_healthy(timeout)

    def start_triggerer(self, name: str = "triggerer-0") -> Component:
        return self.start_component(name, "triggerer")

    def start_celery_worker(self, name: str = "celery-worker-0") -> Component:
        """A Celery worker (the stack's ``extra_env`` must configure the CeleryExecutor), named
        ``<name>@<host>`` so that two on one machine are two workers to Celery. It serves no logs:
        the API server reads the task logs from this machine's disk (a log server would listen on
        every interface, and two would want one port)."""
        return self.start_component(
            name, "celery", "worker", "--celery-hostname", f"{name}@%h",
            "--without-mingle", "--without-gossip", "--skip-serve-logs",
        )  # fmt: skip

    def celery_workers(self) -> list[Component]:
        return [
            c for n, c in self.components.items() if n.startswith("celery-worker") and c.proc.poll() is None
        ]

    def stop(self) -> None:
        """SIGTERM every component at once, then wait for each (SIGKILL after a timeout)."""
        signalled = set()
        for name, component in self.components.items():
            if component.proc.poll() is None:
                try:
                    component.signal(signal.SIGTERM)
                    signalled.add(name)
                except ProcessLookupError:
                    pass
        for name, component in reversed(list(self.components.items())):
            component.stop(signalled=name in signalled)

    def triggerers(self) -> list[Component]:
        return [c for n, c in self.components.items() if n.startswith("triggerer") and c.proc.poll() is None]

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            for c in self.components.values():
                if c.proc.poll() is not None:
                    raise RuntimeError(f"{c.name} exited: {c.log_path.read_text()[-3000:]}")
            try:
                last = requests.get(f"{self.api}/monitor/health", timeout=5).json()
                if all(
                    last.get(k, {}).get("status") == "healthy"
                    for k in ("metadatabase", "scheduler", "triggerer")
                ):
                    return
            except (requests.RequestException, ValueError):
                pass
            time.sleep(1)
        raise RuntimeError(f"Airflow stack not healthy after {timeout} s: {last}")

    # -- REST ----------------------------------------------------------------------------------
    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        if (token := self.token()) is not None:
            kwargs["headers"] = {"Authorization": f"Bearer {token}", **kwargs.get("headers", {})}
        response = requests.request(method, f"{self.api}{path}", timeout=30, **kwargs)
        if response.status_code >= 400:
            raise AssertionError(f"{method} {path} → {response.status_code}: {response.text[:500]}")
        return response.json() if response.text else None

    def dag_ids(self) -> set[str]:
        """Every DAG the API server knows, page by page (it answers at most 100 per page)."""
        ids: set[str] = set()
        while True:
            page = self.call("GET", "/dags", params={"limit": 100, "offset": len(ids)})
            ids |= {d["dag_id"] for d in page["dags"]}
            if not page["dags"] or len(ids) >= page["total_entries"]:
                return ids

    def wait_for_dags(self, dag_ids: list[str], timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        missing = set(dag_ids)
        while time.monotonic() < deadline:
            missing = set(dag_ids) - self.dag_ids()
            if not missing:
                return
            time.sleep(2)
        raise AssertionError(f"DAGs never parsed: {missing}")

    def trigger(self, dag_id: str, conf: dict | None = None, logical_date: str | None = None) -> str:
        """Start a DAG run of ``dag_id`` (without a logical date unless given, ISO 8601: then the
        run has ``ds``, ``ds_nodash``... as a scheduled run does); its run id."""
        body = {"logical_date": logical_date, "conf": conf or {}}
        return self.call("POST", f"/dags/{dag_id}/dagRuns", json=body)["dag_run_id"]

    @staticmethod
    def _ti_path(dag_id: str, run_id: str, task_id: str, map_index: int | None) -> str:
        """A task instance's REST path; a mapped one is addressed by its map index."""
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
        return path if map_index is None else f"{path}/{map_index}"

    def ti(self, dag_id: str, run_id: str, task_id: str, map_index: int | None = None) -> dict:
        return self.call("GET", self._ti_path(dag_id, run_id, task_id, map_index))

    def ti_state(self, dag_id: str, run_id: str, task_id: str) -> str | None:
        return self.ti(dag_id, run_id, task_id)["state"]

    def wait_ti(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        states: set[str],
        timeout: float = 120.0,
        map_index: int | None = None,
    ) -> dict:
        deadline = time.monotonic() + timeout
        ti: dict = {}
        while time.monotonic() < deadline:
            ti = self.ti(dag_id, run_id, task_id, map_index)
            if ti["state"] in states:
                return ti
            time.sleep(0.5)
        raise AssertionError(f"{dag_id}/{run_id}/{task_id} never reached {states}: {ti.get('state')}")

    def wait_trigger_running(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        timeout: float = 60.0,
        settle: float = 1.5,
        map_index: int | None = None,
    ) -> dict:
        """Wait until the deferred task's trigger is claimed by a triggerer, then ``settle`` seconds
        for the triggerer to start it. A task failed before that has no trigger running: nothing of
        the try runs any more (no ``on_kill``), so a kill-path case "while deferred" starts here."""
        deadline = time.monotonic() + timeout
        ti: dict = {}
        while time.monotonic() < deadline:
            ti = self.ti(dag_id, run_id, task_id, map_index)
            if ti["state"] == "deferred" and (ti.get("trigger") or {}).get("triggerer_id") is not None:
                time.sleep(settle)
                return ti
            time.sleep(0.3)
        raise AssertionError(f"{dag_id}/{run_id}/{task_id}: no triggerer took its trigger: {ti}")

    def set_ti_state(
        self, dag_id: str, run_id: str, task_id: str, state: str, map_index: int | None = None
    ) -> None:
        self.call("PATCH", self._ti_path(dag_id, run_id, task_id, map_index), json={"new_state": state})

    def clear_ti(self, dag_id: str, run_id: str, task_id: str) -> None:
        self.call(
            "POST",
            f"/dags/{dag_id}/clearTaskInstances",
            json={"dag_run_id": run_id, "task_ids": [task_id], "dry_run": False, "only_failed": False},
        )

    def set_dag_run_state(self, dag_id: str, run_id: str, state: str) -> None:
        self.call("PATCH", f"/dags/{dag_id}/dagRuns/{run_id}", json={"state": state})

    def dag_run_state(self, dag_id: str, run_id: str) -> str:
        return self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]

    def task_log(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        try_number: int,
        *,
        wait_for: tuple[str, ...] = (),
        timeout: float = 30.0,
    ) -> str:
        """The task log of one try as text: one JSON object per structured log entry.

        ``wait_for``: re-read (for up to ``timeout`` seconds) until one of these texts is in the log.
        The supervisor reports a try's final state before the task's last lines reach the log file,
        so a log read right after the state can miss them. After the timeout the log is returned
        as it is, for the caller's assertion to show.
        """
        deadline = time.monotonic() + timeout
        while True:
            body = self.call(
                "GET",
                f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
                params={"full_content": "true"},
                headers={"Accept": "application/json"},
            )
            text = "\n".join(json.dumps(entry, ensure_ascii=False) for entry in body.get("content", []))
            if not wait_for or any(w in text for w in wait_for) or time.monotonic() > deadline:
                return text
            time.sleep(1)
