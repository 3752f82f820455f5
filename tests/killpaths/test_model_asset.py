"""The trained model as an Airflow asset, on the real stack (scheduler, triggerer, API server): a
DAG scheduled on the producer's model alias runs once per new model and receives its URI and what
made it (job, platform, epoch, metrics, cost) from the asset event."""

from __future__ import annotations

import json
import time


def consumer_runs(stack) -> dict[str, dict]:
    runs = stack.call("GET", "/dags/kp_model_consumer/dagRuns")["dag_runs"]
    return {r["dag_run_id"]: r for r in runs}


def wait_new_consumer_run(stack, known: set[str], timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = [r for run_id, r in consumer_runs(stack).items() if run_id not in known]
        if new and new[0]["state"] in ("success", "failed"):
            return new[0]
        time.sleep(1)
    raise AssertionError(f"no new kp_model_consumer run finished: {consumer_runs(stack)}")


def produce(stack, platform) -> dict:
    run_id = stack.trigger("kp_model_producer")
    ti = stack.wait_ti("kp_model_producer", run_id, "train", {"success", "failed"}, timeout=180)
    assert ti["state"] == "success", ti
    (job,) = platform.run_jobs("kp_model_producer", run_id)
    return job


def test_a_dag_scheduled_on_the_model_alias_runs_once_per_new_model(kill_path_env):
    stack, platform = kill_path_env
    known = set(consumer_runs(stack))
    models = []
    for _ in range(2):
        job = produce(stack, platform)
        run = wait_new_consumer_run(stack, known)
        known.add(run["dag_run_id"])
        assert run["state"] == "success", run
        entry = stack.call(
            "GET",
            f"/dags/kp_model_consumer/dagRuns/{run['dag_run_id']}/taskInstances/use_model/xcomEntries/return_value",
        )
        value = entry["value"] if not isinstance(entry["value"], str) else json.loads(entry["value"])
        (event,) = value
        saved = platform.job(job["job_id"])["checkpoints"]
        model = ([c for c in saved if c["kind"] == "final"] or saved)[-1]  # the final one, else the latest
        assert event["uri"] == f"file://{model['path']}"
        extra = event["extra"]
        assert extra["job_id"] == job["job_id"] and extra["platform"] == "tensorone" and extra["epoch"] == 2
        assert set(extra["metrics"]) >= {"loss", "validation_loss"} and extra["cost_usd"] > 0
        models.append(event["uri"])
    assert len(set(models)) == 2, "each new model is a new asset event, and one consumer run each"
    time.sleep(3)
    assert len(set(consumer_runs(stack)) - known) == 0, "no extra consumer runs"
