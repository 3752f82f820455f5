"""End to end on Airflow 3.3 (``dag.test()`` via ``airflow dags test``) against the local platform.

Assertions are on the platform's own job records (``/_local/jobs``) and files, not only on logs."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import requests

from tests.conftest import API_KEY


def platform_jobs(platform, name: str | None = None) -> list[dict]:
    jobs = requests.get(f"{platform.url}/_local/jobs", timeout=10).json()["jobs"]
    return [j for j in jobs if name is None or j["name"] == name]


def test_example_dag_trains_evaluates_and_promotes(airflow_env, platform):
    before = {j["id"] for j in platform_jobs(platform)}
    run = airflow_env.dags_test("tensorone_retrain_digits")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    new = [j for j in platform_jobs(platform) if j["id"] not in before]
    assert len(new) == 1, "exactly one job submitted"
    job = new[0]
    assert job["state"] == "completed"
    record = json.loads((airflow_env.registry / "digits-classifier.json").read_text())
    assert record["job_id"] == job["id"]
    assert record["validation_accuracy"] >= 0.90
    assert Path(record["checkpoint_path"]).is_file()
    assert "Training job " + job["id"] in out  # progress lines reached the task log
    assert API_KEY not in out


def test_failed_job_fails_the_task_with_platform_message(airflow_env, platform):
    run = airflow_env.dags_test("e2e_failing_job")
    out = run.stdout + run.stderr
    jobs = platform_jobs(platform, "negative-lr")
    assert jobs and jobs[-1]["state"] == "failed"
    message = jobs[-1]["error_message"]
    assert "learning_rate" in message
    assert "TrainingJobFailed" in out and f"Training job {jobs[-1]['id']} failed" in out
    assert "learning_rate" in out.split("TrainingJobFailed", 1)[1][:2000]


def test_sigterm_to_running_task_cancels_job_with_final_checkpoint(airflow_env, platform, tmp_path):
    log = tmp_path / "dags_test.log"
    proc = airflow_env.popen_dags_test("e2e_sigterm_running_task", log)
    try:
        deadline = time.monotonic() + 120
        job = None
        while time.monotonic() < deadline:
            running = [j for j in platform_jobs(platform, "long-sync-job") if j["state"] == "running"]
            if running and running[-1]["progress"].get("epoch", 0) >= 1:
                job = running[-1]
                break
            time.sleep(0.5)
        assert job, log.read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = log.read_text()
    record = next(j for j in platform_jobs(platform) if j["id"] == job["id"])
    assert record["state"] == "cancelled", out[-3000:]
    assert len(record["cancel_requests"]) == 1
    assert record["cancel_requests"][0]["create_final_checkpoint"] is True
    finals = [c for c in record["checkpoints"] if c["kind"] == "final"]
    assert finals and Path(finals[0]["path"]).is_file()
    assert "TrainingJobCancelledByAirflow" in out
    assert "state=success" not in out.lower() or "train" not in out
