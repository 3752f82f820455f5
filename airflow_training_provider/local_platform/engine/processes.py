"""Trainer processes of the local platform: start each job's trainer as a child OS process, read its
JSON report lines, signal it, and SIGKILL it when its stop grace runs out.

Children never outlive the platform: they are started from the engine's one long-lived launcher
thread with ``PR_SET_PDEATHSIG=SIGKILL`` (Linux; the signal fires when the *thread* that forked the
child exits), and :meth:`TrainerProcesses.kill_all` kills them all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from airflow_training_provider.local_platform.engine._proc import pdeathsig_preexec

if TYPE_CHECKING:
    from airflow_training_provider.local_platform.engine.records import JobRecord

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TRAINER_MODULE = "airflow_training_provider.local_platform.trainer"


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
    ) -> None:
        self.python = python
        self._on_line = on_line
        self._on_exit = on_exit
        self._readers: list[threading.Thread] = []

    def spawn(self, job: JobRecord) -> subprocess.Popen:
        """Start ``job``'s trainer (``--job-dir``, ``--config-json``); stderr goes to
        ``<job_dir>/trainer.stderr.log``. Call from the launcher thread. Raises ``OSError``."""
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        with open(os.path.join(job.job_dir, "trainer.stderr.log"), "wb") as stderr:
            proc = subprocess.Popen(
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
                env=env,
                text=True,
                bufsize=1,
                start_new_session=True,
                preexec_fn=pdeathsig_preexec(),
            )
        job.proc, job.pid = proc, proc.pid
        self._readers = [t for t in self._readers if t.is_alive()]
        reader = threading.Thread(target=self._read, args=(job,), name=f"reader-{job.job_id}", daemon=True)
        self._readers.append(reader)
        reader.start()
        return proc

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
