"""A fork server for trainer processes: scikit-learn takes seconds of CPU to import, so one warm
process imports it once and forks a trainer per job (Linux; elsewhere the engine starts each trainer
with ``subprocess``).

Protocol over a ``SOCK_SEQPACKET`` Unix socket pair, one JSON message each way per event:

* engine → server: ``{"job_dir", "config"}`` with two file descriptors attached (the trainer's stdout
  pipe and its stderr file);
* server → engine: ``{"spawned": pid}`` (or ``{"error": text}``) in answer, and ``{"exited": pid,
  "returncode": code}`` whenever a trainer ends (a negative code is the signal that killed it, as
  ``subprocess`` reports it).

The server is single-threaded (a fork from a threaded process is unsafe): it waits on the control
socket and on a self-pipe its ``SIGCHLD`` handler writes to. Each trainer starts its own session and
dies with the server (``PR_SET_PDEATHSIG``); the server dies with the engine's spawner thread.
"""

from __future__ import annotations

import json
import os
import queue
import selectors
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from airflow_training_platform.engine._proc import pdeathsig_preexec, set_pdeathsig

MAX_MESSAGE = 1 << 20


# -- the server (runs in its own process) ---------------------------------------------------------------
def serve(control_fd: int, child_main: Callable[[str, dict[str, Any]], int]) -> int:
    """Serve forks until the engine closes the control socket; returns the exit code."""
    from airflow_training_platform.trainer import preload

    preload()
    control = socket.socket(fileno=control_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: _poke(wake_w))
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the engine decides when the server ends
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj == wake_r:
                os.read(wake_r, 4096)
                _reap(control)
                continue
            try:
                data, fds, _flags, _addr = socket.recv_fds(control, MAX_MESSAGE, 2)
            except InterruptedError:
                continue
            if not data:  # the engine went away
                return 0
            request = json.loads(data)
            server_pid = os.getpid()
            try:
                pid = os.fork()
            except OSError as exc:
                _send(control, {"error": f"fork failed: {exc}"})
                for fd in fds:
                    os.close(fd)
                continue
            if pid == 0:
                _child(control, (wake_r, wake_w), fds, request, child_main, server_pid)
            for fd in fds:
                os.close(fd)
            _send(control, {"spawned": pid})


def _poke(fd: int) -> None:
    try:
        os.write(fd, b"x")
    except BlockingIOError:
        pass


def _reap(control: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(control, {"exited": pid, "returncode": os.waitstatus_to_exitcode(status)})


def _send(control: socket.socket, message: dict[str, Any]) -> None:
    try:
        control.send(json.dumps(message).encode())
    except OSError:
        pass


def _child(control, wake, fds, request, child_main, server_pid: int) -> None:
    """In the forked trainer: own session, die with the server, stdout/stderr to the job's, then train."""
    code = 1
    try:
        os.setsid()
        set_pdeathsig(server_pid)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        control.close()
        for fd in wake:
            os.close(fd)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in fds:
            os.close(fd)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - the process's own stdout
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        os.chdir(request["job_dir"])
        code = child_main(request["job_dir"], request["config"])
    except BaseException:  # noqa: BLE001 - a forked child must never return into the server loop
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


# -- the engine's side ---------------------------------------------------------------------------------
class ForkedTrainer:
    """A trainer forked by the server, with the part of ``subprocess.Popen`` the engine uses."""

    def __init__(self, pid: int, stdout: Any) -> None:
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None
        self._exited = threading.Event()

    def _exit(self, returncode: int) -> None:
        self.returncode = returncode
        self._exited.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(str(self.pid), timeout)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # reaped by the server only after it reported the exit
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """The engine's handle on a fork server process. Start it from the thread that should own the
    trainers (their death signal follows the server's, which follows that thread)."""

    def __init__(self, python: str, env: dict[str, str], log_path: str) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    python,
                    "-m",
                    "airflow_training_platform.trainer",
                    "--fork-server",
                    str(theirs.fileno()),
                ],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
                preexec_fn=pdeathsig_preexec(),
            )
        theirs.close()
        self._control = ours
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._children: dict[int, ForkedTrainer] = {}
        self._early_exits: dict[int, int] = {}
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="fork-server-reader", daemon=True)
        self._reader.start()

    def spawn(
        self, job_dir: str, config: dict[str, Any], stdout_fd: int, stderr_fd: int, stdout: Any
    ) -> ForkedTrainer:
        """Fork a trainer writing to ``stdout_fd`` and ``stderr_fd`` (both closed here); ``stdout`` is
        the engine's reading end of the first.

        :raises OSError: the server is gone or could not fork.
        """
        try:
            message = json.dumps({"job_dir": job_dir, "config": config}).encode()
            socket.send_fds(self._control, [message], [stdout_fd, stderr_fd])
        finally:
            os.close(stdout_fd)
            os.close(stderr_fd)
        reply = self._replies.get(timeout=60)
        if "spawned" not in reply:
            raise OSError(reply.get("error", "fork server gone"))
        child = ForkedTrainer(reply["spawned"], stdout)
        with self._lock:
            self._children[child.pid] = child
            if child.pid in self._early_exits:  # ended before we registered it
                child._exit(self._early_exits.pop(child.pid))
        return child

    def _read(self) -> None:
        while True:
            try:
                data = self._control.recv(MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            if "exited" in message:
                with self._lock:
                    child = self._children.pop(message["exited"], None)
                    if child is None:
                        self._early_exits[message["exited"]] = message["returncode"]
                if child is not None:
                    child._exit(message["returncode"])
            else:
                self._replies.put(message)
        # the server is gone: its trainers die with it (PR_SET_PDEATHSIG)
        self._replies.put({"error": "fork server gone"})
        with self._lock:
            children, self._children = list(self._children.values()), {}
        for child in children:
            child._exit(-signal.SIGKILL)

    def stop(self, timeout: float = 5.0) -> None:
        """Close the control socket (the server exits), then make sure it did."""
        try:
            self._control.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._control.close()
