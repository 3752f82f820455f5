"""Job engine of the local training platform: processes, GPU slots, checkpoints, cost. No wire format.

Routers (one per emulated platform) translate their wire protocol into calls on :class:`TrainingEngine`
and render the plain-dict records it returns. Every job runs the real trainer
(:mod:`airflow_training_provider.local_platform.trainer`) as a child OS process.

Lifecycle: ``queued`` (waiting for enough free simulated GPUs) → ``initializing`` (process started) →
``running`` (first step/epoch line) → ``completed`` | ``failed``; a cancel moves a live job to
``cancelling`` until its process exits, then ``cancelled`` (a queued job is cancelled at once).

Children never outlive the engine: they are started from one long-lived launcher thread with
``PR_SET_PDEATHSIG=SIGKILL`` (Linux), and :meth:`TrainingEngine.shutdown` kills them all.

Times are ``time.time()`` floats (unix seconds, UTC); money is USD; durations are seconds.
"""

from __future__ import annotations

import collections
import copy
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_training_provider.local_platform import trainer as trainer_mod
from airflow_training_provider.local_platform._proc import pdeathsig_preexec
from airflow_training_provider.local_platform.records import (
    JOB_STATES,
    LIVE_STATES,
    TERMINAL_STATES,
    JobRecord,
    JobSpec,
)

__all__ = [
    "JOB_STATES",
    "TERMINAL_STATES",
    "EngineConfig",
    "EngineError",
    "InvalidJobSpec",
    "JobNotFound",
    "JobSpec",
    "StateConflict",
    "TrainingEngine",
]

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class EngineError(Exception):
    """Base class of engine errors."""


class JobNotFound(EngineError):
    """No job has this id (for this platform)."""


class StateConflict(EngineError):
    """The operation is not allowed in the job's current state (e.g. cancelling a terminal job)."""

    def __init__(self, message: str, state: str):
        super().__init__(message)
        self.state = state


class InvalidJobSpec(EngineError):
    """A job spec value is unusable; ``field`` names the offending spec field."""

    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name


@dataclass
class EngineConfig:
    """Engine options.

    data_dir: root directory; each job gets ``<data_dir>/jobs/<job_id>/`` (checkpoints/, trainer.stderr.log).
    gpus: simulated GPUs = concurrency slots; a job holds ``gpu_count`` of them while its process lives.
    usd_per_gpu_hour: price; cost = usd_per_gpu_hour * gpu_count * process wall seconds / 3600.
    seconds_per_epoch: default trainer pacing (seconds) when a job does not set it.
    grace_seconds: after a graceful cancel signal, seconds before the trainer is SIGKILLed.
    cancel_delay_seconds: test option; :meth:`TrainingEngine.cancel` sleeps this long before acting.
    startup_seconds_estimate: assumed process start-up time, for estimates only.
    max_log_lines: trainer stdout lines kept per job (oldest dropped).
    python: interpreter used for trainer processes.
    fault_hook: optional ``hook(point, job_id)`` called at fault-injection points ``"spawn"`` (before the
        trainer is started; an exception fails the job with its message) and ``"cancel"`` (before a cancel
        acts; an exception propagates to the caller).
    """

    data_dir: str
    gpus: int = 1
    usd_per_gpu_hour: float = 2.50
    seconds_per_epoch: float = 1.0
    grace_seconds: float = 10.0
    cancel_delay_seconds: float = 0.0
    startup_seconds_estimate: float = 5.0
    max_log_lines: int = 2000
    python: str = sys.executable
    fault_hook: Callable[[str, str], None] | None = None


class TrainingEngine:
    """Runs training jobs as child processes on simulated GPU slots. Thread-safe (one lock).

    Call :meth:`start` before submitting (starts the launcher thread) and :meth:`shutdown` at the end.
    Public methods return plain-dict snapshots (see :meth:`get`), never live objects.
    """

    def __init__(self, config: EngineConfig):
        self.config = config
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._jobs: dict[str, JobRecord] = {}
        self._queue: collections.deque[str] = collections.deque()
        self._gpus_in_use = 0
        self._shutting_down = False
        self._launcher: threading.Thread | None = None
        self._readers: list[threading.Thread] = []
        os.makedirs(os.path.join(config.data_dir, "jobs"), exist_ok=True)

    # ----------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start the launcher thread (idempotent). Trainers are spawned from it, so it must live as long
        as the engine: PR_SET_PDEATHSIG fires when the *thread* that forked a child exits."""
        with self._lock:
            if self._launcher is not None:
                return
            self._launcher = threading.Thread(target=self._launch_loop, name="engine-launcher", daemon=True)
            self._launcher.start()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Kill every trainer (SIGKILL), fail unfinished jobs ("local platform shut down"), stop threads.

        Idempotent; returns after the children are reaped or ``timeout`` seconds passed.
        """
        with self._lock:
            if self._shutting_down:
                procs = []
            else:
                self._shutting_down = True
                procs = [j.proc for j in self._jobs.values() if j.proc is not None and j.returncode is None]
                for job_id in list(self._queue):
                    self._jobs[job_id].finish("failed", error="local platform shut down before start")
                self._queue.clear()
                self._wake.notify_all()
        for proc in procs:
            try:
                proc.kill()
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for thread in [*self._readers, self._launcher]:
            if thread is not None and thread is not threading.current_thread():
                thread.join(max(0.1, deadline - time.monotonic()))

    # ----------------------------------------------------------------------------- API
    def submit(self, spec: JobSpec) -> dict[str, Any]:
        """Queue a job; return its snapshot (state ``queued``).

        Raises InvalidJobSpec (unknown dataset, gpu_count outside 1..gpus, unknown resume checkpoint) and
        EngineError if the engine is shutting down.
        """
        if spec.dataset not in trainer_mod.DATASETS:
            raise InvalidJobSpec(
                "dataset", f"unknown dataset {spec.dataset!r}; expected one of {trainer_mod.DATASETS}"
            )
        if not 1 <= spec.gpu_count <= self.config.gpus:
            raise InvalidJobSpec(
                "gpu_count", f"gpu_count must be between 1 and {self.config.gpus} (GPUs on this platform)"
            )
        with self._lock:
            if self._shutting_down:
                raise EngineError("engine is shutting down")
            resume_path = self._resolve_checkpoint(spec.resume_from) if spec.resume_from else None
            job_id = f"{spec.id_prefix}{secrets.token_hex(6)}"
            while job_id in self._jobs:
                job_id = f"{spec.id_prefix}{secrets.token_hex(6)}"
            config = {"seconds_per_epoch": self.config.seconds_per_epoch, **spec.hyperparameters}
            config["dataset"] = spec.dataset
            if resume_path:
                config["resume_from"] = resume_path
            job_dir = os.path.join(self.config.data_dir, "jobs", job_id)
            os.makedirs(os.path.join(job_dir, "checkpoints"), exist_ok=True)
            now = time.time()
            job = JobRecord(
                job_id=job_id,
                spec=copy.deepcopy(spec),
                config=config,
                job_dir=job_dir,
                resume_path=resume_path,
                created_at=now,
                logs=collections.deque(maxlen=self.config.max_log_lines),
            )
            cfg = {**trainer_mod.DEFAULTS, **config}
            spe = trainer_mod.steps_per_epoch(spec.dataset, cfg["batch_size"], cfg["validation_fraction"])
            job.progress = {
                "epoch": 0,
                "completed_epochs": 0,
                "total_epochs": int(cfg["epochs"]),
                "step": 0,
                "start_step": 0,
                "steps_per_epoch": spe,
                "total_steps": spe * int(cfg["epochs"]),
            }
            self._jobs[job_id] = job
            job.set_state("queued", now)
            job.add_event("job_pending", "Job created and queued", created_at=now)
            self._queue.append(job_id)
            self._wake.notify_all()
            return self._snapshot(job)

    def get(self, job_id: str, platform: str | None = None) -> dict[str, Any]:
        """Snapshot of one job (see :meth:`_snapshot` keys). Raises JobNotFound (also when ``platform``
        is given and differs)."""
        with self._lock:
            return self._snapshot(self._find(job_id, platform))

    def list(self, platform: str | None = None) -> list[dict[str, Any]]:
        """Snapshots of all jobs (of ``platform`` if given), oldest first."""
        with self._lock:
            jobs = sorted(self._jobs.values(), key=lambda j: j.created_at)
            return [self._snapshot(j) for j in jobs if platform is None or j.spec.platform == platform]

    def cancel(
        self,
        job_id: str,
        reason: str | None = None,
        preserve_checkpoints: bool = True,
        create_final_checkpoint: bool = False,
        force: bool = False,
        platform: str | None = None,
        request: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Request cancellation; return the snapshot right after acting (does not wait for the exit).

        queued → cancelled at once. initializing/running/cancelling → ``cancelling`` and a signal:
        SIGKILL if ``force``; else SIGTERM (trainer writes ``ckpt_final``) if ``create_final_checkpoint``,
        otherwise SIGINT (trainer stops without a final checkpoint); SIGKILL after ``grace_seconds``.
        ``preserve_checkpoints=False`` deletes the job's automatic checkpoint files after the exit (a final
        checkpoint explicitly requested with ``create_final_checkpoint`` is kept).
        Every call is recorded in ``cancel_requests`` with ``received_at``.
        Raises JobNotFound, StateConflict (job already terminal).
        """
        received_at = time.time()
        if self.config.cancel_delay_seconds > 0:
            time.sleep(self.config.cancel_delay_seconds)
        if self.config.fault_hook:
            self.config.fault_hook("cancel", job_id)
        with self._lock:
            job = self._find(job_id, platform)
            entry = {
                "received_at": received_at,
                "acted_at": time.time(),
                "state_at_request": job.state,  # when the cancel acted (after cancel_delay_seconds)
                "reason": reason,
                "preserve_checkpoints": preserve_checkpoints,
                "create_final_checkpoint": create_final_checkpoint,
                "force": force,
                "request": copy.deepcopy(request),
            }
            job.cancel_requests.append(entry)
            if job.state in TERMINAL_STATES:
                entry["outcome"] = "rejected"
                raise StateConflict(f"job {job_id} is already {job.state}", job.state)
            entry["outcome"] = "accepted"
            snap = self._snapshot(job)
            if job.cancel is None:
                job.cancel = {
                    "requested_at": received_at,
                    "reason": reason,
                    "preserve_checkpoints": preserve_checkpoints,
                    "create_final_checkpoint": create_final_checkpoint,
                    "force": force,
                    "state_at_request": job.state,  # when the cancel acted (after cancel_delay_seconds)
                    "estimated_savings_usd": max(
                        0.0, snap["cost"]["estimated_total_usd"] - snap["cost"]["current_usd"]
                    ),
                }
            else:
                job.cancel["preserve_checkpoints"] = preserve_checkpoints
                job.cancel["create_final_checkpoint"] |= create_final_checkpoint
                job.cancel["force"] |= force
            job.add_event("cancel_requested", f"Cancel requested: {reason or 'no reason given'}")
            if job.state == "queued":
                self._queue.remove(job_id)
                job.finish("cancelled")
                job.add_event("job_stopped", "Job cancelled before it started")
                return self._snapshot(job)
            if job.state != "cancelling":
                job.set_state("cancelling")
            if force:
                self._signal(job, signal.SIGKILL)
            else:
                self._signal(job, signal.SIGTERM if create_final_checkpoint else signal.SIGINT)
                if job.kill_timer is None:
                    job.kill_timer = threading.Timer(
                        self.config.grace_seconds, self._grace_expired, (job_id,)
                    )
                    job.kill_timer.daemon = True
                    job.kill_timer.start()
            return self._snapshot(job)

    def wait_for_terminal(self, job_id: str, timeout: float | None) -> bool:
        """Block until the job is terminal (process exited and recorded) or ``timeout`` s pass.

        Returns True if terminal. Raises JobNotFound.
        """
        with self._lock:
            event = self._find(job_id, None).terminal
        return event.wait(timeout)

    # ----------------------------------------------------------------------------- internals
    def _find(self, job_id: str, platform: str | None) -> JobRecord:
        job = self._jobs.get(job_id)
        if job is None or (platform is not None and job.spec.platform != platform):
            raise JobNotFound(f"job {job_id} not found")
        return job

    def _resolve_checkpoint(self, ref: str) -> str:
        if not os.path.isabs(ref) and "/" in ref:
            job_id, ckpt_id = ref.split("/", 1)
            job = self._jobs.get(job_id)
            if job is not None:
                for ckpt in job.checkpoints:
                    if ckpt["checkpoint_id"] == ckpt_id and os.path.isfile(ckpt["path"]):
                        return ckpt["path"]
        elif os.path.isfile(ref):
            return os.path.abspath(ref)
        raise InvalidJobSpec("resume_from", f"checkpoint {ref!r} not found")

    def _launch_loop(self) -> None:
        with self._lock:
            while not self._shutting_down:
                while self._queue:
                    job = self._jobs[self._queue[0]]
                    if self._gpus_in_use + job.spec.gpu_count > self.config.gpus:
                        break  # strict FIFO: the head waits for enough free GPUs
                    self._queue.popleft()
                    self._spawn(job)
                self._wake.wait()

    def _spawn(self, job: JobRecord) -> None:
        """Start the trainer for ``job`` (lock held, launcher thread)."""
        try:
            if self.config.fault_hook:
                self.config.fault_hook("spawn", job.job_id)
            env = dict(os.environ)
            env["PYTHONUNBUFFERED"] = "1"
            env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
            stderr_path = os.path.join(job.job_dir, "trainer.stderr.log")
            with open(stderr_path, "wb") as stderr:
                proc = subprocess.Popen(
                    [
                        self.config.python,
                        "-m",
                        "airflow_training_provider.local_platform.trainer",
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
        except Exception as exc:
            job.finish("failed", error=f"could not start trainer: {exc}")
            job.add_event("job_error", job.error or "", level="error")
            return
        job.proc, job.pid = proc, proc.pid
        job.started_at = time.time()
        self._gpus_in_use += job.spec.gpu_count
        job.set_state("initializing", job.started_at)
        job.add_event("job_start", f"Trainer process {proc.pid} started on {job.spec.gpu_count} GPU(s)")
        self._readers = [t for t in self._readers if t.is_alive()]
        reader = threading.Thread(
            target=self._read_loop, args=(job,), name=f"reader-{job.job_id}", daemon=True
        )
        self._readers.append(reader)
        reader.start()

    def _read_loop(self, job: JobRecord) -> None:
        assert job.proc is not None and job.proc.stdout is not None
        for line in job.proc.stdout:
            line = line.rstrip("\n")
            if not line:
                continue
            with self._lock:
                job.logs.append(line)
                job.updated_at = time.time()
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if isinstance(msg, dict):
                    try:
                        job.apply_report(msg)
                    except (KeyError, TypeError, ValueError) as exc:  # must not kill the reader
                        job.add_event(
                            "warning", f"unreadable trainer report {exc!r}: {line[:200]}", "warning"
                        )
        returncode = job.proc.wait()
        with self._lock:
            self._on_exit(job, returncode)

    def _on_exit(self, job: JobRecord, returncode: int) -> None:
        job.returncode = returncode
        self._gpus_in_use -= job.spec.gpu_count
        if job.kill_timer is not None:
            job.kill_timer.cancel()
        if job.state == "cancelling":
            how = f"by {job.stopped_seen['signal']}" if job.stopped_seen else f"with exit code {returncode}"
            job.finish("cancelled")
            if job.cancel and not job.cancel["preserve_checkpoints"]:
                self._delete_checkpoints(job, keep_final=bool(job.cancel["create_final_checkpoint"]))
            job.add_event("job_stopped", f"Job stopped due to cancel request (trainer exited {how})")
        elif self._shutting_down:
            job.finish("failed", error="local platform shut down while the job was running")
            job.add_event("job_error", job.error or "", level="error")
        elif returncode == 0 and job.completed_seen:
            job.finish("completed")
            job.add_event("job_complete", "Job completed")
        elif returncode == 0 and job.stopped_seen:
            job.cancel = job.cancel or {
                "reason": f"trainer stopped by {job.stopped_seen.get('signal')} outside the API"
            }
            job.finish("cancelled")
            job.add_event("job_stopped", job.cancel["reason"] or "Job stopped")
        else:
            job.finish("failed", error=job.trainer_error or self._exit_reason(job, returncode))
            job.add_event("job_error", job.error or "", level="error")
        self._wake.notify_all()

    def _exit_reason(self, job: JobRecord, returncode: int) -> str:
        if returncode < 0:
            return f"trainer killed by {signal.Signals(-returncode).name}"
        tail = ""
        try:
            with open(os.path.join(job.job_dir, "trainer.stderr.log"), errors="replace") as fh:
                lines = [ln.strip() for ln in fh.read().splitlines() if ln.strip()]
                tail = lines[-1] if lines else ""
        except OSError:
            pass
        return f"trainer exited with code {returncode}" + (f": {tail}" if tail else "")

    def _delete_checkpoints(self, job: JobRecord, keep_final: bool) -> None:
        kept = []
        for ckpt in job.checkpoints:
            if keep_final and ckpt["kind"] == "final":
                kept.append(ckpt)
                continue
            try:
                os.remove(ckpt["path"])
            except FileNotFoundError:
                pass
            job.deleted_checkpoints.append({**ckpt, "deleted_at": time.time()})
        job.checkpoints = kept
        if not kept:
            shutil.rmtree(os.path.join(job.job_dir, "checkpoints"), ignore_errors=True)
            os.makedirs(os.path.join(job.job_dir, "checkpoints"), exist_ok=True)

    def _signal(self, job: JobRecord, sig: signal.Signals) -> None:
        if job.proc is None or job.returncode is not None:
            return
        try:
            job.proc.send_signal(sig)  # no-op if already reaped, so no risk of hitting a recycled pid
        except OSError:
            return
        job.add_event("signal_sent", f"Sent {sig.name} to trainer {job.pid}", signal=sig.name)

    def _grace_expired(self, job_id: str) -> None:
        with self._lock:
            job = self._jobs[job_id]
            if job.returncode is None and job.proc is not None:
                job.add_event("warning", "Grace period expired; killing trainer", level="warning")
                self._signal(job, signal.SIGKILL)

    def _estimated_wait(self, job: JobRecord) -> float:
        """Seconds until a queued job should start (rough: when enough live jobs ahead have finished)."""
        position = self._queue.index(job.job_id) if job.job_id in self._queue else 0
        if position == 0 and self.config.gpus - self._gpus_in_use >= job.spec.gpu_count:
            return 0.0
        startup = self.config.startup_seconds_estimate
        live = sorted(j.remaining_seconds(startup) for j in self._jobs.values() if j.state in LIVE_STATES)
        return live[min(position, len(live) - 1)] if live else 0.0

    def _snapshot(self, job: JobRecord) -> dict[str, Any]:
        """Snapshot of a job (lock held): :meth:`JobRecord.snapshot` keys plus ``cost``
        {wall_seconds, gpu_seconds, current_usd, estimated_total_usd, usd_per_gpu_hour},
        ``estimated_remaining_seconds`` (queued: expected run time), ``estimated_start_at``, ``queue_position``."""
        now = time.time()
        remaining = job.remaining_seconds(self.config.startup_seconds_estimate, now)
        queued = job.state == "queued" and job.job_id in self._queue
        return job.snapshot(
            cost=job.cost(self.config.usd_per_gpu_hour, remaining, now),
            estimated_remaining_seconds=remaining,
            estimated_start_at=now + self._estimated_wait(job) if queued else job.started_at,
            queue_position=self._queue.index(job.job_id) if queued else None,
        )
