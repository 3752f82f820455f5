"""Trainer processes of the local platform: start each job's trainer as a child OS process (forked
warm from a fork server, :mod:`.forkserver`, where the OS allows), read its JSON report lines, signal
it, and SIGKILL it when its stop grace runs out.

Children never outlive the platform: they are started from the engine's one long-lived spawner
thread with ``PR_SET_PDEATHSIG=SIGKILL`` (Linux; the signal fires when the *thread* that forked the
child exits; a forked trainer's follows its fork server's), and :meth:`TrainerProcesses.kill_all`
kills them all.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from airflow_training_platform.engine._proc import pdeathsig_preexec
from airflow_training_platform.engine.forkserver import ForkedTrainer, ForkServer

if TYPE_CHECKING:
    from airflow_training_platform.engine.records import JobRecord

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TRAINER_MODULE = "airflow_training_platform.trainer"
FORKING = sys.platform.startswith("linux") and hasattr(socket, "send_fds")
"""Trainers are forked from a warm fork server (Linux); elsewhere each starts a new interpreter."""


class TrainerProcesses:
    """The running trainers.

    :param python: interpreter for trainer processes.
    :param on_line: ``on_line(job, line)`` for each stdout line (called from the job's reader thread).
    :param on_exit: ``on_exit(job, returncode)`` once the process exited and its output is read.
    """

    def __init__(
        self,
        python: str,
        on_line: Callable[[JobRecord, str], None],
        on_exit: Callable[[JobRecord, int], None],
        fork_server_log: str | None = None,
    ) -> None:
        self.python = python
        self._on_line = on_line
        self._on_exit = on_exit
        self._readers: list[threading.Thread] = []
        self._fork_server_log = fork_server_log if FORKING else None
        self._fork_server: ForkServer | None = None
        self._closed = False  # kill_all ran: start nothing more (no fork server outlives it)

    @staticmethod
    def _env() -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        return env

    def spawn(self, job: JobRecord) -> subprocess.Popen | ForkedTrainer:
        """Start ``job``'s trainer and return its process; stderr goes to
        ``<job_dir>/trainer.stderr.log``. Forked warm from the fork server when there is one, else a
        new interpreter (``--job-dir``, ``--config-json``). Call from the spawner thread *without*
        the engine's lock: the fork server answers only once it has imported scikit-learn (seconds
        on a cold server, more on a busy machine). Touches nothing of ``job`` but its directory:
        :meth:`watch` records the process. Raises ``OSError``."""
        proc = self._fork(job) if self._fork_server_log else None
        if proc is None:
            if self._closed:  # kill_all ran (the fork server may be why there was no fork)
                raise OSError("the local platform is shutting down")
            proc = self._start(job)
        return proc

    def watch(self, job: JobRecord, proc: subprocess.Popen | ForkedTrainer) -> None:
        """Record ``proc`` as ``job``'s trainer and start reading its reports (``on_line``, then
        ``on_exit``). Quick: call it with the engine's lock held, so no report is applied before the
        engine recorded the start."""
        job.proc, job.pid = proc, proc.pid
        self._readers = [t for t in self._readers if t.is_alive()]
        reader = threading.Thread(target=self._read, args=(job,), name=f"reader-{job.job_id}", daemon=True)
        self._readers.append(reader)
        reader.start()

    def warm_up(self) -> None:
        """Start the fork server now (from the spawner thread), so the first job finds it warm."""
        if self._fork_server_log and self._fork_server is None and not self._closed:
            try:
                self._fork_server = ForkServer(self.python, self._env(), self._fork_server_log)
            except OSError:
                self._fork_server_log = None

    def _fork(self, job: JobRecord) -> ForkedTrainer | None:
        if self._fork_server is None or self._fork_server.proc.poll() is not None:
            if self._closed:  # kill_all stopped it: no new one
                raise OSError("the local platform is shutting down")
            try:
                self._fork_server = ForkServer(self.python, self._env(), self._fork_server_log)
            except OSError:
                self._fork_server_log = None  # no fork server here: new interpreters from now on
                return None
        stderr_fd = os.open(
            os.path.join(job.job_dir, "trainer.stderr.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644
        )
        read_fd, write_fd = os.pipe()
        stdout = os.fdopen(read_fd, "r", buffering=1)
        try:
            return self._fork_server.spawn(job.job_dir, job.config, write_fd, stderr_fd, stdout)
        except (OSError, queue.Empty):  # start it the slow way
            stdout.close()
            return None

    def _start(self, job: JobRecord) -> subprocess.Popen:
        with open(os.path.join(job.job_dir, "trainer.stderr.log"), "wb") as stderr:
            return subprocess.Popen(
                [
                    self.python,
                    "-m",
                    TRAINER_MODULE,
                    "--job-dir",
                    job.job_dir,
                    "--config-json",
                    json.dumps(job.config),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                cwd=job.job_dir,
                env=self._env(),
                text=True,
                bufsize=1,
                start_new_session=True,
                preexec_fn=pdeathsig_preexec(),
            )

    def _read(self, job: JobRecord) -> None:
        assert job.proc is not None and job.proc.stdout is not None
        for line in job.proc.stdout:
            line = line.rstrip("\n")
            if line:
                self._on_line(job, line)
        self._on_exit(job, job.proc.wait())

    def signal(self, job: JobRecord, sig: signal.Signals) -> bool:
        """Send ``sig`` to the job's trainer if it still runs; whether it was sent."""
        if job.proc is None or job.returncode is not None:
            return False
        try:
            job.proc.send_signal(sig)  # no-op once reaped: never hits a recycled pid
        except OSError:
            return False
        return True

    def arm_grace(self, job: JobRecord, seconds: float, expired: Callable[[str], None]) -> None:
        """Call ``expired(job_id)`` after ``seconds`` unless the trainer exits first (once per job)."""
        if job.kill_timer is None:
            job.kill_timer = threading.Timer(seconds, expired, (job.job_id,))
            job.kill_timer.daemon = True
            job.kill_timer.start()

    def kill_all(self, jobs: list[JobRecord], deadline_seconds: float) -> None:
        """SIGKILL every trainer still running among ``jobs`` and wait for them and their readers."""
        import time

        self._closed = True
        procs = [j.proc for j in jobs if j.proc is not None and j.returncode is None]
        for proc in procs:
            try:
                proc.kill()
            except OSError:
                pass
        deadline = time.monotonic() + deadline_seconds
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for thread in self._readers:
            if thread is not threading.current_thread():
                thread.join(max(0.1, deadline - time.monotonic()))
        if self._fork_server is not None:
            self._fork_server.stop(max(0.1, deadline - time.monotonic()))
