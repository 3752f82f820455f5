"""A private PostgreSQL server for the Airflow stack (two triggerers need real row locks).

Uses the Debian server binaries (``/usr/lib/postgresql/<v>/bin``); runs as the ``postgres`` user
when we are root (PostgreSQL refuses root). Started on 127.0.0.1 with a free port and stopped with
``pg_ctl stop`` on its own data directory: only the server this module started.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from airflow_training_platform.server import free_port


class PostgresServer:
    """``start()`` → ``dsn`` (SQLAlchemy URL for Airflow); ``stop()``."""

    def __init__(self) -> None:
        candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not candidates:
            raise RuntimeError("PostgreSQL server binaries not found; install Debian's 'postgresql' package")
        self.bindir = Path(candidates[-1]).parent
        self.root = Path(tempfile.mkdtemp(prefix="atp-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.as_postgres = os.geteuid() == 0

    def _run(self, *cmd: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if self.as_postgres else []
        subprocess.run([*prefix, *cmd], check=True, capture_output=True, text=True, timeout=120)

    @property
    def dsn(self) -> str:
        return f"postgresql+psycopg2://airflow@127.0.0.1:{self.port}/airflow"

    def start(self) -> PostgresServer:
        if self.as_postgres:
            shutil.chown(self.root, "postgres")
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "airflow", "-E", "UTF8"
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D", str(self.data),
            "-o", f"-p {self.port} -h 127.0.0.1 -k {self.root} -c max_connections=200 -c fsync=off",
            "-l", str(self.root / "server.log"),
            "-w", "start",
        )  # fmt: skip
        self._run(
            str(self.bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "airflow", "airflow"
        )
        return self

    def dump(self) -> str:
        """``pg_dump`` of the ``airflow`` database as SQL text (every table, every row)."""
        run = subprocess.run(
            [str(self.bindir / "pg_dump"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "airflow", "airflow"],
            check=True, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        return run.stdout

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
