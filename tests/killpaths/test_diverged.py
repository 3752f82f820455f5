"""A diverged run on the real stack (scheduler, triggerer, API server, PostgreSQL's JSONB): on every
platform that reports metrics, a job whose final loss is NaN and validation loss Infinity ends its
task succeeded, its return value and job record are readable through the REST API, and the task log
names the diverged metric."""

from __future__ import annotations

import json
import math

import pytest

from airflow_training_devel.killpaths.flavors import FLAVORS

REPORTING = sorted(name for name, flavor in FLAVORS.items() if flavor.reports_metrics)


@pytest.fixture(scope="module")
def diverged_runs(kill_path_env) -> dict[str, tuple[str, str]]:
    """One run of each platform's ``kp_diverged`` DAG, all at once: ``{platform: (dag_id, run_id)}``
    once each task instance ended."""
    stack, _ = kill_path_env
    runs = {name: (FLAVORS[name].dag("kp_diverged"),) for name in REPORTING}
    runs = {name: (dag_id, stack.trigger(dag_id)) for name, (dag_id,) in runs.items()}
    for dag_id, run_id in runs.values():
        stack.wait_ti(dag_id, run_id, "train", {"success", "failed", "upstream_failed"}, timeout=240)
    return runs


def xcom(stack, dag_id: str, run_id: str, key: str):
    entry = stack.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/train/xcomEntries/{key}")
    value = entry["value"]
    if isinstance(value, str) and value[:1] in "{[":  # a JSON document given as text
        return json.loads(value)
    return value


@pytest.mark.parametrize("platform_name", REPORTING)
def test_a_diverged_run_succeeds_and_its_result_is_readable_through_the_rest_api(
    kill_path_env, diverged_runs, platform_name
):
    stack, platform = kill_path_env
    dag_id, run_id = diverged_runs[platform_name]
    ti = stack.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/train")
    assert ti["state"] == "success", ti
    (job,) = platform.run_jobs(dag_id, run_id)
    assert job["state"] == "succeeded" and math.isnan(job["metrics"]["loss"])  # the platform's record
    result = xcom(stack, dag_id, run_id, "return_value")
    assert result["state"] == "succeeded" and result["id"] == xcom(stack, dag_id, run_id, "job_id")
    diverged = {name: value for name, value in result["metrics"].items() if isinstance(value, str)}
    assert sorted(diverged.values()) == ["Infinity", "NaN"], result["metrics"]
    record = xcom(stack, dag_id, run_id, "training_job")
    assert record["job"] is None and record["job_in_return_value"] is True  # not repeated
    log = stack.task_log(dag_id, run_id, "train", 1, wait_for=("the run diverged",))
    for name, value in diverged.items():
        assert f"{name} is {value}" in log, log[-3000:]
