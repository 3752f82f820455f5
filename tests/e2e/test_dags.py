"""End to end on Airflow 3.3 (``dag.test()`` via ``airflow dags test``) against the local platform.

Assertions are on the platform's own job records (``/_local/jobs``) and files, not only on logs."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import requests

from airflow_training_platform.control import LocalPlatformControl
from tests.conftest import API_KEY


def platform_jobs(platform, name: str | None = None) -> list[dict]:
    return LocalPlatformControl(platform.url).jobs(name=name)


def test_example_dag_trains_evaluates_and_promotes(airflow_env, platform):
    before = {j["job_id"] for j in platform_jobs(platform)}
    run = airflow_env.dags_test("tensorone_retrain_digits")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    new = [j for j in platform_jobs(platform) if j["job_id"] not in before]
    assert len(new) == 1, "exactly one job submitted"
    job = new[0]
    assert job["state"] == "succeeded"
    record = json.loads((airflow_env.registry / "digits-classifier.json").read_text())
    assert record["job_id"] == job["job_id"]
    assert record["validation_accuracy"] >= 0.90
    assert Path(record["checkpoint_path"]).is_file()
    assert "Training job " + job["job_id"] in out  # progress lines reached the task log
    assert API_KEY not in out


def test_sagemaker_example_dag_trains_evaluates_and_promotes(airflow_env, platform):
    before = {j["job_id"] for j in platform_jobs(platform)}
    run = airflow_env.dags_test("sagemaker_retrain_digits")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    new = [j for j in platform_jobs(platform) if j["job_id"] not in before]
    assert len(new) == 1 and new[0]["platform"] == "sagemaker", "exactly one job submitted"
    job = new[0]
    assert (
        job["state"] == "succeeded" and job["job_id"].startswith("digits-") and job["job_id"].endswith("-t1")
    )
    record = json.loads((airflow_env.registry / "digits-sagemaker.json").read_text())
    assert record["job_id"] == job["job_id"] and record["validation_accuracy"] >= 0.90
    assert record["model_artifact"].endswith(f"/{job['job_id']}/output/model.tar.gz")
    assert record["billable_seconds"] >= 1
    assert [c for c in job["checkpoints"] if c["kind"] == "automatic"], (
        "checkpoints in the checkpoint location"
    )
    for status in ("Starting", "Downloading", "Training", "Uploading", "Completed"):
        assert f"[{status}]" in out, f"transition {status} not in the task log"
    assert API_KEY not in out


def test_pai_example_dag_trains_evaluates_and_promotes(airflow_env, platform):
    before = {j["job_id"] for j in platform_jobs(platform)}
    run = airflow_env.dags_test("pai_retrain_digits")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    new = [j for j in platform_jobs(platform) if j["job_id"] not in before]
    assert len(new) == 1 and new[0]["platform"] == "pai", "exactly one job submitted"
    job = new[0]
    assert job["state"] == "succeeded" and job["name"].startswith("digits-") and job["name"].endswith("-t1")
    assert "airflow-dag:pai_retrain_digits" in job["tags"] and "team:ml" in job["tags"]
    record = json.loads((airflow_env.registry / "digits-pai.json").read_text())
    assert record["job_id"] == job["job_id"] and record["validation_accuracy"] >= 0.90
    assert record["checkpoints"].startswith("oss://") and record["run_seconds"] >= 1
    assert [c for c in job["checkpoints"] if c["kind"] == "automatic"], "checkpoints in the channel"
    for event in ("[job_start]", "[epoch_complete] Epoch 10 complete", "[training_complete]"):
        assert event in out, f"event {event} not in the task log"
    assert API_KEY not in out


def test_modelarts_example_dag_trains_and_registers(airflow_env, platform):
    before = {j["job_id"] for j in platform_jobs(platform)}
    run = airflow_env.dags_test("modelarts_retrain_digits")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    new = [j for j in platform_jobs(platform) if j["job_id"] not in before]
    assert len(new) == 1 and new[0]["platform"] == "modelarts", "exactly one job submitted"
    job = new[0]
    assert job["state"] == "succeeded" and re.fullmatch(r"digits-\d{8}-[0-9a-f]{8}-t1", job["name"]), job[
        "name"
    ]
    assert "airflow-dag:modelarts_retrain_digits" in job["tags"] and "airflow-try:1" in job["tags"]
    record = json.loads((airflow_env.registry / "digits-modelarts.json").read_text())
    assert record["job_id"] == job["job_id"] and record["state"] == "succeeded"
    assert record["checkpoints"].startswith("/ml-training-local/checkpoints/") and record["run_seconds"] >= 1
    files = [Path(c["path"]) for c in job["checkpoints"] if c["kind"] == "automatic"]
    assert files and all(f.is_file() and "obs/ml-training-local/checkpoints" in str(f) for f in files)
    for event in ("[job_start]", "[epoch_complete] Epoch 10 complete", "[training_complete]"):
        assert event in out, f"event {event} not in the task log"
    assert API_KEY not in out


def test_the_sweep_example_maps_one_job_per_grid_point_and_promotes_the_best(airflow_env, platform):
    before = {j["job_id"] for j in platform_jobs(platform)}
    run = airflow_env.dags_test("tensorone_sweep_digits")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    jobs = [j for j in platform_jobs(platform) if j["job_id"] not in before]
    assert len(jobs) == 4 and {j["name"].split("-t")[0] for j in jobs} == {
        f"sweep-lr{lr}-h{h}" for lr in (0.001, 0.01) for h in (32, 64)
    }
    maps = sorted(t for j in jobs for t in j["tags"] if t.startswith("airflow-map:"))
    assert maps == [f"airflow-map:{i}" for i in range(4)], "one mapped task instance per job"
    record = json.loads((airflow_env.registry / "digits-sweep.json").read_text())
    accuracy = {j["job_id"]: (j["metrics"] or {}).get("val_accuracy", 0.0) for j in jobs}
    # validation accuracy comes in steps of 1/360 (the digits validation split): ties are common
    assert accuracy[record["job_id"]] == max(accuracy.values()), (record, accuracy)
    assert record["checkpoint"] and Path(record["checkpoint"]).is_file()
    assert all(j["cost"]["current_usd"] <= 1.0 for j in jobs)


def test_failed_job_fails_the_task_with_platform_message(airflow_env, platform):
    run = airflow_env.dags_test("e2e_failing_job")
    out = run.stdout + run.stderr
    jobs = platform_jobs(platform, "negative-lr")
    assert jobs and jobs[-1]["state"] == "failed"
    message = jobs[-1]["error"]
    assert "learning_rate" in message
    assert run.returncode != 0
    assert "TrainingJobFailed" in out and f"Training job {jobs[-1]['job_id']} failed" in out
    assert "learning_rate" in out.split("TrainingJobFailed", 1)[1][:2000]


def test_sigterm_to_running_task_cancels_job_with_final_checkpoint(airflow_env, platform, tmp_path):
    log = tmp_path / "dags_test.log"
    proc = airflow_env.popen_dags_test("e2e_sigterm_running_task", log)
    try:
        deadline = time.monotonic() + 120
        job = None
        while time.monotonic() < deadline:
            running = [j for j in platform_jobs(platform, "long-sync-job") if j["state"] == "running"]
            if running and running[-1]["progress"].get("completed_epochs", 0) >= 1:
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
    record = next(j for j in platform_jobs(platform) if j["job_id"] == job["job_id"])
    assert record["state"] == "cancelled", out[-3000:]
    assert len(record["cancel_requests"]) == 1
    assert record["cancel_requests"][0]["create_final_checkpoint"] is True
    finals = [c for c in record["checkpoints"] if c["kind"] == "final"]
    assert finals and Path(finals[0]["path"]).is_file()
    assert "TrainingJobCancelledByAirflow" in out
    assert proc.returncode != 0  # the DAG run failed: the task did not go on to succeed


def together_jobs(platform, suffix: str) -> list[dict]:
    return [
        j
        for j in platform_jobs(platform)
        if j["platform"] == "together" and suffix in json.dumps(j["request"])
    ]


def event_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "Platform event" in line]


def test_together_finetune_example_succeeds_with_events_once_in_order(airflow_env, platform):
    run = airflow_env.dags_test("together_finetune_digits")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    job = together_jobs(platform, "digits-")[-1]
    assert job["state"] == "succeeded"
    # "Platform event <created_at> [<type>] <message>": the event's own identity, not the log line's
    keys = [line[line.index("Platform event") :].split("]")[0] for line in event_lines(out)]
    types = [key.rsplit("[", 1)[1] for key in keys]
    expected_order = ["job_pending", "job_start", "training_start", "training_complete", "job_complete"]
    positions = [types.index(t) for t in expected_order]
    assert positions == sorted(positions), types
    assert len(keys) == len(set(keys)), "an event was logged twice"
    assert len(keys) == len(job["events"]), (types, [e["type"] for e in job["events"]])
    assert "from_checkpoint=" + job["job_id"] + ":" in out


def test_together_bad_wandb_key_auto_cancel_fails_task_with_event_message(airflow_env, platform):
    run = airflow_env.dags_test("e2e_together_bad_wandb_key")
    out = run.stdout + run.stderr
    assert run.returncode != 0
    job = together_jobs(platform, "bad-wandb")[-1]
    assert job["state"] == "cancelled"
    failure = out.split("TrainingJobFailed", 1)[1][:3000]
    assert "W&B login failed" in failure


def test_together_balance_auto_cancel_fails_task_with_billing_event(airflow_env, broke_platform):
    run = airflow_env.dags_test("e2e_together_out_of_balance")
    out = run.stdout + run.stderr
    assert run.returncode != 0
    job = together_jobs(broke_platform, "broke")[-1]
    assert job["state"] == "cancelled"
    failure = out.split("TrainingJobFailed", 1)[1][:3000]
    assert "balance" in failure.lower() or "billing" in failure.lower()


def submit_directly(platform, **training) -> str:
    body = {"name": "sensor-target", "datasetId": "digits", "config": {"training": training}}
    response = requests.post(
        f"{platform.url}/v2/training/jobs",
        json=body,
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=10,
    )
    return response.json()["jobId"]


def test_sensor_waits_deferred_for_an_existing_job(airflow_env, platform):
    job_id = submit_directly(platform, epochs=100, seconds_per_epoch=0.3)  # outlives the DAG's start
    run = airflow_env.dags_test("e2e_sensor", "--conf", json.dumps({"job_id": job_id}))
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "TrainingJobTrigger" in out  # it waited deferred
    assert f"Training job {job_id} succeeded" in out
    assert next(j for j in platform_jobs(platform) if j["job_id"] == job_id)["state"] == "succeeded"


def test_sensor_fails_on_a_failed_job(airflow_env, platform):
    job_id = submit_directly(platform, epochs=2, learning_rate=-1.0)
    run = airflow_env.dags_test("e2e_sensor", "--conf", json.dumps({"job_id": job_id}))
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert f"Training job {job_id} failed" in out and "learning_rate" in out
