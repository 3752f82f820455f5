"""The job engine of the local training platform: one lock over job records, the GPU queue, trainer
processes, billing and checkpoints. No wire format.

Each platform's sub-application translates its wire protocol into calls on :class:`TrainingEngine`
and renders the plain-dict records it returns. Every job runs the real trainer
(:mod:`airflow_training_platform.trainer`) as a child OS process, unless its spec carries a user
program (``JobSpec.program``, :mod:`.programs`) and the engine allows user code
(``EngineConfig.allow_user_code``): then that program runs, in its own directory, process group and
clean environment. A program job is ``starting`` while its platform prepares it (code, data,
checkpoints), ``running`` once its process started, and ends by its exit status: 0 → ``succeeded``,
anything else → ``failed`` (the reason from its failure file or its last output lines).

Lifecycle (neutral states, :data:`~.records.JOB_STATES`): [``pending`` (for ``JobSpec.pending_seconds``)
→] ``queued`` (waiting for enough free simulated GPUs) → ``starting`` (GPUs taken; process being
started, then loading) → ``running`` (first step/epoch line) → [``finalizing`` (post-processing
stages of ``JobSpec.finalize_stages``, no GPU held) →] ``succeeded`` | ``failed``; a cancel moves a
live job to ``stopping`` until its process exits, then ``cancelled`` (a pending, queued or
finalizing job is cancelled at once).

Cancels come from a client (:meth:`TrainingEngine.cancel`) or from the platform itself
(:meth:`TrainingEngine.platform_cancel`: a failed start-up integration, ``JobSpec.cancel_on_start``, a
spending budget running out, :meth:`TrainingEngine.set_budget`, or ``JobSpec.max_runtime_seconds``);
both are recorded in ``cancel_requests`` and ``cancel`` with ``initiator`` ``"user"`` or ``"platform"``.

One lock guards every record, and it is held only for work on records in memory: processes are
started, and files read, without it (a fork server round trip takes seconds while it still imports
scikit-learn), so no request waits for a trainer or a program to start or stop. A job whose
process is still being started is ``starting`` without one; a cancel then is delivered to the
process as soon as it exists.

Times are ``time.time()`` floats (unix seconds, UTC); money is USD; durations are seconds.
"""

from __future__ import annotations

import collections
import copy
import math
import os
import queue
import secrets
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from airflow_training_platform import trainer as trainer_mod
from airflow_training_platform.engine.billing import Budgets, job_cost
from airflow_training_platform.engine.checkpoints import (
    CheckpointNotFound,
    add_checkpoint,
    delete_checkpoints,
    resolve_checkpoint,
)
from airflow_training_platform.engine.processes import TrainerProcesses
from airflow_training_platform.engine.programs import ProgramExit, ProgramProcess
from airflow_training_platform.engine.programs import read_log as read_program_log
from airflow_training_platform.engine.records import (
    LIVE_STATES,
    TERMINAL_STATES,
    JobRecord,
    JobSpec,
)
from airflow_training_platform.engine.reports import decode as decode_report
from airflow_training_platform.engine.scheduler import GpuQueue


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


USER_CODE_FLAG = "--allow-user-code"
"""The server flag that lets jobs run code named in their requests (``EngineConfig.allow_user_code``)."""

USER_CODE_REFUSED = (
    "this local training platform runs no code named in a request: start it with "
    f"'airflow-training-platform serve {USER_CODE_FLAG}' (LocalPlatformServer(..., allow_user_code=True))"
)
"""The message of a user-program job refused because the engine does not allow user code."""


class InvalidJobSpec(EngineError):
    """A job spec value is unusable; ``field`` names the offending spec field."""

    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name


@dataclass
class EngineConfig:
    """Engine options (the local platform's settings hold the user-facing ones).

    data_dir: root directory; each job gets ``<data_dir>/jobs/<job_id>/`` (checkpoints/, trainer.stderr.log).
    gpus: simulated GPUs = concurrency slots; a job holds ``gpu_count`` of them while its process lives.
    usd_per_gpu_hour: price; see :mod:`.billing`.
    seconds_per_epoch: default trainer pacing (seconds) when a job does not set it.
    grace_seconds: after a graceful stop signal, seconds before the trainer is SIGKILLed (unless the
        job's spec sets its own ``stop_grace_seconds``).
    cancel_delay_seconds: test option; :meth:`TrainingEngine.cancel` sleeps this long before acting.
    spawn_delay_seconds: test option; every trainer start takes this much longer (as a cold fork
        server importing scikit-learn does), to show that no request waits for one.
    startup_seconds_estimate: assumed process start-up time, for estimates only.
    max_log_lines: trainer stdout lines kept per job (oldest dropped).
    budget_check_seconds: how often spending budgets and run-time limits are checked while jobs run.
    python: interpreter used for trainer processes.
    fork_server: fork trainers from one warm process that imported scikit-learn once (Linux), instead
        of starting a new interpreter per job (seconds of CPU each).
    allow_user_code: run jobs whose spec carries a user program (``JobSpec.program``); ``False`` (the
        default) refuses them (:data:`USER_CODE_REFUSED`): such a program is code named by whoever
        can reach the API.
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
    spawn_delay_seconds: float = 0.0
    startup_seconds_estimate: float = 5.0
    max_log_lines: int = 2000
    python: str = sys.executable
    fault_hook: Callable[[str, str], None] | None = None
    budget_check_seconds: float = 0.2
    fork_server: bool = True
    allow_user_code: bool = False


_CANCEL_AT_ONCE = frozenset({"pending", "queued", "finalizing"})
"""States without a trainer process: a cancel ends the job immediately."""


@dataclass(frozen=True)
class CancelRequest:
    """One request to cancel a job, from a client (:meth:`TrainingEngine.cancel`) or from the platform
    itself (:meth:`TrainingEngine.platform_cancel`, budgets, run-time limits, ``cancel_on_start``).

    initiator: ``"user"`` or ``"platform"``.
    received_at: when the request arrived (``time.time()``; a client cancel acts after
        ``cancel_delay_seconds``).
    reason: why, as the caller gave it (``None``: no reason given).
    message: the text of the job's ``cancel_requested`` event.
    preserve_checkpoints: ``False`` deletes the job's checkpoint files when its trainer exits after the
        cancel (a final checkpoint asked for with ``create_final_checkpoint`` is kept).
    create_final_checkpoint: stop the trainer with SIGTERM, which writes ``ckpt_final``; else SIGINT.
    force: SIGKILL the trainer at once instead of stopping it gracefully.
    request: the raw request body, recorded verbatim (a copy) in ``cancel_requests``.
    """

    initiator: Literal["user", "platform"]
    received_at: float
    reason: str | None
    message: str
    preserve_checkpoints: bool = True
    create_final_checkpoint: bool = False
    force: bool = False
    request: dict[str, Any] | None = None


class TrainingEngine:
    """Runs training jobs as child processes on simulated GPU slots. Thread-safe (one lock).

    Call :meth:`start` before submitting (starts the launcher and spawner threads) and :meth:`shutdown`
    at the end.
    Public methods return plain-dict snapshots (see :meth:`get`), never live objects.
    """

    def __init__(self, config: EngineConfig):
        self.config = config
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._jobs: dict[str, JobRecord] = {}
        self._queue = GpuQueue(config.gpus)
        self._budgets = Budgets(config.usd_per_gpu_hour)
        fork_log = os.path.join(config.data_dir, "fork-server.log") if config.fork_server else None
        self._processes = TrainerProcesses(config.python, self._on_line, self._on_exit, fork_log)
        self._runners: list[threading.Thread] = []
        self._shutting_down = False
        self._launcher: threading.Thread | None = None
        self._spawner: threading.Thread | None = None
        self._to_spawn: queue.SimpleQueue[JobRecord | None] = queue.SimpleQueue()  # None: stop
        os.makedirs(os.path.join(config.data_dir, "jobs"), exist_ok=True)

    # ----------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start the launcher thread (the GPU queue, timed transitions) and the spawner thread (trainer
        processes; idempotent). Trainers and the fork server are started from the spawner, so it
        must live as long as the engine: PR_SET_PDEATHSIG fires when the *thread* that forked a
        child exits."""
        with self._lock:
            if self._launcher is not None:
                return
            self._spawner = threading.Thread(target=self._spawn_loop, name="engine-spawner", daemon=True)
            self._launcher = threading.Thread(target=self._launch_loop, name="engine-launcher", daemon=True)
            self._spawner.start()
            self._launcher.start()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Kill every trainer (SIGKILL), fail unfinished jobs ("local platform shut down"), stop threads.

        Idempotent; returns after the children are reaped or ``timeout`` seconds passed.
        """
        with self._lock:
            first = not self._shutting_down
            self._shutting_down = True
            if first:
                for job_id in self._queue:
                    self._jobs[job_id].finish("failed", error="local platform shut down before start")
                self._queue.clear()
                for job in self._jobs.values():
                    if job.state in ("pending", "finalizing"):
                        job.finish("failed", error=f"local platform shut down while the job was {job.state}")
                        job.add_event("job_error", job.error or "", level="error")
            jobs = list(self._jobs.values()) if first else []
            for job in jobs:
                if job.program_process is not None:
                    job.program_process.signal(signal.SIGKILL)  # the whole group
            runners = list(self._runners)
            if first:
                self._to_spawn.put(None)  # after the trainers handed over: they end unstarted
            self._wake.notify_all()
        self._processes.kill_all([j for j in jobs if j.spec.program is None], timeout)
        deadline = time.monotonic() + timeout
        for runner in runners:
            if runner is not threading.current_thread():
                runner.join(max(0.1, deadline - time.monotonic()))
        for thread in (self._launcher, self._spawner):
            if thread is not None and thread is not threading.current_thread():
                thread.join(max(0.1, deadline - time.monotonic()))

    # ----------------------------------------------------------------------------- API
    def submit(self, spec: JobSpec) -> dict[str, Any]:
        """Queue a job; return its snapshot (state ``queued``, or ``pending`` if ``spec.pending_seconds``).

        Raises InvalidJobSpec (unknown dataset, gpu_count outside 1..gpus, unknown resume checkpoint, a
        user program while user code is not allowed: field ``program``), BudgetExhausted (the platform's
        budget is used up) and EngineError if the engine is shutting down.
        """
        if spec.program is not None and not self.config.allow_user_code:
            raise InvalidJobSpec("program", USER_CODE_REFUSED)
        if spec.program is None and spec.dataset not in trainer_mod.DATASETS:
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
            budget = self._budgets.exhausted(spec.platform)
            if budget is not None:
                raise BudgetExhausted(
                    f"spending budget of {budget.limit_usd} USD for {spec.platform} is used up"
                )
            try:
                resume_path = resolve_checkpoint(self._jobs, spec.resume_from) if spec.resume_from else None
            except CheckpointNotFound as exc:
                raise InvalidJobSpec("resume_from", str(exc)) from None
            job_id = self._new_id(spec)
            while job_id in self._jobs:
                job_id = self._new_id(spec)
            job = self._new_record(job_id, spec, resume_path)
            self._jobs[job_id] = job
            now = job.created_at
            if spec.pending_seconds > 0:
                job.set_state("pending", now)
                job.advance_at = now + spec.pending_seconds
                job.add_event("job_pending", "Job created", created_at=now)
            else:
                job.set_state("queued", now)
                job.add_event("job_pending", "Job created and queued", created_at=now)
                self._queue.enqueue(job_id)
            self._wake.notify_all()
            return self._snapshot(job)

    def get(self, job_id: str, platform: str | None = None) -> dict[str, Any]:
        """Snapshot of one job (see :meth:`_snapshot` keys). Raises JobNotFound (also when ``platform``
        is given and differs)."""
        with self._lock:
            return self._snapshot(self._find(job_id, platform))

    def list(
        self,
        platform: str | None = None,
        tags: Iterable[str] = (),
        states: Iterable[str] | None = None,
        created_between: tuple[float, float] | None = None,
    ) -> list[dict[str, Any]]:
        """Snapshots of all jobs (of ``platform`` if given, carrying every one of ``tags``, in one
        of ``states`` if given, created within ``created_between`` (UNIX seconds, inclusive) if
        given), oldest first. Filtered before the snapshots are built: a test harness, and a
        provider's coalesced status reads, list while hundreds of jobs exist."""
        wanted = set(tags)
        in_states = None if states is None else set(states)
        low, high = created_between or (-math.inf, math.inf)
        with self._lock:
            jobs = sorted(self._jobs.values(), key=lambda j: j.created_at)
            live = self._live()
            return [
                self._snapshot(j, live)
                for j in jobs
                if (platform is None or j.spec.platform == platform)
                and wanted <= set(j.spec.tags)
                and (in_states is None or j.state in in_states)
                and low <= j.created_at <= high
            ]

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

        pending/queued/finalizing → cancelled at once. starting/running/stopping → ``stopping`` and a
        signal: SIGKILL if ``force``; else SIGTERM (trainer writes ``ckpt_final``) if
        ``create_final_checkpoint``, otherwise SIGINT (trainer stops without a final checkpoint); SIGKILL
        after the stop grace. ``preserve_checkpoints=False`` deletes the job's automatic checkpoint files
        after the exit (a final checkpoint explicitly requested with ``create_final_checkpoint`` is kept).
        Every call is recorded in ``cancel_requests`` with ``received_at`` and ``initiator: "user"``.
        ``message`` is the ``cancel_requested`` event's text (default ``"Cancel requested: <reason>"``).
        Raises JobNotFound, StateConflict (job already terminal).
        """
        received_at = time.time()
        if self.config.cancel_delay_seconds > 0:
            time.sleep(self.config.cancel_delay_seconds)
        if self.config.fault_hook:
            self.config.fault_hook("cancel", job_id)
        cancel = CancelRequest(
            initiator="user",
            received_at=received_at,
            reason=reason,
            message=message or f"Cancel requested: {reason or 'no reason given'}",
            preserve_checkpoints=preserve_checkpoints,
            create_final_checkpoint=create_final_checkpoint,
            force=force,
            request=request,
        )
        with self._lock:
            return self._cancel_locked(self._find(job_id, platform), cancel)

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
        jobs (:func:`.billing.job_cost`). When the spend reaches it, every unfinished job of the platform
        is cancelled with :meth:`platform_cancel` (``reason``, ``events``) and new submits raise
        BudgetExhausted. Checked every ``budget_check_seconds``."""
        with self._lock:
            self._budgets.set(platform, limit_usd, reason, events)
            self._wake.notify_all()

    def estimate_price(
        self, platform: str, epochs: int, gpu_count: int = 1, seconds_per_epoch: float | None = None
    ) -> dict[str, float | None]:
        """What a job of ``epochs`` epochs would cost before it is submitted.

        :returns: ``{"run_seconds", "estimated_usd", "balance_left_usd"}``: the expected trainer run time
            (start-up estimate + ``epochs x seconds_per_epoch``, default the engine's pacing), its price
            at ``usd_per_gpu_hour x gpu_count`` (:mod:`.billing`), and what is left of ``platform``'s
            budget (``None``: no budget).
        """
        pacing = self.config.seconds_per_epoch if seconds_per_epoch is None else seconds_per_epoch
        run_seconds = self.config.startup_seconds_estimate + max(0, epochs) * pacing
        with self._lock:
            left = self._budgets.left_usd(platform, self._jobs.values(), time.time())
        return {
            "run_seconds": run_seconds,
            "estimated_usd": self.config.usd_per_gpu_hour * gpu_count * run_seconds / 3600.0,
            "balance_left_usd": left,
        }

    def backdate(self, job_id: str, seconds: float) -> dict[str, Any]:
        """Move the job's creation time ``seconds`` into the past (for tests of lists bounded in
        time, e.g. PAI's 7-day window); its snapshot. Raises JobNotFound."""
        with self._lock:
            job = self._find(job_id, None)
            job.created_at -= seconds
            return self._snapshot(job)

    def set_tags(self, job_id: str, tags: list[str]) -> dict[str, Any]:
        """Replace the job's tags (``"key:value"`` strings); its snapshot. Raises JobNotFound."""
        with self._lock:
            job = self._find(job_id, None)
            job.spec.tags = list(tags)
            return self._snapshot(job)

    def delete(self, job_id: str, platform: str | None = None) -> dict[str, Any]:
        """Forget an ended job (a platform's delete): afterwards :meth:`get` raises JobNotFound and
        :meth:`list` omits it; its checkpoint and output files stay where they were written (the
        platforms' storage, not the job), and what it spent still counts against its platform's
        budget. Returns its last snapshot.

        :raises JobNotFound: no such job (of ``platform``, when given).
        :raises StateConflict: the job has not ended (a platform stops it first, or refuses).
        """
        with self._lock:
            job = self._find(job_id, platform)
            if job.state not in TERMINAL_STATES:
                raise StateConflict(f"job {job_id} is still {job.state}", job.state)
            del self._jobs[job_id]
            self._budgets.forget(job, time.time())
            return self._snapshot(job)

    def read_log(
        self, job_id: str, start: int = 0, limit: int = 1000, platform: str | None = None
    ) -> dict[str, Any]:
        """The output of a user program job, as its log file holds it (:func:`.programs.read_log`).

        :param start: index (0-based) of the first line wanted; :param limit: most lines returned.
        :returns: ``{"lines": [{"t": epoch seconds, "line": text}], "next": index after the last}``;
            no lines for a built-in trainer job or a program not started yet.
        :raises JobNotFound: no such job (of ``platform``, when given).
        """
        with self._lock:
            path = (self._find(job_id, platform).program or {}).get("log_file")
        if path is None:
            return {"lines": [], "next": start}
        return read_program_log(path, start, limit)

    def wait_for_terminal(self, job_id: str, timeout: float | None) -> bool:
        """Block until the job is terminal (process exited and recorded) or ``timeout`` s pass.

        Returns True if terminal. Raises JobNotFound.
        """
        with self._lock:
            event = self._find(job_id, None).terminal
        return event.wait(timeout)

    # ----------------------------------------------------------------------------- cancelling
    def _platform_cancel_locked(
        self,
        job: JobRecord,
        reason: str,
        events: Iterable[dict[str, Any]],
        message: str | None,
        create_final_checkpoint: bool = False,
    ) -> dict[str, Any]:
        for event in events:
            event = dict(event)
            job.add_event(event.pop("type"), event.pop("message", ""), event.pop("level", "info"), **event)
        cancel = CancelRequest(
            initiator="platform",
            received_at=time.time(),
            reason=reason,
            message=message or reason,
            create_final_checkpoint=create_final_checkpoint,
        )
        return self._cancel_locked(job, cancel)

    def _cancel_locked(self, job: JobRecord, cancel: CancelRequest) -> dict[str, Any]:
        """Act on ``cancel`` (lock held); the job's snapshot right after.

        Records the request in ``job.cancel_requests`` (outcome ``rejected`` or ``accepted``) and, the
        first time, in ``job.cancel`` (with the estimated savings); a later request updates
        ``preserve_checkpoints`` and can only turn ``create_final_checkpoint`` and ``force`` on. A job
        without a trainer process (pending, queued, finalizing) is cancelled at once; a live one is (or
        stays) ``stopping`` and its trainer gets SIGKILL (``force``), else SIGTERM
        (``create_final_checkpoint``) or SIGINT, with SIGKILL after the stop grace; :meth:`_on_exit`
        finishes the job when the trainer exits.

        Raises StateConflict if the job is already terminal.
        """
        entry = {
            "received_at": cancel.received_at,
            "acted_at": time.time(),
            "state_at_request": job.state,  # when the cancel acted (after cancel_delay_seconds)
            "reason": cancel.reason,
            "preserve_checkpoints": cancel.preserve_checkpoints,
            "create_final_checkpoint": cancel.create_final_checkpoint,
            "force": cancel.force,
            "request": copy.deepcopy(cancel.request),
            "initiator": cancel.initiator,
        }
        job.cancel_requests.append(entry)
        if job.state in TERMINAL_STATES:
            entry["outcome"] = "rejected"
            raise StateConflict(f"job {job.job_id} is already {job.state}", job.state)
        entry["outcome"] = "accepted"
        if job.cancel is None:
            cost = self._snapshot(job)["cost"]
            job.cancel = {
                "requested_at": cancel.received_at,
                "reason": cancel.reason,
                "preserve_checkpoints": cancel.preserve_checkpoints,
                "create_final_checkpoint": cancel.create_final_checkpoint,
                "force": cancel.force,
                "initiator": cancel.initiator,
                "state_at_request": job.state,
                "estimated_savings_usd": max(0.0, cost["estimated_total_usd"] - cost["current_usd"]),
            }
        else:
            job.cancel["preserve_checkpoints"] = cancel.preserve_checkpoints
            job.cancel["create_final_checkpoint"] |= cancel.create_final_checkpoint
            job.cancel["force"] |= cancel.force
        job.add_event("cancel_requested", cancel.message)
        if job.state in _CANCEL_AT_ONCE:
            self._queue.remove(job.job_id)
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
        if job.state != "stopping":
            job.set_state("stopping")
        if cancel.force:
            self._signal(job, signal.SIGKILL)
        else:
            self._signal(job, signal.SIGTERM if cancel.create_final_checkpoint else signal.SIGINT)
            self._arm_grace(job)
        return self._snapshot(job)

    def _signal(self, job: JobRecord, sig: signal.Signals) -> None:
        if job.spec.program is not None:
            # a user program has one stop: SIGTERM to its process group (the trainer's SIGINT,
            # "stop without a final checkpoint", means nothing to it), SIGKILL after the grace
            sig = signal.SIGTERM if sig == signal.SIGINT else sig
            process = job.program_process  # None while its platform still prepares it
            if process is not None and process.signal(sig):
                job.add_event(
                    "signal_sent", f"Sent {sig.name} to program process group {process.pid}", signal=sig.name
                )
            return
        if self._processes.signal(job, sig):
            job.add_event("signal_sent", f"Sent {sig.name} to trainer {job.pid}", signal=sig.name)

    def _grace_expired(self, job_id: str) -> None:
        with self._lock:
            job = self._jobs[job_id]
            if job.returncode is None and job.proc is not None:  # no process yet: see _deliver_stop
                job.add_event("warning", "Grace period expired; killing trainer", level="warning")
                if job.program_process is not None:
                    job.program_process.killed_after_grace = True
                self._signal(job, signal.SIGKILL)

    def _arm_grace(self, job: JobRecord) -> None:
        grace = job.spec.stop_grace_seconds
        self._processes.arm_grace(
            job, self.config.grace_seconds if grace is None else grace, self._grace_expired
        )

    def _deliver_stop(self, job: JobRecord) -> None:
        """Signal a process that came up after its job was cancelled (lock held, job ``stopping``):
        the cancel found no process to signal. Its stop as the cancel asked: SIGKILL (``force``),
        else SIGTERM (a final checkpoint) or SIGINT, and its whole stop grace from now on, also when
        the grace armed by the cancel ran out while the process was being started."""
        cancel = job.cancel or {}
        if cancel.get("force"):
            self._signal(job, signal.SIGKILL)
            return
        self._signal(job, signal.SIGTERM if cancel.get("create_final_checkpoint") else signal.SIGINT)
        if job.kill_timer is not None and job.kill_timer.finished.is_set():
            job.kill_timer = None
            self._arm_grace(job)

    # ----------------------------------------------------------------------------- the launcher
    def _launch_loop(self) -> None:
        """Start queued jobs when GPUs free up, and run the timed transitions (pending → queued,
        finalizing stages, budgets, run-time limits): everything time-driven happens on this thread.
        It starts no process itself: a trainer job goes to the spawner thread, a user program job to
        its runner thread, so neither a request nor a timed transition waits for a process."""
        with self._lock:
            while not self._shutting_down:
                now = time.time()
                self._advance_due(now)
                self._enforce_limits(now)
                while (job := self._queue.next_startable(self._jobs)) is not None:
                    self._take_gpus(job)
                    if job.spec.program is None:
                        self._to_spawn.put(job)
                    else:
                        self._start_program_runner(job)
                self._wake.wait(self._next_wakeup(now))

    def _spawn_loop(self) -> None:
        """The spawner thread: warm the fork server up, then start each trainer the launcher hands
        over, one at a time, without the lock (:meth:`_start_trainer`), until told to stop."""
        self._processes.warm_up()
        while (job := self._to_spawn.get()) is not None:
            try:
                self._start_trainer(job)
            except Exception as exc:  # the thread must live on: later jobs and its children need it
                with self._lock:
                    if job.state in ("starting", "stopping") and job.proc is None:
                        self._trainer_not_started(job, f"{type(exc).__name__}: {exc}")

    def _next_wakeup(self, now: float) -> float | None:
        """Seconds until the launcher must look again (None: only when notified)."""
        due = [j.advance_at for j in self._jobs.values() if j.advance_at is not None]
        wait = max(0.0, min(due) - now) if due else None
        watched = self._budgets.watched()
        if any(
            j.state in LIVE_STATES and (j.spec.platform in watched or j.spec.max_runtime_seconds is not None)
            for j in self._jobs.values()
        ):
            check = self.config.budget_check_seconds
            wait = check if wait is None else min(wait, check)
        return wait

    def _advance_due(self, now: float) -> None:
        for job in list(self._jobs.values()):
            if job.advance_at is None or job.advance_at > now:
                continue
            job.advance_at = None
            if job.state == "pending":
                job.set_state("queued", now)
                self._queue.enqueue(job.job_id)
            elif job.state == "finalizing":
                self._next_stage(job)

    def _enforce_limits(self, now: float) -> None:
        """Budgets that ran out cancel their platform's unfinished jobs; jobs past their run-time limit
        are stopped by the platform (with a final checkpoint, like a graceful stop)."""
        for budget in self._budgets.run_out(self._jobs.values(), now):
            for job in sorted(self._jobs.values(), key=lambda j: j.created_at):
                if job.spec.platform == budget.platform and job.state in (
                    "pending",
                    "queued",
                    "starting",
                    "running",
                ):
                    self._platform_cancel_locked(job, budget.reason, budget.events, None)
        for job in list(self._jobs.values()):
            limit = job.spec.max_runtime_seconds
            if limit is not None and job.state in ("starting", "running") and job.started_at is not None:
                if now - job.started_at >= limit:
                    self._platform_cancel_locked(
                        job,
                        "max_runtime",
                        [
                            {
                                "type": "max_runtime_exceeded",
                                "message": f"Run time limit of {limit:g} s reached",
                            }
                        ],
                        None,
                        create_final_checkpoint=True,
                    )

    def _next_stage(self, job: JobRecord) -> None:
        """Enter the job's next finalizing stage, or complete it after the last one (lock held)."""
        job.stage_index += 1
        stages = job.spec.finalize_stages
        if job.stage_index >= len(stages):
            job.finish("succeeded")
            job.add_event("job_complete", "Job completed")
            return
        stage = stages[job.stage_index]
        now = time.time()
        job.set_state("finalizing", now, stage=stage["name"])
        job.add_event(stage["event_type"], stage.get("message", ""))
        job.advance_at = now + float(stage.get("seconds", 0.0))

    def _take_gpus(self, job: JobRecord) -> None:
        """The job leaves the queue for its GPUs (lock held): ``starting`` from now, billed from now."""
        job.started_at = time.time()
        self._queue.take(job.spec.gpu_count)
        job.set_state("starting", job.started_at)

    def _start_program_runner(self, job: JobRecord) -> None:
        """Give a user program job its runner thread (:meth:`_run_program`; lock held)."""
        runner = threading.Thread(
            target=self._run_program, args=(job,), name=f"program-{job.job_id}", daemon=True
        )
        self._runners = [t for t in self._runners if t.is_alive()] + [runner]
        job.add_event("job_start", f"Preparing the program on {job.spec.gpu_count} GPU(s)")
        runner.start()

    def _start_trainer(self, job: JobRecord) -> None:
        """Start the trainer of ``job`` (``starting``; spawner thread) *without* the lock: a fork
        server round trip, seconds while the fork server still imports scikit-learn, a new
        interpreter's fork and exec otherwise. A cancel meanwhile finds no process to signal; the
        stop it asked for is delivered once the process is recorded (:meth:`_deliver_stop`)."""
        with self._lock:
            if self._shutting_down:
                self._trainer_not_started(job, "the local platform is shutting down")
                return
        try:
            if self.config.fault_hook:
                self.config.fault_hook("spawn", job.job_id)
            if self.config.spawn_delay_seconds > 0:
                time.sleep(self.config.spawn_delay_seconds)
            proc = self._processes.spawn(job)
        except Exception as exc:
            with self._lock:
                self._trainer_not_started(job, str(exc))
            return
        with self._lock:
            self._processes.watch(job, proc)
            job.add_event("job_start", f"Trainer process {proc.pid} started on {job.spec.gpu_count} GPU(s)")
            if self._shutting_down:  # shutdown() found no process to kill
                self._processes.signal(job, signal.SIGKILL)
            elif job.state == "stopping":
                self._deliver_stop(job)

    def _trainer_not_started(self, job: JobRecord, reason: str) -> None:
        """The trainer of a ``starting`` (or, cancelled meanwhile, ``stopping``) job could not be
        started (lock held): give its GPUs back and end it."""
        self._queue.release(job.spec.gpu_count)
        if job.kill_timer is not None:
            job.kill_timer.cancel()
        if job.state == "stopping":
            job.finish("cancelled")
            job.add_event("job_stopped", "Job stopped due to cancel request (its trainer never started)")
        else:
            error = "local platform shut down before start" if self._shutting_down else None
            job.finish("failed", error=error or f"could not start trainer: {reason}")
            job.add_event("job_error", job.error or "", level="error")
        self._wake.notify_all()

    # ----------------------------------------------------------------------------- user programs
    def _run_program(self, job: JobRecord) -> None:
        """A user program job's runner thread: prepare (no lock: copies code and data), start,
        supervise until the program exits, run its exit hook, record the outcome. It lives exactly as
        long as the program, as ``PR_SET_PDEATHSIG`` wants of the thread that forks."""
        assert job.spec.program is not None
        try:
            program = job.spec.program.prepare(job.job_dir)
        except Exception as exc:  # the platform's preparation failed: the job fails, the server lives
            with self._lock:
                self._program_ended(job, None, f"could not prepare the program: {exc}")
            return
        with self._lock:
            if job.state != "starting" or self._shutting_down:  # stopped while it was being prepared
                self._program_ended(job, None)
                return
        try:  # no lock: a fork and exec, and a listing of the checkpoint directory
            process = ProgramProcess(program, job.job_dir)
        except OSError as exc:
            with self._lock:
                self._program_ended(job, None, f"could not start the program: {exc}")
            return
        with self._lock:
            job.program, job.program_process = program.describe(), process
            job.proc, job.pid = process.proc, process.pid
            if job.state == "starting":
                job.running_at = time.time()
                job.set_state("running", job.running_at)
            job.add_event("training_start", f"Program started: process group {process.pid}")
            if self._shutting_down:  # shutdown() found no process to kill
                process.signal(signal.SIGKILL)
            elif job.state == "stopping":  # stopped while its process was being started
                self._deliver_stop(job)
        returncode = process.supervise(
            lambda at, line, values: self._on_program_line(job, at, line, values),
            lambda changed: self._on_program_checkpoints(job, process, changed),
        )
        error = None
        if program.on_exit is not None:
            try:
                program.on_exit(ProgramExit(returncode, stopped=process.stop_signal_at is not None))
            except Exception as exc:
                error = f"could not collect the program's output: {exc}"
        failure = process.failure_reason(returncode) if returncode != 0 else None  # reads a file: no lock
        with self._lock:
            self._program_ended(job, returncode, error, failure)

    def _on_program_line(self, job: JobRecord, at: float, line: str, values: dict[str, float]) -> None:
        with self._lock:
            job.logs.append(line)
            job.updated_at = at
            if values:
                job.apply_program_metrics(values, at)

    def _on_program_checkpoints(
        self, job: JobRecord, process: ProgramProcess, changed: Sequence[str]
    ) -> None:
        """Record the checkpoint files new or changed since the last listing (a *final* one once the
        stop signal was sent), then hand them to the platform (no lock held: it copies them)."""
        directory = process.checkpoints.directory
        assert directory is not None
        paths = [os.path.join(directory, rel) for rel in changed]
        found = []  # (relative path, path, size, final): stat'ed before taking the lock
        for rel_path, path in zip(changed, paths, strict=True):
            try:
                size = os.path.getsize(path)
            except OSError:  # removed since the listing
                continue
            found.append((rel_path, path, size, process.checkpoints.is_final(rel_path)))
        with self._lock:
            now = time.time()
            for rel_path, path, size, final in found:
                add_checkpoint(
                    job,
                    {
                        "type": "checkpoint",
                        "checkpoint_id": rel_path,
                        "path": path,
                        "epoch": job.progress.get("epoch", 0),
                        "step": job.progress.get("step", 0),
                        "kind": "final" if final else "automatic",
                        "size_bytes": size,
                        "metrics": dict(job.metrics),
                    },
                    now,
                )
        hook = process.program.on_checkpoints
        if hook is not None:
            try:
                hook(paths)
            except Exception as exc:  # a failed copy must not kill the runner
                with self._lock:
                    job.add_event("warning", f"could not sync checkpoints: {exc}", level="warning")

    def _program_ended(
        self, job: JobRecord, returncode: int | None, error: str | None = None, failure: str | None = None
    ) -> None:
        """Record how a user program job ended (lock held): ``returncode`` ``None`` = it never
        started (``error`` says why, else it was stopped or the server shut down first);
        ``failure``: :meth:`.ProgramProcess.failure_reason` of a non-zero exit."""
        job.returncode = returncode
        job.exited_at = time.time()
        self._queue.release(job.spec.gpu_count)
        if job.kill_timer is not None:
            job.kill_timer.cancel()
        process = job.program_process
        final = [c["checkpoint_id"] for c in job.checkpoints if c["kind"] == "final"]
        if process is not None and job.program is not None:
            job.program.update(
                stop_signal_at=process.stop_signal_at,
                killed_after_grace=process.killed_after_grace,
                final_checkpoints=final,
            )
        if job.cancel is not None:  # the cancel's result: did the program save a checkpoint after the signal?
            job.cancel["final_checkpoint_written"] = bool(final)
            job.cancel["final_checkpoints"] = final
        if job.state == "stopping":
            how = "before it started" if returncode is None else self._program_exit_text(job, returncode)
            job.finish("cancelled", at=job.exited_at)
            if job.cancel and not job.cancel["preserve_checkpoints"]:
                delete_checkpoints(job, keep_final=bool(job.cancel["create_final_checkpoint"]))
            job.add_event("job_stopped", f"Job stopped due to cancel request (program {how})")
        elif self._shutting_down:
            job.finish("failed", error="local platform shut down while the job was running", at=job.exited_at)
            job.add_event("job_error", job.error or "", level="error")
        elif error is not None or returncode is None:
            job.finish("failed", error=error or "the program did not start", at=job.exited_at)
            job.add_event("job_error", job.error or "", level="error")
        elif returncode == 0:
            job.add_event("training_complete", "Program exited with code 0")
            if job.spec.finalize_stages:
                self._next_stage(job)
            else:
                job.finish("succeeded", at=job.exited_at)
                job.add_event("job_complete", "Job completed")
        else:
            assert process is not None
            reason = failure or process.failure_reason(returncode)
            job.finish("failed", error=reason, at=job.exited_at)
            job.add_event("job_error", job.error or "", level="error")
        self._wake.notify_all()

    @staticmethod
    def _program_exit_text(job: JobRecord, returncode: int) -> str:
        killed = job.program_process is not None and job.program_process.killed_after_grace
        if returncode < 0:
            name = signal.Signals(-returncode).name
            return f"killed by {name} after the stop grace" if killed else f"ended by {name}"
        return f"exited with code {returncode}"

    # ----------------------------------------------------------------------------- trainer reports
    def _on_line(self, job: JobRecord, line: str) -> None:
        with self._lock:
            job.logs.append(line)
            job.updated_at = time.time()
            report = decode_report(line)
            if report is None:
                return
            try:
                job.apply_report(report)
            except (KeyError, TypeError, ValueError) as exc:  # must not kill the reader
                job.add_event("warning", f"unreadable trainer report {exc!r}: {line[:200]}", "warning")
            if report["type"] == "started":
                self._on_started(job)

    def _on_started(self, job: JobRecord) -> None:
        """The trainer loaded its data and model (lock held): record the spec's start-up events and run
        its start-up cancel, if any."""
        for event in job.spec.started_events:
            event = dict(event)
            job.add_event(event.pop("type"), event.pop("message", ""), event.pop("level", "info"), **event)
        plan = job.spec.cancel_on_start
        if plan and job.state not in TERMINAL_STATES and job.state != "stopping":
            self._platform_cancel_locked(job, plan["reason"], plan.get("events", ()), plan.get("message"))

    def _on_exit(self, job: JobRecord, returncode: int) -> None:
        reason = self._exit_reason(job, returncode)  # reads the stderr file: before taking the lock
        with self._lock:
            job.returncode = returncode
            job.exited_at = time.time()
            self._queue.release(job.spec.gpu_count)
            if job.kill_timer is not None:
                job.kill_timer.cancel()
            if job.state == "stopping":
                how = (
                    f"by {job.stopped_seen['signal']}" if job.stopped_seen else f"with exit code {returncode}"
                )
                job.finish("cancelled", at=job.exited_at)
                if job.cancel and not job.cancel["preserve_checkpoints"]:
                    delete_checkpoints(job, keep_final=bool(job.cancel["create_final_checkpoint"]))
                job.add_event("job_stopped", f"Job stopped due to cancel request (trainer exited {how})")
            elif self._shutting_down:
                job.finish(
                    "failed", error="local platform shut down while the job was running", at=job.exited_at
                )
                job.add_event("job_error", job.error or "", level="error")
            elif returncode == 0 and job.completed_seen:
                if job.spec.finalize_stages:
                    self._next_stage(job)
                else:
                    job.finish("succeeded", at=job.exited_at)
                    job.add_event("job_complete", "Job completed")
            elif returncode == 0 and job.stopped_seen:
                job.cancel = job.cancel or {
                    "reason": f"trainer stopped by {job.stopped_seen.get('signal')} outside the API"
                }
                job.finish("cancelled", at=job.exited_at)
                job.add_event("job_stopped", job.cancel["reason"] or "Job stopped")
            else:
                job.finish("failed", error=job.trainer_error or reason, at=job.exited_at)
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

    # ----------------------------------------------------------------------------- records
    def _find(self, job_id: str, platform: str | None) -> JobRecord:
        job = self._jobs.get(job_id)
        if job is None or (platform is not None and job.spec.platform != platform):
            raise JobNotFound(f"job {job_id} not found")
        return job

    def _new_id(self, spec: JobSpec) -> str:
        if spec.job_id is not None:
            if spec.job_id in self._jobs:
                raise StateConflict(f"job {spec.job_id} already exists", self._jobs[spec.job_id].state)
            return spec.job_id
        suffix = str(uuid.uuid4()) if spec.id_style == "uuid4" else secrets.token_hex(6)
        return f"{spec.id_prefix}{suffix}"

    def _new_record(self, job_id: str, spec: JobSpec, resume_path: str | None) -> JobRecord:
        if spec.program is not None:
            return self._new_program_record(job_id, spec)
        config = {"seconds_per_epoch": self.config.seconds_per_epoch, **spec.hyperparameters}
        config["dataset"] = spec.dataset
        if resume_path:
            config["resume_from"] = resume_path
        job_dir = os.path.join(self.config.data_dir, "jobs", job_id)
        os.makedirs(os.path.join(job_dir, "checkpoints"), exist_ok=True)
        job = JobRecord(
            job_id=job_id,
            spec=copy.deepcopy(spec),
            config=config,
            job_dir=job_dir,
            resume_path=resume_path,
            created_at=time.time(),
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
        return job

    def _new_program_record(self, job_id: str, spec: JobSpec) -> JobRecord:
        """A user program job's record: no trainer config, no epochs known in advance."""
        job_dir = os.path.join(self.config.data_dir, "jobs", job_id)
        os.makedirs(job_dir, exist_ok=True)
        job = JobRecord(
            job_id=job_id,
            spec=copy.deepcopy(spec),
            config=dict(spec.hyperparameters),
            job_dir=job_dir,
            resume_path=None,
            created_at=time.time(),
            logs=collections.deque(maxlen=self.config.max_log_lines),
        )
        job.progress = dict.fromkeys(
            (
                "epoch",
                "completed_epochs",
                "total_epochs",
                "step",
                "start_step",
                "steps_per_epoch",
                "total_steps",
            ),
            0,
        )
        return job

    def _live(self) -> list[JobRecord]:
        """The jobs holding GPUs (lock held): what a queued job's estimated start waits for."""
        return [j for j in self._jobs.values() if j.state in LIVE_STATES]

    def _snapshot(self, job: JobRecord, live: list[JobRecord] | None = None) -> dict[str, Any]:
        """Snapshot of a job (lock held): :meth:`JobRecord.snapshot` keys plus ``cost``
        {wall_seconds, gpu_seconds, current_usd, estimated_total_usd, usd_per_gpu_hour},
        ``estimated_remaining_seconds`` (queued: expected run time), ``estimated_start_at``, ``queue_position``.
        ``live``: :meth:`_live`, when the caller snapshots many jobs (read once, not per job)."""
        now = time.time()
        startup = self.config.startup_seconds_estimate
        remaining = job.remaining_seconds(startup, now)
        queued = job.state == "queued" and job.job_id in self._queue
        if queued and live is None:
            live = self._live()
        return job.snapshot(
            cost=job_cost(job, self.config.usd_per_gpu_hour, remaining, now),
            estimated_remaining_seconds=remaining,
            estimated_start_at=now + self._queue.estimated_wait(job, live, startup)
            if queued
            else job.started_at,
            queue_position=self._queue.position(job.job_id) if queued else None,
        )
