"""Run the local training platform as a subprocess, for tests and demos.

Example::

    with LocalPlatformServer("/tmp/platform", gpus=2, seconds_per_epoch=0.2, api_key="k") as server:
        requests.post(f"{server.url}/v2/training/jobs", headers={"Authorization": "Bearer k"}, json={...})
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any

from airflow_training_platform.cli import flag
from airflow_training_platform.engine._proc import pdeathsig_preexec
from airflow_training_platform.settings import PlatformSettings

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

OPTIONS = frozenset(PlatformSettings.model_fields) - {"data_dir"} | {"log_level"}
"""Keyword options accepted by :class:`LocalPlatformServer`: every platform setting
(:mod:`.settings`) and ``log_level``; each becomes its ``serve`` flag."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class LocalPlatformServer:
    """Context manager running ``cli serve`` on 127.0.0.1 as a child process.

    data_dir: the server's ``--data-dir``; its output goes to ``<data_dir>/server.log``.
    port: TCP port, default a free one. start_timeout: seconds to wait for ``/_local/health``.
    kill_on_parent_death: Linux PR_SET_PDEATHSIG so the server (and through it the trainers) dies with the
        creating *thread*; keep the default True unless you start the server from a short-lived thread.
    options: see :data:`OPTIONS`, e.g. ``gpus=2, seconds_per_epoch=0.2, api_key="k",
        together_balance_usd=0.01``; a switch takes a bool (``allow_user_code=True``), a repeatable
        option a list (``sagemaker_image_command=["img:1=python run.py"]``).

    Attributes after start: ``url`` (``http://127.0.0.1:PORT``), ``pid``, ``port``, ``log_path``.
    Raises RuntimeError if the server exits or is not healthy within ``start_timeout``; TypeError for an
    unknown option.
    """

    def __init__(
        self,
        data_dir: str,
        port: int | None = None,
        start_timeout: float = 30.0,
        kill_on_parent_death: bool = True,
        **options: Any,
    ):
        unknown = set(options) - set(OPTIONS)
        if unknown:
            raise TypeError(f"unknown LocalPlatformServer options: {sorted(unknown)}")
        self.data_dir = os.path.abspath(data_dir)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.options = options
        self.start_timeout = start_timeout
        self.kill_on_parent_death = kill_on_parent_death
        self.log_path = os.path.join(self.data_dir, "server.log")
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None

    def command(self) -> list[str]:
        """The argv used to start the server."""
        argv = [sys.executable, "-m", "airflow_training_platform.cli", "serve"]
        argv += ["--host", "127.0.0.1", "--port", str(self.port), "--data-dir", self.data_dir]
        for key, value in self.options.items():
            if isinstance(value, bool):  # a switch
                argv += [flag(key)] if value else []
            elif isinstance(value, list | tuple):  # repeatable
                for item in value:
                    argv += [flag(key), str(item)]
            elif value is not None:
                argv += [flag(key), str(value)]
        return argv

    def start(self) -> LocalPlatformServer:
        """Start the server and wait until it is healthy; returns self."""
        os.makedirs(self.data_dir, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=pdeathsig_preexec() if self.kill_on_parent_death else None,
            )
        self.pid = self.proc.pid
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"local platform exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.url}/_local/health", timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"local platform not healthy after {self.start_timeout}s; see {self.log_path}")

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM the server, SIGKILL it after ``timeout`` s, wait; returns its exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self) -> LocalPlatformServer:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()
