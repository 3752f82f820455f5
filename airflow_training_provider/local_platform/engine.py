"""Job engine of the local training platform: processes, GPU slots, checkpoints, cost. No wire format.

Routers (one per emulated platform) translate their wire protocol into calls on :class:`TrainingEngine`
and render the plain-dict records it returns. Every job runs the real trainer
(:mod:`airflow_training_provider.local_platform.trainer`) as a child OS process.

Lifecycle: [``pending`` (accepted, for ``JobSpec.pending_seconds``) →] ``queued`` (waiting for enough free
simulated GPUs) → ``initializing`` (process started) → ``running`` (first step/epoch line) →
[``finalizing`` (post-processing stages of ``JobSpec.finalize_stages``, no GPU held) →] ``completed`` |
``failed``; a cancel moves a live job to ``cancelling`` until its process exits, then ``cancelled`` (a
pending, queued or finalizing job is cancelled at once).

Cancels come from a client (:meth:`TrainingEngine.cancel`) or from the platform itself
(:meth:`TrainingEngine.platform_cancel`: a failed start-up integration, ``JobSpec.cancel_on_start``, or a
spending budget running out, :meth:`TrainingEngine.set_budget`); both are recorded in ``cancel_requests``
and ``cancel`` with ``initiator`` ``"user"`` or ``"platform"``.

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
import uuid
from collections.abc import Callable, Iterable
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
    "BudgetExhausted",
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


class BudgetExhausted(EngineError):
    """The platform's spending budget (see :meth:`TrainingEngine.set_budget`) is used up."""


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
    budget_check_seconds: how often spending budgets are checked while jobs run.
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
    budget_check_seconds: float = 0.2


_CANCEL_AT_ONCE = frozenset({"pending", "queued", "finalizing"})
"""States without a trainer process: a cancel ends the job immediately."""


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
        self._budgets: dict[str, dict[str, Any]] = {}
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
                for job in self._jobs.values():
                    if job.state in ("pending", "finalizing"):
                        job.finish("failed", error=f"local platform shut down while the job was {job.state}")
                        job.add_event("job_error", job.error or "", level="error")
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
        """Queue a job; return its snapshot (state ``queued``, or ``pending`` if ``spec.pending_seconds``).

        Raises InvalidJobSpec (unknown dataset, gpu_count outside 1..gpus, unknown resume checkpoint),
        BudgetExhausted (the platform's budget is used up) and EngineError if the engine is shutting down.
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
            budget = self._budgets.get(spec.platform)
            if budget is not None and budget["exhausted_at"] is not None:
                raise BudgetExhausted(
                    f"spending budget of {budget['limit_usd']} USD for {spec.platform} is used up"
                )
            resume_path = self._resolve_checkpoint(spec.resume_from) if spec.resume_from else None
            job_id = self._new_id(spec)
            while job_id in self._jobs:
                job_id = self._new_id(spec)
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
            if spec.pending_seconds > 0:
                job.set_state("pending", now)
                job.advance_at = now + spec.pending_seconds
                job.add_event("job_pending", "Job created", created_at=now)
            else:
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
        message: str | None = None,
    ) -> dict[str, Any]:
        """Request cancellation; return the snapshot right after acting (does not wait for the exit).

        pending/queued/finalizing → cancelled at once. initializing/running/cancelling → ``cancelling``
        and a signal:
        SIGKILL if ``force``; else SIGTERM (trainer writes ``ckpt_final``) if ``create_final_checkpoint``,
        otherwise SIGINT (trainer stops without a final checkpoint); SIGKILL after ``grace_seconds``.
        ``preserve_checkpoints=False`` deletes the job's automatic checkpoint files after the exit (a final
        checkpoint explicitly requested with ``create_final_checkpoint`` is kept).
        Every call is recorded in ``cancel_requests`` with ``received_at`` and ``initiator: "user"``.
        ``message`` is the ``cancel_requested`` event's text (default ``"Cancel requested: <reason>"``).
        Raises JobNotFound, StateConflict (job already terminal).
        """
        received_at = time.time()
        if self.config.cancel_delay_seconds > 0:
            time.sleep(self.config.cancel_delay_seconds)
        if self.config.fault_hook:
            self.config.fault_hook("cancel", job_id)
        with self._lock:
            job = self._find(job_id, platform)
            return self._cancel_locked(
                job,
                received_at,
                reason,
                preserve_checkpoints,
                create_final_checkpoint,
                force,
                request,
                message or f"Cancel requested: {reason or 'no reason given'}",
                "user",
            )

    def platform_cancel(
        self,
        job_id: str,
        reason: str,
        events: Iterable[dict[str, Any]] = (),
        message: str | None = None,
    ) -> dict[str, Any]:
        """The platform itself cancels a job (a failed start-up integration, a budget run out...).

        ``events`` (``{"type", "message", "level"?, ...}``) are recorded first, explaining why; then the job
        is cancelled like a client cancel without a final checkpoint (checkpoints kept), with a
        ``cancel_requested`` event whose text is ``message`` (default ``reason``). Recorded in
        ``cancel_requests`` / ``cancel`` with ``initiator: "platform"``. Raises JobNotFound, StateConflict.
        """
        with self._lock:
            job = self._find(job_id, None)
            if job.state in TERMINAL_STATES:
                raise StateConflict(f"job {job_id} is already {job.state}", job.state)
            return self._platform_cancel_locked(job, reason, events, message)

    def set_budget(
        self, platform: str, limit_usd: float, reason: str, events: Iterable[dict[str, Any]] = ()
    ) -> None:
        """Give ``platform`` a spending budget (an account balance) of ``limit_usd`` USD, shared by all its
        jobs (their cost, see :meth:`JobRecord.cost`). When the spend reaches it, every unfinished job of the
        platform is cancelled with :meth:`platform_cancel` (``reason``, ``events``) and new submits raise
        BudgetExhausted. Checked every ``budget_check_seconds``."""
        with self._lock:
            self._budgets[platform] = {
                "platform": platform,
                "limit_usd": float(limit_usd),
                "reason": reason,
                "events": [dict(e) for e in events],
                "exhausted_at": None,
            }
            self._wake.notify_all()

    def _platform_cancel_locked(
        self, job: JobRecord, reason: str, events: Iterable[dict[str, Any]], message: str | None
    ) -> dict[str, Any]:
        for event in events:
            event = dict(event)
            job.add_event(event.pop("type"), event.pop("message", ""), event.pop("level", "info"), **event)
        return self._cancel_locked(
            job, time.time(), reason, True, False, False, None, message or reason, "platform"
        )

    def _cancel_locked(
        self,
        job: JobRecord,
        received_at: float,
        reason: str | None,
        preserve_checkpoints: bool,
        create_final_checkpoint: bool,
        force: bool,
        request: dict[str, Any] | None,
        message: str,
        initiator: str,
    ) -> dict[str, Any]:
        job_id = job.job_id
        entry = {
            "received_at": received_at,
            "acted_at": time.time(),
            "state_at_request": job.state,  # when the cancel acted (after cancel_delay_seconds)
            "reason": reason,
            "preserve_checkpoints": preserve_checkpoints,
            "create_final_checkpoint": create_final_checkpoint,
            "force": force,
            "request": copy.deepcopy(request),
            "initiator": initiator,
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
                "initiator": initiator,
                "state_at_request": job.state,  # when the cancel acted (after cancel_delay_seconds)
                "estimated_savings_usd": max(
                    0.0, snap["cost"]["estimated_total_usd"] - snap["cost"]["current_usd"]
                ),
            }
        else:
            job.cancel["preserve_checkpoints"] = preserve_checkpoints
            job.cancel["create_final_checkpoint"] |= create_final_checkpoint
            job.cancel["force"] |= force
        job.add_event("cancel_requested", message)
        if job.state in _CANCEL_AT_ONCE:
            if job_id in self._queue:
                self._queue.remove(job_id)
            was = job.state
            job.finish("cancelled")
            job.add_event(
                "job_stopped",
                "Job cancelled while finalizing"
                if was == "finalizing"
                else "Job cancelled before it started",
            )
            self._wake.notify_all()
            return self._snapshot(job)
        if job.state != "cancelling":
            job.set_state("cancelling")
        if force:
            self._signal(job, signal.SIGKILL)
        else:
            self._signal(job, signal.SIGTERM if create_final_checkpoint else signal.SIGINT)
            if job.kill_timer is None:
                job.kill_timer = threading.Timer(self.config.grace_seconds, self._grace_expired, (job_id,))
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

    def _new_id(self, spec: JobSpec) -> str:
        suffix = str(uuid.uuid4()) if spec.id_style == "uuid4" else secrets.token_hex(6)
        return f"{spec.id_prefix}{suffix}"

    def _launch_loop(self) -> None:
        """Spawn queued jobs when GPUs free up, and run the timed transitions (pending → queued,
        finalizing stages, budget checks): everything time-driven happens on this one thread."""
        with self._lock:
            while not self._shutting_down:
                now = time.time()
                self._advance_due(now)
                self._check_budgets(now)
                while self._queue:
                    job = self._jobs[self._queue[0]]
                    if self._gpus_in_use + job.spec.gpu_count > self.config.gpus:
                        break  # strict FIFO: the head waits for enough free GPUs
                    self._queue.popleft()
                    self._spawn(job)
                self._wake.wait(self._next_wakeup(now))

    def _next_wakeup(self, now: float) -> float | None:
        """Seconds until the launcher must look again (None: only when notified)."""
        due = [j.advance_at for j in self._jobs.values() if j.advance_at is not None]
        wait = max(0.0, min(due) - now) if due else None
        budgeted = {p for p, b in self._budgets.items() if b["exhausted_at"] is None}
        if any(j.spec.platform in budgeted and j.state in LIVE_STATES for j in self._jobs.values()):
            wait = (
                min(wait, self.config.budget_check_seconds)
                if wait is not None
                else self.config.budget_check_seconds
            )
        return wait

    def _advance_due(self, now: float) -> None:
        for job in list(self._jobs.values()):
            if job.advance_at is None or job.advance_at > now:
                continue
            job.advance_at = None
            if job.state == "pending":
                job.set_state("queued", now)
                self._queue.append(job.job_id)
            elif job.state == "finalizing":
                self._next_stage(job)

    def _next_stage(self, job: JobRecord) -> None:
        """Enter the job's next finalizing stage, or complete it after the last one (lock held)."""
        job.stage_index += 1
        stages = job.spec.finalize_stages
        if job.stage_index >= len(stages):
            job.finish("completed")
            job.add_event("job_complete", "Job completed")
            return
        stage = stages[job.stage_index]
        now = time.time()
        job.set_state("finalizing", now, stage=stage["name"])
        job.add_event(stage["event_type"], stage.get("message", ""))
        job.advance_at = now + float(stage.get("seconds", 0.0))

    def _spent(self, platform: str, now: float) -> float:
        rate = self.config.usd_per_gpu_hour
        return sum(
            j.cost(rate, 0.0, now)["current_usd"] for j in self._jobs.values() if j.spec.platform == platform
        )

    def _check_budgets(self, now: float) -> None:
        for platform, budget in self._budgets.items():
            if budget["exhausted_at"] is not None or self._spent(platform, now) < budget["limit_usd"]:
                continue
            budget["exhausted_at"] = now
            for job in sorted(self._jobs.values(), key=lambda j: j.created_at):
                if job.spec.platform == platform and job.state in (
                    "pending",
                    "queued",
                    "initializing",
                    "running",
                ):
                    self._platform_cancel_locked(job, budget["reason"], budget["events"], None)

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
                    if msg.get("type") == "started":
                        self._on_started(job)
        returncode = job.proc.wait()
        with self._lock:
            self._on_exit(job, returncode)

    def _on_started(self, job: JobRecord) -> None:
        """The trainer loaded its data and model (lock held): record the spec's start-up events and run
        its start-up cancel, if any."""
        for event in job.spec.started_events:
            event = dict(event)
            job.add_event(event.pop("type"), event.pop("message", ""), event.pop("level", "info"), **event)
        plan = job.spec.cancel_on_start
        if plan and job.state not in TERMINAL_STATES and job.state != "cancelling":
            self._platform_cancel_locked(job, plan["reason"], plan.get("events", ()), plan.get("message"))

    def _on_exit(self, job: JobRecord, returncode: int) -> None:
        job.returncode = returncode
        job.exited_at = time.time()
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
            if job.spec.finalize_stages:
                self._next_stage(job)
            else:
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
