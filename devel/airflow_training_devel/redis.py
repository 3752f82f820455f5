"""A private Redis server: the Celery broker of the kill-path stack.

Uses Debian's ``redis-server`` binary, started on 127.0.0.1 with a free port, no persistence, in
the foreground of its own process (so ``stop()`` ends exactly the server this module started, by
its PID).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from airflow_training_platform.server import free_port


class RedisServer:
    """``start()`` → ``url`` (``redis://127.0.0.1:<port>/0``); ``stop()``.

    :raises RuntimeError: ``redis-server`` is not installed, or did not answer within 30 seconds.
    """

    def __init__(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not Path(binary).is_file():
            raise RuntimeError("redis-server not found; install Debian's 'redis-server' package")
        self.binary = binary
        self.root = Path(tempfile.mkdtemp(prefix="atp-redis-"))
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.root),
             "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes"],
            stdout=(self.root / "server.log").open("w"),
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(self.root / 'server.log').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("redis-server did not answer PING within 30 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)
