"""Map indexes of one mapped task with one name stem, against the local platform: each submits its own
job under its own name (SageMaker refuses a taken ``TrainingJobName`` with ``ResourceInUse``, like
AWS), and a retry that lost its task state finds its own map index's job, not a sibling's."""

from __future__ import annotations

import re
import uuid

import pytest

from airflow_training_devel.killpaths.flavors import FLAVORS
from airflow_training_provider.errors import JobAlreadyExistsError
from airflow_training_provider.identity import TaskIdentity, deployment_name
from airflow_training_provider.testing.inprocess import run_task, task_context
from tests.inprocess.test_operators_inprocess import sagemaker_spec, submit

STEM = "churn-20260101"  # what "churn-{{ ds_nodash }}" renders to in every map index of one run


def test_three_map_indexes_with_one_stem_each_get_their_own_sagemaker_job(control):
    run_id = f"mapped-{uuid.uuid4().hex[:8]}"
    names = []
    for map_index in range(3):  # each try submits and returns; the three jobs train side by side
        op = submit("aws", {**sagemaker_spec(), "TrainingJobName": STEM}, wait_for_completion=False)
        names.append(run_task(op, task_context(op, run_id=run_id, map_index=map_index))["id"])
    assert len(set(names)) == 3, names
    for map_index, name in enumerate(names):
        assert re.fullmatch(rf"{STEM}-m{map_index}-[0-9a-f]{{10}}-t1", name), name
        job = control.wait_job(name, {"succeeded", "failed", "cancelled"})
        assert job["state"] == "succeeded" and f"airflow-map:{map_index}" in job["tags"], job
    jobs = control.jobs(tags=[f"airflow-run:{run_id}"], platform="sagemaker")
    assert sorted(j["job_id"] for j in jobs) == sorted(names)

    # the platform refuses a taken name (a create of map index 1's name by another task instance)
    hook = op.hook
    sibling = TaskIdentity("inprocess", run_id, "train", 1, 1, deployment_name()).tags()
    spec = hook.dialect.validate_spec({**sagemaker_spec(), "TrainingJobName": STEM})
    taken = hook.dialect.with_tags(spec, sibling)
    assert taken["TrainingJobName"] == names[1]
    stranger = [t.replace(f"airflow-run:{run_id}", "airflow-run:someone-else") for t in sibling]
    with pytest.raises(JobAlreadyExistsError, match="ResourceInUse|must be unique"):
        hook.create_job(taken, stranger)
    # ... and a re-sent create of map index 1's try lands on map index 1's job: the same name
    assert hook.create_job(taken, sibling).id == names[1]
    assert len(control.jobs(tags=[f"airflow-run:{run_id}"], platform="sagemaker")) == 3, "no new job"


def with_stem(conn: str, spec: dict) -> dict:
    """``spec`` named by :data:`STEM` where the platform's create body takes a name."""
    if conn == "modelarts":
        return {**spec, "metadata": {**(spec.get("metadata") or {}), "name": STEM}}
    return {**spec, "TrainingJobName": STEM}


@pytest.mark.parametrize("conn", ["aws", "pai", "modelarts"])
def test_a_retry_without_its_task_state_reattaches_to_its_own_map_indexs_job(control, conn):
    # try 1 of each map index submits and returns (the jobs keep running); try 2 of map index 1
    # lost its task state store (the worker died before writing it): it finds its job by tags
    run_id = f"reattach-{conn}-{uuid.uuid4().hex[:8]}"
    spec = with_stem(conn, FLAVORS[conn].spec(epochs=300, seconds_per_epoch=0.2))
    first = []
    for map_index in range(3):
        op = submit(conn, spec, wait_for_completion=False, retries=1)
        first.append(run_task(op, task_context(op, run_id=run_id, map_index=map_index))["id"])
    try:
        for map_index, job_id in enumerate(first):
            name = control.job(job_id)["name"] if conn != "aws" else job_id
            digest = 8 if conn == "modelarts" else 10
            assert re.fullmatch(rf"{STEM}-m{map_index}-[0-9a-f]{{{digest}}}-t1", name), name
        op = submit(conn, spec, wait_for_completion=False, retries=1)
        retry = run_task(op, task_context(op, run_id=run_id, map_index=1, try_number=2))
        assert retry["id"] == first[1]
        jobs = control.jobs(tags=[f"airflow-run:{run_id}"], platform=FLAVORS[conn].platform)
        assert sorted(j["job_id"] for j in jobs) == sorted(first), "no new job"
    finally:
        for job_id in first:
            control.console_cancel(job_id, "test cleanup")
