"""Kill-path scenarios K1–K24 on a real Airflow stack, for every platform (:mod:`.flavors`).

Each scenario drives Airflow through its REST API (or signals its processes), then reads the
platform's own job records (``/_local/jobs``: submits, cancel requests, states, checkpoint files)
and returns an :class:`Outcome`. The pytest cases assert on outcomes; the benchmark script prints
them as a table. Scenarios leave no job running: they cancel what they started. The cases come
from user reports against other Airflow integrations; ``docs/airflow-kill-paths.md`` explains
what Airflow does on each path.

:data:`SCENARIOS` is the table: each row names its function, whether it must run alone (it stops
triggerers or faults every job of a platform) and which platforms it applies to.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from airflow_training_devel.killpaths.flavors import ALL_FLAVORS, GUARD_RULE, Flavor, flavor_of
from airflow_training_devel.stack import AirflowStack
from airflow_training_platform.control import LocalPlatformControl


@dataclass
class Outcome:
    case: str
    expect_cancel: bool
    jobs: list[dict]  # platform records of every job submitted for the DAG run
    ti_state: str | None
    latency: float | None = None  # seconds from the Airflow action to the cancel request's arrival
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def submits(self) -> int:
        return len(self.jobs)

    @property
    def cancels(self) -> list[dict]:
        """Accepted cancel requests sent to the run's jobs through an API, oldest first (not the
        platform's own cancels, e.g. Together's W&B auto-cancel)."""
        reqs = [r for j in self.jobs for r in LocalPlatformControl.accepted_cancels(j)]
        return sorted(reqs, key=lambda r: r["received_at"])

    @property
    def false_cancels(self) -> int:
        return 0 if self.expect_cancel else len(self.cancels)

    @property
    def duplicate_submits(self) -> int:
        return max(0, self.submits - self.notes.get("expected_submits", 1))

    def final_checkpoint_files(self, job: dict) -> list[Path]:
        return [
            Path(c["path"]) for c in job["checkpoints"] if c["kind"] == "final" and Path(c["path"]).is_file()
        ]


class Platform(LocalPlatformControl):
    """The stack's local platform: its records and fault rules, plus waits the scenarios share."""

    def run_jobs(self, dag_id: str, run_id: str | None = None) -> list[dict]:
        """The jobs a DAG run submitted (by their identity tags), oldest first."""
        return self.jobs(tags=[f"airflow-dag:{dag_id}", *([f"airflow-run:{run_id}"] if run_id else [])])

    def fired(self, rules: dict[Any, str]) -> dict[Any, int]:
        """How often each of ``rules`` (key → rule id) fired, by key: one read of the rule list."""
        fired = {rule["id"]: rule["fired"] for rule in self.faults()}
        return {key: fired.get(rule_id, 0) for key, rule_id in rules.items()}

    def wait_polled(self, job: dict, timeout: float = 60.0) -> None:
        """Wait for the next status read of ``job`` by its wait (:meth:`wait_all_polled`)."""
        self.wait_all_polled({job["job_id"]: job}, timeout)

    def wait_all_polled(self, jobs: dict[Any, dict], timeout: float = 60.0) -> None:
        """Wait until each of ``jobs`` (key → job) had a status read of its own: pass-through
        fault rules count them. A coalesced wait reads its job in its poller's rounds after its
        first read (the platform's batch read, whose answer names every job it lists): those
        rounds fail meanwhile (503, the poller's read retried within a round), so each member
        reads its own, and a read counted here is the wait's, not a round it might not be in.

        :raises AssertionError: naming the jobs not read within ``timeout`` seconds."""
        polls = {key: self.add_fault(**flavor_of(job).poll_rule(job["job_id"]), count=1)["id"]
                 for key, job in jobs.items()}  # fmt: skip
        batches = {
            repr(sorted(r.items())): r for r in (flavor_of(j).batch_rule(j["job_id"]) for j in jobs.values())
        }
        rounds = [
            self.add_fault(**rule, status=503, count=-1, message="Injected fault: read each job on its own")[
                "id"
            ]
            for rule in batches.values()
        ]
        deadline = time.monotonic() + timeout
        try:
            while unpolled := [key for key, fired in self.fired(polls).items() if not fired]:
                if time.monotonic() > deadline:
                    raise AssertionError(f"these jobs were not polled in {timeout:.0f} s: {unpolled}")
                time.sleep(0.2)
        finally:
            for rule_id in [*polls.values(), *rounds]:
                self.clear_faults(rule_id=rule_id)

    def wait_running(
        self, dag_id: str, run_id: str, count: int = 1, min_epochs: int = 1, timeout: float = 120
    ) -> dict:
        """The run's ``count``-th job, once it is running and has finished ``min_epochs`` epochs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = self.run_jobs(dag_id, run_id)
            if len(jobs) >= count:
                job = jobs[count - 1]
                if job["state"] == "running" and _epochs_done(job) >= min_epochs:
                    return job
            time.sleep(0.3)
        raise AssertionError(
            f"no running job #{count} for {dag_id}/{run_id}: {self.run_jobs(dag_id, run_id)}"
        )


def _epochs_done(job: dict) -> int:
    """Epochs ``job`` finished: the built-in trainer's progress, or for a user program the epoch its
    output last reported (its ``epoch`` metric, :data:`.user_code.EPOCH_METRIC`)."""
    if job.get("program") is not None:
        return int(job["metrics"].get("epoch") or 0)
    return job["progress"].get("completed_epochs", 0)


def _xcom(stack: AirflowStack, dag_id: str, run_id: str, key: str, timeout: float = 30) -> Any:
    """An XCom of the current try, waiting for it to be pushed (a new try clears them first)."""
    path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/train/xcomEntries/{key}"
    deadline = time.monotonic() + timeout
    while True:
        response = requests.get(f"{stack.api}{path}", timeout=30)
        if response.status_code == 200 or time.monotonic() > deadline:
            return stack.call("GET", path)["value"]
        time.sleep(0.5)


def _start_deferred(
    stack: AirflowStack, platform: Platform, dag_id: str, until_polled: bool = True
) -> tuple[str, dict]:
    """Trigger ``dag_id``; return once its job runs and the **trigger** polls it. A task killed
    before a triggerer has started its trigger has nothing of the try running (no ``on_kill``):
    the mark-failed listener (K24) or the reaper (K18) stops that job, so "while deferred" cases
    start after the first poll.
    ``until_polled=False``: as soon as the task is deferred (a case that faults the trigger's
    polls must be in place before they start)."""
    run_id = stack.trigger(dag_id)
    job = platform.wait_running(dag_id, run_id)
    if not until_polled:
        stack.wait_ti(dag_id, run_id, "train", {"deferred"})
        return run_id, job
    stack.wait_trigger_running(dag_id, run_id, "train", settle=0)
    platform.wait_polled(job)
    return run_id, job


def _start_running(stack: AirflowStack, platform: Platform, dag_id: str) -> tuple[str, dict]:
    run_id = stack.trigger(dag_id)
    job = platform.wait_running(dag_id, run_id)
    stack.wait_ti(dag_id, run_id, "train", {"running"})
    return run_id, job


def _latency(job: dict, since: float) -> float | None:
    accepted = LocalPlatformControl.accepted_cancels(job)
    return accepted[0]["received_at"] - since if accepted else None


def _finish(stack, platform, case, dag_id, run_id, *, expect_cancel, since=None, **notes) -> Outcome:
    jobs = platform.run_jobs(dag_id, run_id)
    latency = _latency(jobs[0], since) if since is not None and jobs else None
    return Outcome(case, expect_cancel, jobs, stack.ti_state(dag_id, run_id, "train"), latency, notes)


def _user_action_cancels(stack, platform, case, dag_id, action) -> Outcome:
    run_id, job = _start_deferred(stack, platform, dag_id)
    t0 = time.time()
    action(run_id)
    platform.wait_job(job["job_id"], {"cancelled"}, timeout=60)
    stack.wait_ti(dag_id, run_id, "train", {"failed", "skipped", "success"}, timeout=30)
    time.sleep(3)  # let any second (wrong) cancel arrive before counting
    return _finish(stack, platform, case, dag_id, run_id, expect_cancel=True, since=t0)


def _iso(value: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


# -- K1–K4: user actions on a deferred task --------------------------------------------------------
def k1_mark_failed(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_deferred")
    outcome = _user_action_cancels(
        stack,
        platform,
        "K1 mark failed (deferred)",
        dag,
        lambda run: stack.set_ti_state(dag, run, "train", "failed"),
    )
    if flavor.user_code:  # the trigger's on_kill logs the cancel result into try 1's log
        outcome.notes["log1"] = _log_of(stack, dag, outcome.jobs[0], 1, "on_kill: job")
    return outcome


def _log_of(stack, dag: str, job: dict, try_number: int, *needles: str) -> str:
    """The task log of ``job``'s run and try, once one of ``needles`` is in it (30 s at most)."""
    run_id = next(t for t in job["tags"] if t.startswith("airflow-run:")).split(":", 1)[1]
    return stack.task_log(dag, run_id, "train", try_number, wait_for=needles)


def k2_clear(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_deferred")
    run_id, old = _start_deferred(stack, platform, dag)
    t0 = time.time()
    stack.clear_ti(dag, run_id, "train")
    new = platform.wait_running(dag, run_id, count=2)
    old = platform.job(old["job_id"])
    stack.wait_trigger_running(dag, run_id, "train")
    outcome = _finish(
        stack,
        platform,
        "K2 clear (deferred)",
        dag,
        run_id,
        expect_cancel=True,
        since=t0,
        expected_submits=2,
        old=old,
        new=new,
        xcom_job=_xcom(stack, dag, run_id, "job_id"),
    )
    stack.set_ti_state(dag, run_id, "train", "failed")  # clean up the new try's job
    platform.wait_job(new["job_id"], {"cancelled"}, timeout=60)
    return outcome


def k2b_clear_reattach(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_deferred_reattach_on_clear")
    run_id, job = _start_deferred(stack, platform, dag)
    stack.clear_ti(dag, run_id, "train")
    ti = _wait_try(stack, dag, run_id, 2, {"deferred"}, timeout=60)  # the new try defers on the same job
    time.sleep(3)
    outcome = _finish(
        stack,
        platform,
        "K2b clear, reattach_on_clear",
        dag,
        run_id,
        expect_cancel=False,
        try_number=ti["try_number"],
        xcom_job=_xcom(stack, dag, run_id, "job_id"),
        job=job,
    )
    stack.set_ti_state(dag, run_id, "train", "failed")
    platform.wait_job(job["job_id"], {"cancelled"}, timeout=60)
    return outcome


def k3_mark_success(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_deferred")
    run_id, job = _start_deferred(stack, platform, dag)
    stack.set_ti_state(dag, run_id, "train", "success")
    time.sleep(10)  # on_kill fires ~1.5 s after the PATCH; give a wrong cancel time to show up
    outcome = _finish(
        stack,
        platform,
        "K3 mark success (deferred)",
        dag,
        run_id,
        expect_cancel=False,
        job_state=platform.job(job["job_id"])["state"],
    )
    platform.console_cancel(job["job_id"])  # clean up
    return outcome


def k3b_mark_success_option(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_deferred_mark_success_cancels")
    return _user_action_cancels(
        stack,
        platform,
        "K3b mark success, cancel_on_mark_success",
        dag,
        lambda run: stack.set_ti_state(dag, run, "train", "success"),
    )


def k4_dag_run_failed(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_deferred")
    return _user_action_cancels(
        stack,
        platform,
        "K4 DAG run marked failed",
        dag,
        lambda run: stack.set_dag_run_state(dag, run, "failed"),
    )


def k4b_dagrun_timeout(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_dagrun_timeout")
    run_id, job = _start_deferred(stack, platform, dag)
    start = stack.call("GET", f"/dags/{dag}/dagRuns/{run_id}")["start_date"]
    platform.wait_job(job["job_id"], {"cancelled"}, timeout=90)
    stack.wait_ti(dag, run_id, "train", {"skipped", "failed"}, timeout=30)
    time.sleep(3)
    return _finish(
        stack, platform, "K4b dagrun_timeout", dag, run_id, expect_cancel=True, since=_iso(start) + 30
    )


# -- K5, K6, K9: timeouts and slow cancels ---------------------------------------------------------
def k5_execution_timeout_deferred(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_exec_timeout_deferred")
    run_id, first = _start_deferred(stack, platform, dag)
    ti = stack.ti(dag, run_id, "train")
    first = platform.wait_job(first["job_id"], {"cancelled"}, timeout=90)
    second = platform.wait_running(dag, run_id, count=2, min_epochs=0, timeout=90)
    outcome = _finish(
        stack,
        platform,
        "K5 execution_timeout (deferred)",
        dag,
        run_id,
        expect_cancel=True,
        since=_iso(ti["start_date"]) + 25,
        expected_submits=2,
        first=first,
        second=second,
    )
    if flavor.user_code:  # the resumed try 1 confirms the trigger's cancel and logs its result
        outcome.notes["log1"] = _log_of(stack, dag, first, 1, "nothing to cancel", "cancelled: state")
    # don't wait for the retry to time out too: fail it once its trigger runs (failed before a
    # triggerer has started the trigger, only the reaper would stop its job)
    stack.wait_trigger_running(dag, run_id, "train")
    stack.set_ti_state(dag, run_id, "train", "failed")
    platform.wait_job(second["job_id"], {"cancelled"}, timeout=60)
    return outcome


def k5b_timeout_retry_resumes(stack, platform, flavor: Flavor) -> Outcome:
    """The user's own code: try 1 (deferred) reaches its ``execution_timeout``, the trigger stops
    the job and the script writes its checkpoint on SIGTERM. Try 2 (``retries=1``,
    ``resume_from_checkpoint=True``; the spec's ``CheckpointConfig.S3Uri`` is per try) submits a job
    whose ``S3Uri`` is try 1's: the script finds the checkpoint in its checkpoint directory, starts
    from the epoch after it and completes."""
    dag = flavor.dag("kp_exec_timeout_resume")
    run_id, first = _start_deferred(stack, platform, dag)
    first = platform.wait_job(first["job_id"], {"cancelled"}, timeout=90)
    ti = stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=180)
    jobs = platform.run_jobs(dag, run_id)
    outcome = _finish(
        stack,
        platform,
        "K5b execution_timeout (deferred), user code → the retry resumes",
        dag,
        run_id,
        expect_cancel=True,
        expected_submits=2,
        first=first,
        second=jobs[-1],
        try_number=ti["try_number"],
        log1=_log_of(stack, dag, first, 1, "nothing to cancel", "cancelled: state"),
    )
    for job in jobs[1:]:  # a try that did not end (the assertion shows it): leave nothing running
        if job["state"] not in ("succeeded", "failed", "cancelled"):
            platform.console_cancel(job["job_id"])
    return outcome


def k6_defer_timeout(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_defer_timeout")
    run_id = stack.trigger(dag)
    job = platform.wait_running(dag, run_id)
    # the deferral's moment: its trigger row is created then (defer_timeout=30 counts from it)
    deferred_at = _iso(stack.wait_trigger_running(dag, run_id, "train", settle=0)["trigger"]["created_date"])
    platform.wait_job(job["job_id"], {"cancelled"}, timeout=120)
    stack.wait_ti(dag, run_id, "train", {"failed"}, timeout=60)
    return _finish(
        stack,
        platform,
        "K6 defer timeout",
        dag,
        run_id,
        expect_cancel=True,
        since=deferred_at + 30,
        log=stack.task_log(
            dag, run_id, "train", 1, wait_for=("defer_timeout reached", "TaskDeferralTimeout")
        ),
    )


def k9_slow_cancel(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_deferred")
    run_id, job = _start_deferred(stack, platform, dag)
    platform.add_fault(**flavor.cancel_rule(job["job_id"]), delay_seconds=6, count=1)
    t0 = time.time()
    stack.set_ti_state(dag, run_id, "train", "failed")
    platform.wait_job(job["job_id"], {"cancelled"}, timeout=90)
    time.sleep(2)
    return _finish(stack, platform, "K9 slow cancel (6 s)", dag, run_id, expect_cancel=True, since=t0)


# -- K10–K13: a task running on a worker ------------------------------------------------------------
def k10_sigterm_task(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_running")
    run_id, job = _start_running(stack, platform, dag)
    pid = int(_xcom(stack, dag, run_id, "pid"))
    t0 = time.time()
    os.kill(pid, signal.SIGTERM)
    platform.wait_job(job["job_id"], {"cancelled"}, timeout=60)
    ti = stack.wait_ti(dag, run_id, "train", {"failed", "success", "up_for_retry"}, timeout=60)
    return _finish(
        stack,
        platform,
        "K10 SIGTERM running task",
        dag,
        run_id,
        expect_cancel=True,
        since=t0,
        stopped_after=_iso(ti["end_date"]) - t0,
    )


def k11_execution_timeout_running(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_running_exec_timeout")
    run_id, job = _start_running(stack, platform, dag)
    ti = stack.ti(dag, run_id, "train")
    platform.wait_job(job["job_id"], {"cancelled"}, timeout=90)
    stack.wait_ti(dag, run_id, "train", {"failed"}, timeout=60)
    return _finish(
        stack,
        platform,
        "K11 execution_timeout (running)",
        dag,
        run_id,
        expect_cancel=True,
        since=_iso(ti["start_date"]) + 25,
    )


def k12_mark_failed_running(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_running")
    run_id, job = _start_running(stack, platform, dag)
    t0 = time.time()
    stack.set_ti_state(dag, run_id, "train", "failed")
    platform.wait_job(job["job_id"], {"cancelled"}, timeout=60)
    time.sleep(3)
    return _finish(stack, platform, "K12 mark failed (running)", dag, run_id, expect_cancel=True, since=t0)


def _kill_worker(stack, dag, run_id) -> None:
    """SIGKILL the task process and its supervisor: nothing of the try survives to clean up."""
    pid = int(_xcom(stack, dag, run_id, "pid"))
    supervisor = _parent(pid)
    os.kill(pid, signal.SIGKILL)
    os.kill(supervisor, signal.SIGKILL)


def _wait_log(stack, dag, run_id, try_number, text, timeout=90) -> None:
    deadline = time.monotonic() + timeout
    while text not in (log := stack.task_log(dag, run_id, "train", try_number)):
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} never appeared in the log of try {try_number}:\n{log[-3000:]}")
        time.sleep(1)


def _wait_try(stack, dag, run_id, try_number, states, timeout=120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ti = stack.ti(dag, run_id, "train")
        if ti["try_number"] >= try_number and ti["state"] in states:
            return ti
        time.sleep(0.5)
    raise AssertionError(f"try {try_number} never reached {states}: {ti}")


def k13_worker_crash_reattach(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_worker_crash_reattach")
    run_id, job = _start_running(stack, platform, dag)
    _kill_worker(stack, dag, run_id)
    return _retry_reattaches(stack, platform, "K13 worker SIGKILL → retry re-attaches", dag, run_id, job)


def _retry_reattaches(stack, platform, case, dag, run_id, job, **notes) -> Outcome:
    """Try 1 was cut off while ``job`` trained: try 2 runs and re-attaches to it (not just starts:
    its log says so); the outcome as then, after which the run is failed (its job cancelled)."""
    ti = _wait_try(stack, dag, run_id, 2, {"running"})
    _wait_log(stack, dag, run_id, 2, "Re-attaching to training job")
    outcome = _finish(
        stack,
        platform,
        case,
        dag,
        run_id,
        expect_cancel=False,
        job=job,
        try_number=ti["try_number"],
        xcom_job=_xcom(stack, dag, run_id, "job_id"),
        job_state=platform.job(job["job_id"])["state"],
        **{name: read() for name, read in notes.items()},
    )
    stack.set_ti_state(dag, run_id, "train", "failed")
    platform.wait_job(job["job_id"], {"cancelled"}, timeout=60)
    return outcome


def k13b_worker_crash_adopt(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_worker_crash_adopt")
    run_id, job = _start_running(stack, platform, dag)
    _kill_worker(stack, dag, run_id)
    platform.wait_job(job["job_id"], {"succeeded"}, timeout=120)
    ti = stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=180)
    return _finish(
        stack,
        platform,
        "K13b worker SIGKILL → retry adopts result",
        dag,
        run_id,
        expect_cancel=False,
        try_number=ti["try_number"],
        log=stack.task_log(
            dag, run_id, "train", ti["try_number"], wait_for=("already succeeded: adopting it",)
        ),
    )


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def k22_worker_shutdown(stack, platform, flavor: Flavor) -> Outcome:
    """The worker running the task is stopped gracefully while the job trains: one SIGTERM to the
    task's supervisor, which forwards it to the task (what a deploy, a pod eviction or a spot
    reclaim sends). Nobody gave up on the task: the job keeps running, the retry re-attaches."""
    dag = flavor.dag("kp_worker_shutdown")
    run_id, job = _start_running(stack, platform, dag)
    pid = int(_xcom(stack, dag, run_id, "pid"))
    os.kill(_parent(pid), signal.SIGTERM)
    return _retry_reattaches(
        stack,
        platform,
        "K22 worker shutdown → the job keeps running, the retry re-attaches",
        dag,
        run_id,
        job,
        log1=lambda: stack.task_log(dag, run_id, "train", 1, wait_for=("keeps running",)),
    )


def k23_retry_during_stop(stack, platform, flavor: Flavor) -> Outcome:
    """Try 1 (on the worker) reaches its ``execution_timeout`` and asks for the stop; the job's
    final checkpoint takes seconds to write, so when try 2 starts (``retry_delay=0``) the job is
    still stopping. Try 2 must wait for the stop to end, then submit its own job resuming from the
    stopped one's checkpoint: never re-attach to the dying job. On the platforms whose cancel asks
    for a final checkpoint (on the local platform Together's stops its trainer at once, without one:
    its ``cancel_requested`` phase is too short to start a retry in)."""
    dag = flavor.dag("kp_retry_during_stop")
    run_id, first = _start_running(stack, platform, dag)
    _wait_try(stack, dag, run_id, 2, {"running"}, timeout=120)
    _wait_log(stack, dag, run_id, 2, "Submitted training job", timeout=120)
    second = platform.wait_running(dag, run_id, count=2)
    log2 = stack.task_log(dag, run_id, "train", 2)
    outcome = _finish(
        stack,
        platform,
        "K23 a retry while the earlier job is stopping → waits, then its own job",
        dag,
        run_id,
        expect_cancel=True,
        first=platform.job(first["job_id"]),
        second=platform.job(second["job_id"]),
        log2=log2,
        expected_submits=2,
    )
    stack.set_ti_state(dag, run_id, "train", "failed")
    platform.wait_job(second["job_id"], {"cancelled"}, timeout=60)
    return outcome


def _ancestors(pid: int) -> list[int]:
    """``pid``'s parent, grandparent... up to PID 1 (from ``/proc``)."""
    chain = []
    while pid > 1:
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        chain.append(pid)
    return chain


def _kill_celery_workers_of(stack, task_pids: dict[str, int]) -> dict[str, str]:
    """SIGKILL every Celery worker running one of ``task_pids`` (``{flavor key: task PID}``), with
    all its processes — its pool, the task supervisors and the tasks: a lost machine. Returns
    ``{flavor key: worker name}``; raises if a task did not run under a Celery worker."""
    workers = {c.proc.pid: name for name, c in stack.components.items() if name.startswith("celery-worker")}
    worker_of = {}
    for key, pid in task_pids.items():
        name = next((workers[p] for p in _ancestors(pid) if p in workers), None)
        if name is None:
            raise AssertionError(f"the task of {key} (PID {pid}) does not run under a Celery worker")
        worker_of[key] = name
    for name in set(worker_of.values()):
        component = stack.components[name]
        os.killpg(component.proc.pid, signal.SIGKILL)  # its own session: pool, supervisors
    for pid in task_pids.values():  # a task process that left the worker's group goes too
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for name in set(worker_of.values()):
        stack.components[name].proc.wait(timeout=30)
    return worker_of


def k13c_celery_worker_killed(stack, platform, flavors: list[Flavor]) -> dict[str, Outcome]:
    """Each flavor's task runs on a Celery worker; the workers running them are SIGKILLed with all
    their processes (a machine lost) and started again: each task's retry re-attaches to its job."""
    dag_of = {f.key: f.dag("kp_worker_crash_reattach") for f in flavors}
    runs = {key: (dag, *_start_running(stack, platform, dag)) for key, dag in dag_of.items()}
    pids = {key: int(_xcom(stack, dag, run_id, "pid")) for key, (dag, run_id, _) in runs.items()}
    worker_of = _kill_celery_workers_of(stack, pids)
    for name in sorted(set(worker_of.values())):
        stack.start_celery_worker(name)
    outcomes = {}
    for key, (dag, run_id, job) in runs.items():
        ti = _wait_try(stack, dag, run_id, 2, {"running"}, timeout=180)
        _wait_log(stack, dag, run_id, 2, "Re-attaching to training job")
        outcomes[key] = _finish(
            stack,
            platform,
            "K13 Celery worker SIGKILL → retry re-attaches",
            dag,
            run_id,
            expect_cancel=False,
            job=job,
            worker=worker_of[key],
            try_number=ti["try_number"],
            xcom_job=_xcom(stack, dag, run_id, "job_id"),
            job_state=platform.job(job["job_id"])["state"],
        )
    for dag, run_id, _ in runs.values():
        stack.set_ti_state(dag, run_id, "train", "failed")
    for _, _, job in runs.values():
        platform.wait_job(job["job_id"], {"cancelled"}, timeout=60)
    return outcomes


# -- K14–K16: platform faults, outside cancels -------------------------------------------------------
def k14_flaky_polling(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_short_deferred")
    run_id, job = _start_deferred(stack, platform, dag, until_polled=False)  # a 12 s job
    rules = (
        {"status": 503},
        {"status": 429, "retry_after": 3},
        {"delay_seconds": 12},  # longer than the trigger's call timeout
        {"body": "<html>upstream hiccup</html>"},
    )
    ids: list[str] = []
    for rule in rules:
        ids.append(platform.add_fault(**flavor.poll_rule(job["job_id"]), count=1, **rule)["id"])
    ti = stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=180)
    fired = [platform.fault(rule_id)["fired"] for rule_id in ids]
    return _finish(
        stack,
        platform,
        "K14 503/429/timeout/malformed while polling",
        dag,
        run_id,
        expect_cancel=False,
        fired=fired,
        log=stack.task_log(dag, run_id, "train", ti["try_number"]),
    )


def k15_outage_beyond_budget(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_outage_retry")
    run_id, job = _start_deferred(stack, platform, dag)
    # an outage takes every route: the job's own reads and the batch reads of a coalesced wait
    rule_ids = [
        platform.add_fault(**rule, status=503, count=-1)["id"]
        for rule in (flavor.poll_rule(job["job_id"]), flavor.batch_rule(job["job_id"]))
    ]
    try:
        stack.wait_ti(dag, run_id, "train", {"up_for_retry", "failed"}, timeout=90)
        log1 = stack.task_log(dag, run_id, "train", 1, wait_for=("Lost contact with the platform",))
        during = platform.job(job["job_id"])
    finally:
        for rule_id in rule_ids:
            platform.clear_faults(rule_id=rule_id)
    ti = stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=180)
    return _finish(
        stack,
        platform,
        "K15 outage beyond budget",
        dag,
        run_id,
        expect_cancel=False,
        log1=log1,
        log2=stack.task_log(dag, run_id, "train", 2, wait_for=("Re-attaching", "Submitted training job"))
        if ti["try_number"] > 1
        else "",
        state_during=during["state"],
        try_number=ti["try_number"],
    )


OUTSIDE_CANCEL = "was cancelled outside Airflow"  # how the task fails for a job cancelled by others


def k16_cancelled_outside(stack, platform, flavor: Flavor) -> Outcome:
    dag = flavor.dag("kp_deferred")
    run_id, job = _start_deferred(stack, platform, dag)
    platform.console_cancel(job["job_id"])
    ti = stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=60)
    outcome = _finish(
        stack,
        platform,
        "K16 job stopped outside Airflow",
        dag,
        run_id,
        expect_cancel=True,
        log=stack.task_log(dag, run_id, "train", ti["try_number"], wait_for=(OUTSIDE_CANCEL,)),
    )
    outcome.notes["outside_cancels"] = len(outcome.cancels)  # the one cancel is the console's, not Airflow's
    return outcome


def k19_platform_auto_cancel(stack, platform, flavor: Flavor) -> Outcome:
    """The platform cancels a job by itself (Together: an invalid W&B key): the task fails quoting
    the platform's event."""
    dag = flavor.dag("kp_auto_cancel")
    run_id = stack.trigger(dag)
    ti = stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=120)
    return _finish(
        stack,
        platform,
        "K19 platform auto-cancel",
        dag,
        run_id,
        expect_cancel=False,
        log=stack.task_log(dag, run_id, "train", ti["try_number"], wait_for=(OUTSIDE_CANCEL,)),
    )


# -- exclusive scenarios: they stop triggerers or fault a whole platform, one run per flavor at once ----
def _stop_triggerers(stack) -> list[str]:
    names = [n for n, c in stack.components.items() if n.startswith("triggerer") and c.proc.poll() is None]
    for name in names:
        stack.components[name].signal(signal.SIGTERM)
    for name in names:
        stack.components[name].stop(signalled=True)
    return names


def _restart_triggerers(stack) -> float:
    """Stop every triggerer gracefully (SIGTERM, as a deploy would), wait 2 s, start them again;
    returns when the restart began (epoch seconds)."""
    names = _stop_triggerers(stack)
    time.sleep(2)
    restarted_at = time.time()
    for name in names:
        stack.start_triggerer(name)
    return restarted_at


def k7_triggerer_restart(stack, platform, flavors: list[Flavor]) -> dict[str, Outcome]:
    runs = _start_deferred_all(stack, platform, {f.key: f.dag("kp_short_deferred") for f in flavors})
    _restart_triggerers(stack)
    for dag, run_id, _ in runs.values():
        stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=180)
    return {
        name: _finish(stack, platform, "K7 triggerer restart", dag, run_id, expect_cancel=False)
        for name, (dag, run_id, _) in runs.items()
    }


def eval_history(job: dict) -> list[tuple[int, float, float]]:
    """``(epoch, validation loss, platform time)`` of each evaluated epoch in the platform's record."""
    return [(h["epoch"], h["loss"], h["at"]) for h in job["metric_history"] if h["kind"] == "eval"]


def loss_plateau(history: list[tuple[int, float, float]], min_delta: float) -> tuple[int, float, int]:
    """``(best epoch, its time, epochs since)``: the last epoch that lowered the loss by more than
    ``min_delta`` and how many epochs have passed since (the rule K7b's guard applies, recomputed
    here from the platform's record)."""
    best: tuple[int, float, float] | None = None
    since = 0
    for epoch, loss, at in history:
        if best is None or loss < best[1] - min_delta:
            best, since = (epoch, loss, at), 0
        else:
            since += 1
    return (best[0], best[2], since) if best else (0, 0.0, 0)


def k7b_guards_across_triggerer_restart(stack, platform, flavors: list[Flavor]) -> dict[str, Outcome]:
    """Early stopping across a triggerer restart: the triggerers go down once the job has passed
    its best epoch (the loss no longer improving, patience not yet spent) and come back; the
    restarted trigger must stop the job exactly ``patience`` epochs after that best epoch — judged
    from the metric history re-read from the platform, as nothing of the old trigger survives."""
    dag_of = {f.key: f.dag("kp_guarded") for f in flavors}
    runs = _start_deferred_all(stack, platform, dag_of)
    deadline = time.monotonic() + 120
    while True:  # down once every job is 2+ epochs past its best, with patience left
        plateaus = {n: loss_plateau(eval_history(platform.job(job["job_id"])), GUARD_RULE["min_delta"])
                    for n, (_, _, job) in runs.items()}  # fmt: skip
        if all(since >= 2 for _, _, since in plateaus.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    _progress(
        f"k7b: triggerers down at (best epoch, epochs since) { ({n: p[::2] for n, p in plateaus.items()}) }"
    )
    stopped_at = time.time()
    restarted_at = _restart_triggerers(stack)
    outcomes = {}
    for name, (dag, run_id, job) in runs.items():
        ti = stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=180)
        outcomes[name] = _finish(
            stack,
            platform,
            "K7b early stopping across a triggerer restart",
            dag,
            run_id,
            expect_cancel=True,
            stopped_at=stopped_at,
            restarted_at=restarted_at,
            plateau_at_stop=plateaus[name],
            result=_xcom(stack, dag, run_id, "return_value") if ti["state"] == "success" else None,
            history=eval_history(platform.wait_job(job["job_id"], {"cancelled", "succeeded", "failed"})),
        )
    return outcomes


def _wait_triggerer_job(stack, dag, run_id, predicate, timeout: float = 60) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = (stack.ti(dag, run_id, "train").get("triggerer_job") or {}).get("id")
        if predicate(job):
            return job
        time.sleep(1)
    raise AssertionError(f"triggerer job of {dag}/{run_id} never matched; last {job}")


def k8_triggerer_reassignment(stack, platform, flavors: list[Flavor]) -> dict[str, Outcome]:
    """Two triggerers; the owner stops heartbeating (SIGSTOP), the other takes the triggers over,
    then the owner wakes up (SIGCONT) and — in 3.3.2 — calls on_kill on its stale copies.

    Each flavor runs two deferred tasks through it: the submit operator, and a sensor with
    ``cancel_on_kill=True`` (its outcome in ``notes["sensor"]``). One executor's flavors at a time:
    twenty jobs and their triggers at once were more than a 2-core machine served in time."""
    outcomes: dict[str, Outcome] = {}
    for executor in sorted({f.executor for f in flavors}):
        outcomes |= _k8_reassign(stack, platform, [f for f in flavors if f.executor == executor])
    return outcomes


def _k8_reassign(stack, platform, flavors: list[Flavor]) -> dict[str, Outcome]:
    stack.components["triggerer-1"].stop()  # so the triggers land on triggerer-0
    shapes = {"operator": "kp_medium_deferred", "sensor": "kp_medium_sensor"}
    runs = _start_deferred_all(
        stack, platform, {(f.key, shape): f.dag(base) for f in flavors for shape, base in shapes.items()}
    )
    owners = {
        n: _wait_triggerer_job(stack, dag, run, lambda j: j is not None) for n, (dag, run, _) in runs.items()
    }
    stack.start_triggerer("triggerer-1")
    owner = stack.components["triggerer-0"]
    owner.signal(signal.SIGSTOP)
    try:
        taken = {
            n: _wait_triggerer_job(
                stack, dag, run, lambda j, o=owners[n]: j is not None and j != o, timeout=120
            )
            for n, (dag, run, _) in runs.items()
        }
    finally:
        owner.signal(signal.SIGCONT)
    time.sleep(8)  # the woken owner cancels its stale copies (on_kill) now
    mid = {n: platform.job(job["job_id"])["state"] for n, (_, _, job) in runs.items()}
    outcomes = {}
    for key, (dag, run_id, _) in runs.items():
        ti = stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=240)
        outcomes[key] = _finish(
            stack,
            platform,
            "K8 trigger reassigned to another triggerer",
            dag,
            run_id,
            expect_cancel=False,
            owner_job=owners[key],
            taken_by=taken[key],
            state_after_wake=mid[key],
            log=stack.task_log(dag, run_id, "train", ti["try_number"]),
        )
    for f in flavors:
        outcomes[(f.key, "operator")].notes["sensor"] = outcomes.pop((f.key, "sensor"))
    return {f.key: outcomes.pop((f.key, "operator")) for f in flavors}


def k14b_auxiliary_refused(stack, platform, flavors: list[Flavor]) -> dict[str, Outcome]:
    """Every auxiliary endpoint of the platform (events, checkpoints, metrics) answers 403 for good;
    status reads work. A deferred task and one on the worker: both must succeed with their job,
    warn once per kind, and never cancel. Exclusive: the rules match every job of the platform."""
    rules = [
        platform.add_fault(method="GET", path_prefix=f.jobs_path, path_suffix=suffix, status=403, count=-1)[
            "id"
        ]
        for f in flavors
        for suffix in f.auxiliary
    ]
    try:
        runs = {f.key: (f.dag("kp_aux_refused"), stack.trigger(f.dag("kp_aux_refused"))) for f in flavors}
        outcomes = {}
        for name, (dag, run_id) in runs.items():
            tis = {
                t: stack.wait_ti(dag, run_id, t, {"success", "failed"}, timeout=180)
                for t in ("train", "train_on_worker")
            }
            logs = {
                t: stack.task_log(dag, run_id, t, ti["try_number"], wait_for=("not readable",))
                for t, ti in tis.items()
            }
            outcomes[name] = _finish(
                stack,
                platform,
                "K14b auxiliary endpoints refused for good",
                dag,
                run_id,
                expect_cancel=False,
                states={t: ti["state"] for t, ti in tis.items()},
                logs=logs,
                expected_submits=2,
            )
        return outcomes
    finally:
        for rule in rules:
            platform.clear_faults(rule_id=rule)


def k17_already_failed(stack, platform, flavors: list[Flavor]) -> dict[str, Outcome]:
    # Hold each operator's first status check until its trainer has failed (it dies within ~5 s).
    for f in flavors:
        ids = [platform.add_fault(**f.poll_rule(), delay_seconds=15, count=1)["id"] for f in flavors]
    try:
        runs = {f.key: (f.dag("kp_fails_fast"), stack.trigger(f.dag("kp_fails_fast"))) for f in flavors}
        tis = {
            n: stack.wait_ti(dag, run, "train", {"success", "failed"}, timeout=120)
            for n, (dag, run) in runs.items()
        }
    finally:
        for rule_id in ids:
            platform.clear_faults(rule_id=rule_id)
    return {
        n: _finish(
            stack,
            platform,
            "K17 job already failed at first check",
            dag,
            run,
            expect_cancel=False,
            log=stack.task_log(
                dag, run, "train", tis[n]["try_number"], wait_for=("learning_rate", "CUDA error")
            ),
        )
        for n, (dag, run) in runs.items()
    }


def k18_reaper_when_triggerer_down(stack, platform, flavors: list[Flavor]) -> dict[str, Outcome]:
    started = _start_deferred_all(stack, platform, {f.key: f.dag("kp_deferred") for f in flavors})
    runs = {f.key: (f, *started[f.key]) for f in flavors}
    names = _stop_triggerers(stack)
    try:
        # The API server's mark-failed listener cancels such a job at once (K24): refuse its cancel,
        # once per job, so that nothing but the reaper stops the job here.
        refusals = {
            n: platform.add_fault(**flavor.cancel_rule(job["job_id"]), status=400, count=1,
                                  message="Injected fault: this cancel is refused")["id"]
            for n, (flavor, _, _, job) in runs.items()
        }  # fmt: skip
        t0 = time.time()
        for _, dag, run_id, _ in runs.values():
            stack.set_ti_state(dag, run_id, "train", "failed")
        deadline = time.monotonic() + 30
        while not all(platform.fault(r)["fired"] for r in refusals.values()) and time.monotonic() < deadline:
            time.sleep(0.3)
        refused = {n: platform.fault(r)["fired"] for n, r in refusals.items()}
        for rule_id in refusals.values():
            platform.clear_faults(rule_id=rule_id)
        time.sleep(3)
        untouched = {n: platform.job(job["job_id"])["state"] for n, (_, _, _, job) in runs.items()}
        # every platform's reaper at once: each lists and cancels only its own platform's jobs
        reaper_runs = {
            name: stack.trigger(flavor.dag("kp_reaper")) for name, (flavor, *_rest) in runs.items()
        }
        reapers = {
            name: stack.wait_ti(runs[name][0].dag("kp_reaper"), run, "reap", {"success", "failed"}, 120)
            for name, run in reaper_runs.items()
        }
        for _, _, _, job in runs.values():
            platform.wait_job(job["job_id"], {"cancelled"}, timeout=60)
    finally:
        for name in names:
            stack.start_triggerer(name)
    time.sleep(5)
    return {
        n: _finish(
            stack,
            platform,
            "K18 mark failed, triggerer down → reaper",
            dag,
            run_id,
            expect_cancel=True,
            since=t0,
            untouched=untouched[n],
            listener_refused=refused[n],
            reaper_state=reapers[n]["state"],
        )
        for n, (_, dag, run_id, _) in runs.items()
    }


def k20_events_across_triggerer_restart(stack, platform, flavors: list[Flavor]) -> dict[str, Outcome]:
    """Events streamed into the task log, the triggerers restarted mid-stream: each event once, in
    order. A user-code flavor streams its program's lines instead (``stream_logs``; the lines the
    platform holds for the job are in ``notes["program_lines"]``)."""
    from airflow_training_provider.hooks.training import TrainingPlatformHook

    shapes = {f.key: f.dag("kp_program_log" if f.user_code else "kp_events") for f in flavors}
    started = _start_deferred_all(stack, platform, shapes)
    runs = {f.key: (f, *started[f.key]) for f in flavors}
    time.sleep(4)  # some events are written before the restart
    for flavor, _dag, _run_id, job in runs.values():
        if flavor.user_code:  # else the restart tests nothing: lines printed (and polled), more to come
            record = platform.job(job["job_id"])
            if record["state"] != "running" or not record["logs"]:
                raise AssertionError(
                    f"K20 {flavor.key}: before the restart the job is {record['state']} and has printed "
                    f"{len(record['logs'])} lines (want running, at least one)"
                )
    _restart_triggerers(stack)
    outcomes = {}
    for name, (flavor, dag, run_id, job) in runs.items():
        ti = stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=180)
        if flavor.user_code:
            lines = platform.job(job["job_id"])["logs"]
            outcomes[name] = _finish(
                stack,
                platform,
                "K20 program lines across a triggerer restart",
                dag,
                run_id,
                expect_cancel=False,
                log=stack.task_log(
                    dag, run_id, "train", ti["try_number"], wait_for=(f"[program] {lines[-1]}",)
                ),
                program_lines=lines,
            )
            continue
        served = TrainingPlatformHook(flavor.conn_id).list_events(job["job_id"])
        last = f"[{served[-1].type}] {served[-1].message}" if served else "Platform event"
        outcomes[name] = _finish(
            stack,
            platform,
            "K20 events across a triggerer restart",
            dag,
            run_id,
            expect_cancel=False,
            log=stack.task_log(dag, run_id, "train", ti["try_number"], wait_for=(last,)),
            events=[{"type": e.type, "message": e.message} for e in served],
        )
    return outcomes


def k21_kill_one_mapped(stack, platform, flavor: Flavor) -> Outcome:
    """Three mapped tries of one task, each deferred on its own job; one is marked failed: only its
    job is cancelled, the other two keep training."""
    dag = flavor.dag("kp_mapped")
    run_id = stack.trigger(dag)
    platform.wait_running(dag, run_id, count=3)
    for index in range(3):
        stack.wait_trigger_running(dag, run_id, "train", settle=0, map_index=index)
    by_index = {_map_index(job): job for job in platform.run_jobs(dag, run_id)}
    for job in by_index.values():
        platform.wait_polled(job)
    t0 = time.time()
    stack.set_ti_state(dag, run_id, "train", "failed", map_index=1)
    platform.wait_job(by_index[1]["job_id"], {"cancelled"}, timeout=60)
    time.sleep(5)  # a wrong cancel of a sibling's job would arrive by now
    jobs = platform.run_jobs(dag, run_id)
    outcome = Outcome(
        "K21 one mapped task instance marked failed",
        True,
        jobs,
        stack.ti(dag, run_id, "train", map_index=1)["state"],
        _latency(platform.job(by_index[1]["job_id"]), t0),
        {
            "expected_submits": 3,
            "by_index": {i: platform.job(j["job_id"]) for i, j in by_index.items()},
            "sibling_states": {i: stack.ti(dag, run_id, "train", map_index=i)["state"] for i in (0, 2)},
        },
    )
    stack.set_dag_run_state(dag, run_id, "failed")  # clean up the siblings' jobs
    for index in (0, 2):
        platform.wait_job(by_index[index]["job_id"], {"cancelled"}, timeout=60)
    return outcome


def k21b_mapped_name_stem(stack, platform, flavor: Flavor) -> Outcome:
    """Three map indexes of one task whose spec names the job with the same stem
    (``churn-{{ ds_nodash }}``): each must get a job of its own and succeed."""
    from datetime import UTC, datetime

    dag = flavor.dag("kp_mapped_stem")
    run_id = stack.trigger(dag, logical_date=datetime.now(UTC).isoformat())  # the stem renders ds_nodash
    states = {}
    for index in range(3):
        ti = stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=240, map_index=index)
        states[index] = ti["state"]
    jobs = platform.run_jobs(dag, run_id)
    return Outcome(
        "K21b mapped task with a job-name stem",
        False,
        jobs,
        None,
        None,
        {"expected_submits": 3, "states": states, "by_index": {_map_index(j): j for j in jobs}},
    )


def _map_index(job: dict) -> int:
    """The map index in a job's identity tags (``airflow-map:<n>``)."""
    return int(next(t for t in job["tags"] if t.startswith("airflow-map:")).split(":", 1)[1])


# -- K24: mark failed while no triggerer runs the trigger: the API server's listener cancels ------------
K24_CASES = {
    "ti": "kp_deferred",  # the task instance marked failed
    "dag_run": "kp_deferred",  # its DAG run marked failed
    "keep": "kp_deferred_keep_on_kill",  # marked failed, cancel_on_kill=False: the job keeps running
    "success": "kp_deferred",  # marked success: not the listener's business
}
K24_CANCELLED = ("ti", "dag_run")


def _start_deferred_all(stack, platform, dags: dict[Any, str]) -> dict[Any, tuple[str, str, dict]]:
    """``_start_deferred`` for many DAGs at once: every run triggered first, then each waited for
    until a triggerer took its trigger and the trigger polled its job. ``{key: (dag, run_id, job)}``."""
    run_ids = {key: stack.trigger(dag) for key, dag in dags.items()}
    runs = {}
    for key, dag in dags.items():
        job = platform.wait_running(dag, run_ids[key], timeout=240)
        stack.wait_trigger_running(dag, run_ids[key], "train", timeout=120, settle=0)
        runs[key] = (dag, run_ids[key], job)
    platform.wait_all_polled({key: job for key, (_, _, job) in runs.items()}, timeout=90)
    return runs


def _listener_lines(stack, *needles: str) -> list[str]:
    """The API server's log lines of the mark-failed listener that mention one of ``needles``."""
    text = stack.components["api-server"].log_path.read_text(errors="replace")
    return [
        line[:400]
        for line in text.splitlines()
        if "Mark-failed listener" in line and any(n in line for n in needles)
    ]


def _wait_triggerers_healthy(stack, timeout: float = 90) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        health = requests.get(f"{stack.api}/monitor/health", timeout=10).json()
        if health.get("triggerer", {}).get("status") == "healthy":
            return True
        time.sleep(1)
    return False


def k24_mark_failed_no_triggerer(stack, platform, flavors: list[Flavor]) -> dict[str, Outcome]:
    """Every triggerer stopped; then, per platform, a deferred task instance is marked failed and
    another's DAG run is marked failed: the API server's listener cancels each job at once (no
    ``on_kill`` can run: no triggerer). A task with ``cancel_on_kill=False`` marked failed, and one
    marked success, keep their jobs (on one platform: the listener decides them before any platform
    is involved). The triggerers come back and must cancel nothing more."""
    # the cases where the listener leaves the job run on one platform of the group: it decides
    # them before any platform is involved (and every task started costs the loaded machine)
    first = next((f for f in flavors if f.name == "tensorone"), flavors[0])
    dags = {
        (f.key, case): f.dag(shape)
        for f in flavors
        for case, shape in K24_CASES.items()
        if f.runs(shape) and (case in K24_CANCELLED or f is first)
    }
    runs = _start_deferred_all(stack, platform, dags)
    names = _stop_triggerers(stack)
    marked: dict[Any, float] = {}
    try:
        for (key, case), (dag, run_id, _) in runs.items():
            marked[(key, case)] = time.time()
            if case == "dag_run":
                stack.set_dag_run_state(dag, run_id, "failed")
            else:
                stack.set_ti_state(dag, run_id, "train", "success" if case == "success" else "failed")
        for (_key, case), (_, _, job) in runs.items():
            if case in K24_CANCELLED:
                platform.wait_job(job["job_id"], {"cancelled"}, timeout=60)
        time.sleep(3)  # a second (wrong) cancel, or one of a job that must keep running, shows by now
        while_down = {k: platform.job(job["job_id"])["state"] for k, (_, _, job) in runs.items()}
        triggers = {k: stack.ti(dag, run_id, "train").get("trigger") for k, (dag, run_id, _) in runs.items()}
    finally:
        restarted_at = time.time()
        for name in names:
            stack.start_triggerer(name)
    healthy = _wait_triggerers_healthy(stack)
    time.sleep(8)  # the restarted triggerers pick up what is left and clean up: no cancel from them
    outcomes: dict[Any, Outcome] = {}
    for (key, case), (dag, run_id, job) in runs.items():
        outcomes[(key, case)] = _finish(
            stack,
            platform,
            f"K24 mark failed, no triggerer ({case})",
            dag,
            run_id,
            expect_cancel=case in K24_CANCELLED,
            since=marked[(key, case)],
            state_while_down=while_down[(key, case)],
            trigger_after=triggers[(key, case)],
            restarted_at=restarted_at,
            triggerers_healthy=healthy,
            listener_log=_listener_lines(stack, run_id, job["job_id"]),
        )
    latencies = [f"{key} {case} {o.latency:.2f}" for (key, case), o in outcomes.items() if o.latency]
    _progress(f"k24: cancel arrived (s after the PATCH was sent): {', '.join(latencies)}")
    for (_key, case), (_, _, job) in runs.items():
        if case not in K24_CANCELLED:
            platform.console_cancel(job["job_id"])  # clean up the jobs that were kept
    results = {}
    for f in flavors:
        main = outcomes[(f.key, "ti")]
        for case in K24_CASES:
            if case != "ti" and (f.key, case) in outcomes:
                main.notes[case] = outcomes[(f.key, case)]
        results[f.key] = main
    return results


LOCAL = frozenset({"LocalExecutor"})
BOTH = frozenset({"LocalExecutor", "CeleryExecutor"})
CELERY = frozenset({"CeleryExecutor"})


@dataclass(frozen=True)
class Scenario:
    """A row of the scenario table.

    :ivar run: ``run(stack, platform, flavor) -> Outcome``, or for an exclusive scenario
        ``run(stack, platform, flavors) -> {flavor name: Outcome}`` (all its platforms at once).
    :ivar exclusive: it must run alone (it stops triggerers or faults every job of a platform).
    :ivar applies: the platforms it applies to.
    :ivar executors: the executors it is proven on (its flavors' :attr:`Flavor.executor`).
    """

    run: Callable[..., Any]
    exclusive: bool = False
    applies: Callable[[Flavor], bool] = lambda flavor: True
    executors: frozenset[str] = LOCAL

    @property
    def key(self) -> str:
        return self.run.__name__


_TABLE = [
    Scenario(k1_mark_failed, executors=BOTH),
    Scenario(k2_clear, executors=BOTH),
    Scenario(k2b_clear_reattach),
    Scenario(k3_mark_success),
    Scenario(k3b_mark_success_option),
    Scenario(k4_dag_run_failed, executors=BOTH),
    Scenario(k4b_dagrun_timeout),
    Scenario(k5_execution_timeout_deferred, executors=BOTH),
    Scenario(k5b_timeout_retry_resumes, applies=lambda f: f.user_code),
    Scenario(k6_defer_timeout),
    Scenario(k7_triggerer_restart, exclusive=True),
    Scenario(k7b_guards_across_triggerer_restart, exclusive=True, applies=lambda f: f.guard_spec is not None),
    Scenario(k8_triggerer_reassignment, exclusive=True, executors=BOTH),
    Scenario(k9_slow_cancel),
    Scenario(k10_sigterm_task, executors=BOTH),
    Scenario(k11_execution_timeout_running, executors=BOTH),
    Scenario(k12_mark_failed_running, executors=BOTH),
    Scenario(k13_worker_crash_reattach),
    Scenario(k13c_celery_worker_killed, exclusive=True, executors=CELERY),
    Scenario(k13b_worker_crash_adopt),
    Scenario(k14_flaky_polling),
    Scenario(k14b_auxiliary_refused, exclusive=True, applies=lambda f: bool(f.auxiliary)),
    Scenario(k15_outage_beyond_budget),
    Scenario(k16_cancelled_outside),
    Scenario(k17_already_failed, exclusive=True),
    Scenario(k18_reaper_when_triggerer_down, exclusive=True),
    Scenario(k19_platform_auto_cancel, applies=lambda f: f.auto_cancel_spec is not None),
    Scenario(k20_events_across_triggerer_restart, exclusive=True, applies=lambda f: f.events or f.user_code),
    Scenario(k21_kill_one_mapped),
    Scenario(k21b_mapped_name_stem),
    Scenario(k22_worker_shutdown, executors=BOTH),
    Scenario(k23_retry_during_stop, applies=lambda f: f.final_checkpoint),  # a stop that takes seconds
    # the listener runs in the API server: no worker is involved, so one executor proves it
    Scenario(k24_mark_failed_no_triggerer, exclusive=True),
]
SCENARIOS: dict[str, Scenario] = {s.key: s for s in _TABLE}
"""Scenario key (``k1_mark_failed``...) → its row."""


def pairs(keys: list[str] | None = None, flavors: list[str] | None = None) -> set[tuple[str, str]]:
    """Every ``(scenario, platform)`` pair that applies (of the given scenario keys and platforms)."""
    return {
        (key, name)
        for key, scenario in SCENARIOS.items()
        for name, flavor in ALL_FLAVORS.items()
        if (keys is None or key in keys)
        and (flavors is None or name in flavors)
        and flavor.executor in scenario.executors
        and scenario.applies(flavor)
        and flavor.runs_scenario(key)
    }


def _progress(message: str) -> None:
    """Scenario timings: to ``$KILLPATHS_PROGRESS_LOG`` if set (to watch a run), else stderr."""
    line = f"[killpaths {time.strftime('%H:%M:%S')}] {message}\n"
    if path := os.environ.get("KILLPATHS_PROGRESS_LOG"):
        with open(path, "a") as f:
            f.write(line)
    else:
        sys.stderr.write(line)


def run_scenarios(
    stack, platform, wanted: set[tuple[str, str]], workers: int = 5
) -> dict[tuple[str, str], Any]:
    """Run ``(scenario, flavor)`` pairs: exclusive ones first, one scenario at a time for all its
    flavors at once; then the shareable ones, ``workers`` at a time. Returns an Outcome or the
    exception."""
    from concurrent.futures import ThreadPoolExecutor

    results: dict[tuple[str, str], Any] = {}
    for key, scenario in SCENARIOS.items():
        # every flavor of both executors at once: one disruption (a triggerer restart...) for all
        flavors = [ALL_FLAVORS[f] for (name, f) in sorted(wanted) if name == key]
        if not (scenario.exclusive and flavors):
            continue
        t0 = time.monotonic()
        try:
            for flavor_key, outcome in scenario.run(stack, platform, flavors).items():
                results[(key, flavor_key)] = outcome
        except Exception as exc:  # reported by each test of the group
            results.update({(key, f.key): exc for f in flavors})
        _progress(f"{key} {[f.key for f in flavors]}: {time.monotonic() - t0:.0f} s")
    shared = [(name, f) for (name, f) in sorted(wanted) if not SCENARIOS[name].exclusive]

    def run_one(pair):
        name, flavor = pair
        t0 = time.monotonic()
        try:
            return pair, SCENARIOS[name].run(stack, platform, ALL_FLAVORS[flavor])
        except Exception as exc:
            return pair, exc
        finally:
            _progress(f"{name} [{flavor}]: {time.monotonic() - t0:.0f} s")

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results.update(dict(pool.map(run_one, shared)))
    return results
