"""Kill-path scenarios K1–K18 (shared/cases/kill-paths.md) on a real Airflow stack.

Each scenario drives Airflow through its REST API (or signals its processes), then reads the
platform's own job records (``/_local/jobs``: submits, cancel requests, states, checkpoint files)
and returns an :class:`Outcome`. The pytest cases assert on outcomes; the benchmark script prints
them as a table. Scenarios leave no job running: they cancel what they started.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from tests.killpaths.stack import AirflowStack

API_KEY = "kill-path-key"


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
        """Accepted cancel requests on the run's jobs, oldest first."""
        reqs = [r for j in self.jobs for r in j["cancel_requests"] if r.get("outcome") == "accepted"]
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


class Platform:
    """Reads and pokes the local platform (records, fault rules, direct cancels)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def jobs(self, dag_id: str, run_id: str | None = None) -> list[dict]:
        records = requests.get(f"{self.url}/_local/jobs", timeout=10).json()["jobs"]
        wanted = {f"airflow-dag:{dag_id}"} | ({f"airflow-run:{run_id}"} if run_id else set())
        return sorted((j for j in records if wanted <= set(j["tags"])), key=lambda j: j["created_at"])

    def job(self, job_id: str) -> dict:
        return requests.get(f"{self.url}/_local/jobs/{job_id}", timeout=10).json()

    def wait_job(self, job_id: str, states: set[str], timeout: float = 90) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job["state"] in states:
                return job
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} never reached {states}: {job['state']}")

    def wait_running(
        self, dag_id: str, run_id: str, count: int = 1, min_epochs: int = 1, timeout: float = 120
    ) -> dict:
        """The run's ``count``-th job, once it is running and has finished ``min_epochs`` epochs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = self.jobs(dag_id, run_id)
            if len(jobs) >= count:
                job = jobs[count - 1]
                if job["state"] == "running" and job["progress"].get("completed_epochs", 0) >= min_epochs:
                    return job
            time.sleep(0.3)
        raise AssertionError(f"no running job #{count} for {dag_id}/{run_id}: {self.jobs(dag_id, run_id)}")

    def cancel(self, job_id: str) -> None:
        requests.post(
            f"{self.url}/v2/training/jobs/{job_id}/cancel",
            headers={"Authorization": f"Bearer {API_KEY}"},
            json={"reason": "stopped from the console", "createFinalCheckpoint": True},
            timeout=30,
        )

    def cancel_all(self, dag_id: str, run_id: str) -> None:
        for job in self.jobs(dag_id, run_id):
            if job["state"] not in {"completed", "failed", "cancelled"}:
                self.cancel(job["job_id"])

    def add_fault(self, **rule: Any) -> None:
        requests.post(f"{self.url}/_local/faults", json=rule, timeout=10).raise_for_status()

    def faults(self) -> list[dict]:
        return requests.get(f"{self.url}/_local/faults", timeout=10).json()["faults"]

    def clear_faults(self) -> None:
        requests.delete(f"{self.url}/_local/faults", timeout=10)


def _xcom(stack: AirflowStack, dag_id: str, run_id: str, key: str) -> Any:
    return stack.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/train/xcomEntries/{key}")[
        "value"
    ]


def _start_deferred(stack: AirflowStack, platform: Platform, dag_id: str) -> tuple[str, dict]:
    run_id = stack.trigger(dag_id)
    job = platform.wait_running(dag_id, run_id)
    stack.wait_ti(dag_id, run_id, "train", {"deferred"})
    return run_id, job


def _start_running(stack: AirflowStack, platform: Platform, dag_id: str) -> tuple[str, dict]:
    run_id = stack.trigger(dag_id)
    job = platform.wait_running(dag_id, run_id)
    stack.wait_ti(dag_id, run_id, "train", {"running"})
    return run_id, job


def _latency(job: dict, since: float) -> float | None:
    accepted = [r for r in job["cancel_requests"] if r.get("outcome") == "accepted"]
    return accepted[0]["received_at"] - since if accepted else None


def _finish(stack, platform, case, dag_id, run_id, *, expect_cancel, since=None, **notes) -> Outcome:
    jobs = platform.jobs(dag_id, run_id)
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


# -- K1–K4: user actions on a deferred task --------------------------------------------------------
def k1_mark_failed(stack, platform) -> Outcome:
    dag = "kp_deferred"
    return _user_action_cancels(
        stack,
        platform,
        "K1 mark failed (deferred)",
        dag,
        lambda run: stack.set_ti_state(dag, run, "train", "failed"),
    )


def k2_clear(stack, platform) -> Outcome:
    dag = "kp_deferred"
    run_id, old = _start_deferred(stack, platform, dag)
    t0 = time.time()
    stack.clear_ti(dag, run_id, "train")
    new = platform.wait_running(dag, run_id, count=2)
    old = platform.job(old["job_id"])
    stack.wait_ti(dag, run_id, "train", {"deferred"})
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


def k2b_clear_reattach(stack, platform) -> Outcome:
    dag = "kp_deferred_reattach_on_clear"
    run_id, job = _start_deferred(stack, platform, dag)
    stack.clear_ti(dag, run_id, "train")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the new try defers again, on the same job
        ti = stack.ti(dag, run_id, "train")
        if ti["try_number"] == 2 and ti["state"] == "deferred":
            break
        time.sleep(0.5)
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


def k3_mark_success(stack, platform) -> Outcome:
    dag = "kp_deferred"
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
    platform.cancel(job["job_id"])  # clean up
    return outcome


def k3b_mark_success_option(stack, platform) -> Outcome:
    dag = "kp_deferred_mark_success_cancels"
    return _user_action_cancels(
        stack,
        platform,
        "K3b mark success, cancel_on_mark_success",
        dag,
        lambda run: stack.set_ti_state(dag, run, "train", "success"),
    )


def k4_dag_run_failed(stack, platform) -> Outcome:
    dag = "kp_deferred"
    return _user_action_cancels(
        stack,
        platform,
        "K4 DAG run marked failed",
        dag,
        lambda run: stack.set_dag_run_state(dag, run, "failed"),
    )


def k4b_dagrun_timeout(stack, platform) -> Outcome:
    dag = "kp_dagrun_timeout"
    run_id, job = _start_deferred(stack, platform, dag)
    start = stack.call("GET", f"/dags/{dag}/dagRuns/{run_id}")["start_date"]
    platform.wait_job(job["job_id"], {"cancelled"}, timeout=90)
    stack.wait_ti(dag, run_id, "train", {"skipped", "failed"}, timeout=30)
    time.sleep(3)
    t_timeout = _iso(start) + 30
    return _finish(stack, platform, "K4b dagrun_timeout", dag, run_id, expect_cancel=True, since=t_timeout)


# -- K5–K9: timeouts, triggerer restarts, slow cancels ----------------------------------------------
def k5_execution_timeout_deferred(stack, platform) -> Outcome:
    dag = "kp_exec_timeout_deferred"
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
    stack.set_ti_state(dag, run_id, "train", "failed")  # don't wait for the retry to time out too
    platform.wait_job(second["job_id"], {"cancelled"}, timeout=60)
    return outcome


def k6_defer_timeout(stack, platform) -> Outcome:
    dag = "kp_defer_timeout"
    run_id, job = _start_deferred(stack, platform, dag)
    platform.wait_job(job["job_id"], {"cancelled"}, timeout=90)
    stack.wait_ti(dag, run_id, "train", {"failed"}, timeout=60)
    return _finish(
        stack,
        platform,
        "K6 defer timeout",
        dag,
        run_id,
        expect_cancel=True,
        log=stack.task_log(dag, run_id, "train", 1),
    )


def k7_triggerer_restart(stack, platform) -> Outcome:
    dag = "kp_short_deferred"
    run_id, job = _start_deferred(stack, platform, dag)
    name = next(n for n in stack.components if n.startswith("triggerer"))
    stack.components[name].stop()
    time.sleep(2)
    stack.start_triggerer(name)
    stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=180)
    return _finish(stack, platform, "K7 triggerer restart", dag, run_id, expect_cancel=False)


def k9_slow_cancel(stack, platform) -> Outcome:
    dag = "kp_deferred"
    run_id, job = _start_deferred(stack, platform, dag)
    platform.add_fault(
        method="POST", path_prefix=f"/v2/training/jobs/{job['job_id']}/cancel", delay_seconds=6, count=1
    )
    t0 = time.time()
    try:
        stack.set_ti_state(dag, run_id, "train", "failed")
        platform.wait_job(job["job_id"], {"cancelled"}, timeout=90)
    finally:
        platform.clear_faults()
    time.sleep(2)
    return _finish(stack, platform, "K9 slow cancel (6 s)", dag, run_id, expect_cancel=True, since=t0)


# -- K10–K13: a task running on a worker ------------------------------------------------------------
def k10_sigterm_task(stack, platform) -> Outcome:
    dag = "kp_running"
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


def k11_execution_timeout_running(stack, platform) -> Outcome:
    dag = "kp_running_exec_timeout"
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


def k12_mark_failed_running(stack, platform) -> Outcome:
    dag = "kp_running"
    run_id, job = _start_running(stack, platform, dag)
    t0 = time.time()
    stack.set_ti_state(dag, run_id, "train", "failed")
    platform.wait_job(job["job_id"], {"cancelled"}, timeout=60)
    time.sleep(3)
    return _finish(stack, platform, "K12 mark failed (running)", dag, run_id, expect_cancel=True, since=t0)


def _kill_worker(stack, dag, run_id) -> None:
    """SIGKILL the task process and its supervisor: nothing of the try survives to clean up."""
    pid = int(_xcom(stack, dag, run_id, "pid"))
    supervisor = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(pid, signal.SIGKILL)
    os.kill(supervisor, signal.SIGKILL)


def k13_worker_crash_reattach(stack, platform) -> Outcome:
    dag = "kp_worker_crash_reattach"
    run_id, job = _start_running(stack, platform, dag)
    _kill_worker(stack, dag, run_id)
    ti = _wait_try(stack, dag, run_id, 2, {"running"})
    time.sleep(3)
    outcome = _finish(
        stack,
        platform,
        "K13 worker SIGKILL → retry re-attaches",
        dag,
        run_id,
        expect_cancel=False,
        job=job,
        try_number=ti["try_number"],
        xcom_job=_xcom(stack, dag, run_id, "job_id"),
        job_state=platform.job(job["job_id"])["state"],
    )
    stack.set_ti_state(dag, run_id, "train", "failed")
    platform.wait_job(job["job_id"], {"cancelled"}, timeout=60)
    return outcome


def k13b_worker_crash_adopt(stack, platform) -> Outcome:
    dag = "kp_worker_crash_adopt"
    run_id, job = _start_running(stack, platform, dag)
    _kill_worker(stack, dag, run_id)
    platform.wait_job(job["job_id"], {"completed"}, timeout=120)
    ti = stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=180)
    return _finish(
        stack,
        platform,
        "K13b worker SIGKILL → retry adopts result",
        dag,
        run_id,
        expect_cancel=False,
        try_number=ti["try_number"],
        log=stack.task_log(dag, run_id, "train", ti["try_number"]),
    )


def _wait_try(stack, dag, run_id, try_number, states, timeout=120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ti = stack.ti(dag, run_id, "train")
        if ti["try_number"] >= try_number and ti["state"] in states:
            return ti
        time.sleep(0.5)
    raise AssertionError(f"try {try_number} never reached {states}: {ti}")


# -- K14–K18: platform faults, outside cancels, already-failed jobs, the reaper ---------------------
def k14_flaky_polling(stack, platform) -> Outcome:
    dag = "kp_short_deferred"
    run_id, job = _start_deferred(stack, platform, dag)
    prefix = f"/v2/training/jobs/{job['job_id']}"
    for rule in (
        {"status": 503},
        {"status": 429, "retry_after": 3},
        {"delay_seconds": 12},  # longer than the trigger's call timeout
        {"body": "<html>upstream hiccup</html>"},
    ):
        platform.add_fault(method="GET", path_prefix=prefix, count=1, **rule)
    try:
        ti = stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=180)
        fired = [r["fired"] for r in platform.faults()]
    finally:
        platform.clear_faults()
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


def k15_outage_beyond_budget(stack, platform) -> Outcome:
    dag = "kp_outage_retry"
    run_id, job = _start_deferred(stack, platform, dag)
    platform.add_fault(method="GET", path_prefix=f"/v2/training/jobs/{job['job_id']}", status=503, count=-1)
    try:
        stack.wait_ti(dag, run_id, "train", {"up_for_retry", "failed"}, timeout=90)
        log1 = stack.task_log(dag, run_id, "train", 1)
        during = platform.job(job["job_id"])
    finally:
        platform.clear_faults()
    ti = stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=180)
    return _finish(
        stack,
        platform,
        "K15 outage beyond budget",
        dag,
        run_id,
        expect_cancel=False,
        log1=log1,
        state_during=during["state"],
        try_number=ti["try_number"],
    )


def k16_cancelled_outside(stack, platform) -> Outcome:
    dag = "kp_deferred"
    run_id, job = _start_deferred(stack, platform, dag)
    platform.cancel(job["job_id"])
    ti = stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=60)
    outcome = _finish(
        stack,
        platform,
        "K16 job stopped outside Airflow",
        dag,
        run_id,
        expect_cancel=False,
        log=stack.task_log(dag, run_id, "train", ti["try_number"]),
    )
    outcome.notes["outside_cancels"] = len(outcome.cancels)
    outcome.expect_cancel = True  # the one cancel is the console's, not Airflow's
    return outcome


def k17_already_failed(stack, platform) -> Outcome:
    dag = "kp_fails_fast"
    # Hold the operator's first status check until the trainer has failed (it dies in ~2 s).
    platform.add_fault(method="GET", path_prefix="/v2/training/jobs/job_train_", delay_seconds=6, count=1)
    try:
        run_id = stack.trigger(dag)
        ti = stack.wait_ti(dag, run_id, "train", {"success", "failed"}, timeout=120)
    finally:
        platform.clear_faults()
    return _finish(
        stack,
        platform,
        "K17 job already failed at first check",
        dag,
        run_id,
        expect_cancel=False,
        log=stack.task_log(dag, run_id, "train", ti["try_number"]),
    )


def k18_reaper_when_triggerer_down(stack, platform) -> Outcome:
    dag = "kp_deferred"
    run_id, job = _start_deferred(stack, platform, dag)
    name = next(n for n in stack.components if n.startswith("triggerer"))
    stack.components[name].stop()
    try:
        t0 = time.time()
        stack.set_ti_state(dag, run_id, "train", "failed")
        time.sleep(3)
        untouched = platform.job(job["job_id"])["state"]
        reaper_run = stack.trigger("kp_reaper")
        reaper = stack.wait_ti("kp_reaper", reaper_run, "reap", {"success", "failed"}, timeout=120)
        platform.wait_job(job["job_id"], {"cancelled"}, timeout=60)
    finally:
        stack.start_triggerer(name)
    time.sleep(5)
    return _finish(
        stack,
        platform,
        "K18 mark failed, triggerer down → reaper",
        dag,
        run_id,
        expect_cancel=True,
        since=t0,
        untouched=untouched,
        reaper_state=reaper["state"],
    )


def _iso(value: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


SCENARIOS = [
    k1_mark_failed,
    k2_clear,
    k2b_clear_reattach,
    k3_mark_success,
    k3b_mark_success_option,
    k4_dag_run_failed,
    k4b_dagrun_timeout,
    k5_execution_timeout_deferred,
    k6_defer_timeout,
    k7_triggerer_restart,
    k9_slow_cancel,
    k10_sigterm_task,
    k11_execution_timeout_running,
    k12_mark_failed_running,
    k13_worker_crash_reattach,
    k13b_worker_crash_adopt,
    k14_flaky_polling,
    k15_outage_beyond_budget,
    k16_cancelled_outside,
    k17_already_failed,
    k18_reaper_when_triggerer_down,
]
