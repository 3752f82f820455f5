"""A finished job's result reaches the user whatever its values (issue: a diverged run): on every
platform, a job whose losses went NaN/Infinity ends its task succeeded, deferred or not, with a
result the metadata database takes (the in-process harness stores every XCom, state-store value and
trigger event as strict JSON, refusing NaN and NUL as PostgreSQL does), and the log names the
diverged metric."""

from __future__ import annotations

import json
import math
import uuid

import pytest

from airflow_training_devel.killpaths.flavors import FLAVORS
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.testing.inprocess import run_task, task_context

#: the platforms whose jobs report the built-in trainer's metrics through their API (the flavors'
#: reports_metrics: ModelArts reads its metrics from the program's log, for a portable spec's regexes)
REPORTING = sorted(name for name, flavor in FLAVORS.items() if flavor.reports_metrics)


def diverging(platform: str, deferrable: bool) -> SubmitTrainingJobOperator:
    flavor = FLAVORS[platform]
    spec = flavor.spec(epochs=2, seconds_per_epoch=0.1, diverge_at_epoch=2)
    # the flavors' names and checkpoint paths are templates (Airflow renders them): one run each here,
    # so that no job resumes from another's checkpoints
    run = f"diverged-{uuid.uuid4().hex[:8]}"
    text = json.dumps(spec).replace("{{ dag.dag_id }}", run).replace("{{ run_id | replace(':', '-') }}", run)
    spec = json.loads(text)
    return SubmitTrainingJobOperator(
        task_id="train",
        conn_id=flavor.conn_id,
        spec=spec,
        deferrable=deferrable,
        poll_interval=0.3,
        allow_unknown_fields=True,  # diverge_at_epoch: the local platform's fault injection
    )


@pytest.mark.parametrize(
    "deferrable", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["deferred", "worker"]
)
@pytest.mark.parametrize("conn_type", REPORTING)
def test_a_diverged_run_succeeds_with_its_nan_metrics_kept_and_named(control, conn_type, deferrable, capfd):
    op = diverging(conn_type, deferrable)
    ctx = task_context(op)
    result = run_task(op, ctx)  # the harness refuses what PostgreSQL refuses (NaN, NUL)
    assert result["state"] == "succeeded"
    job = control.job(ctx["ti"].xcoms["job_id"])
    assert job["state"] == "succeeded"
    assert math.isnan(job["metrics"]["loss"]) and math.isinf(
        job["metrics"]["val_loss"]
    )  # the platform's record
    # each platform's own names (SageMaker: train:loss, validation:loss), values as their names
    diverged = {name: value for name, value in result["metrics"].items() if isinstance(value, str)}
    assert sorted(diverged.values()) == ["Infinity", "NaN"], result["metrics"]
    assert all(isinstance(v, float) for k, v in result["metrics"].items() if k not in diverged)
    assert math.isnan(float(diverged[min(diverged, key=lambda k: diverged[k] != "NaN")]))
    log = "".join(capfd.readouterr())
    for name, value in diverged.items():
        assert f"{name} is {value}" in log, log[-3000:]
    assert "the run diverged" in log
