"""Training guards against the local platform, judged by its own records: early stopping stops a job
that no longer improves (with a final checkpoint) and the task succeeds naming the best checkpoint;
a budget stops a job before it costs more than its cap and the task fails without retries; a run
time limit; a guard a platform cannot serve fails the task before anything is submitted."""

from __future__ import annotations

import os

import pytest
from airflow.sdk import AssetAlias
from airflow.sdk.exceptions import AirflowFailException

from airflow_training_devel.killpaths.flavors import FLAVORS
from airflow_training_platform.control import LocalPlatformControl
from airflow_training_provider.job_task import TrainingJobStoppedByGuard
from airflow_training_provider.testing.inprocess import run_task, task_context
from tests.inprocess.test_operators_inprocess import submit, tensorone_spec


def guard_cancel(control, job_id: str) -> dict:
    job = control.wait_job(job_id, {"cancelled"})
    (cancel,) = LocalPlatformControl.accepted_cancels(job)
    return job, cancel


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferred", "worker"])
def test_early_stopping_stops_a_job_that_no_longer_improves_and_the_task_succeeds(control, deferrable):
    # an improvement must be 0.05 or more: the validation loss of this MLP flattens out after a few epochs
    rule = {"metric": "validation_loss", "mode": "min", "patience": 2, "min_delta": 0.05}
    op = submit("tensorone", tensorone_spec(epochs=100, seconds_per_epoch=0.3), deferrable=deferrable,
                early_stopping=rule, model_alias="digits-model")  # fmt: skip
    ctx = task_context(op, run_id=f"early-{deferrable}")
    result = run_task(op, ctx)
    guard = result["guard"]
    assert guard["guard"] == "early_stopping" and guard["succeed"] and guard["metric"] == "validation_loss"
    assert guard["epoch"] - guard["best_epoch"] in (2, 3), guard  # polled every 0.5 s, an epoch per 0.3 s
    job, cancel = guard_cancel(control, result["id"])
    assert cancel["reason"].startswith("Airflow guard: early stopping: validation_loss has not improved")
    finals = [c for c in job["checkpoints"] if c["kind"] == "final"]
    assert finals and os.path.isfile(finals[-1]["path"]), "a final checkpoint was saved on the stop"
    assert job["progress"]["epoch"] < 100 and result["state"] == "cancelled"
    # judged on the platform's own per-epoch records: no epoch after the best improved by 0.05
    losses = {c["epoch"]: c["metrics"]["val_loss"] for c in job["checkpoints"] if c["kind"] == "automatic"}
    best_epoch = int(guard["best_epoch"])
    assert losses[best_epoch] == pytest.approx(guard["best_value"])
    assert all(losses[best_epoch] - losses[e] < 0.05 for e in losses if e > best_epoch), losses
    assert losses[best_epoch] < losses[1] - 0.05, "it did learn before it flattened out"
    best = guard["best_checkpoint"]
    assert best["epoch"] == best_epoch and os.path.isfile(best["path"])
    assert ctx["ti"].xcoms["guard_stop"]["guard"] == "early_stopping"
    # the best checkpoint is the model, published through the alias with what made it
    (event,) = ctx["outlet_events"][AssetAlias("digits-model")].asset_alias_events
    assert event.dest_asset_key.uri == f"file://{best['path']}"
    assert event.extra["job_id"] == result["id"] and event.extra["epoch"] == best_epoch
    assert event.extra["guard"] == "early_stopping" and event.extra["metrics"][
        "validation_loss"
    ] == pytest.approx(guard["best_value"])
    assert event.extra["platform"] == "tensorone" and event.extra["cost_usd"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("conn", ["together", "pai"])
def test_early_stopping_on_platforms_with_a_metrics_endpoint(control, conn):
    spec = {
        "together": {"model": "local/mlp-1b", "training_file": "file-digits", "n_epochs": 100,
                     "n_evals": 100, "learning_rate": 0.001, "suffix": "es",
                     "x_local": {"seconds_per_epoch": 0.3}},
        "pai": {"AlgorithmSpec": {"Image": "local/digits-mlp:1", "Command": ["python", "train.py"]},
                "ComputeResource": {"EcsSpec": "ecs.gn7i-c8g1.2xlarge", "EcsCount": 1},
                "HyperParameters": {"epochs": "100", "seconds_per_epoch": "0.3"},
                "OutputChannels": [{"Name": "checkpoints", "OutputUri": "oss://ip/es/"}]},
    }[conn]  # fmt: skip
    rule = {"metric": "validation_loss", "patience": 2, "min_delta": 0.05}
    op = submit(conn, spec, deferrable=True, early_stopping=rule)
    result = run_task(op, task_context(op, run_id=f"early-{conn}"))
    guard = result["guard"]
    assert guard["guard"] == "early_stopping" and guard["epoch"] - guard["best_epoch"] >= 2, guard
    job = control.wait_job(result["id"], {"cancelled"})
    assert job["progress"]["epoch"] < 100 and LocalPlatformControl.accepted_cancels(job)


@pytest.mark.slow
@pytest.mark.parametrize("conn", ["tensorone", "together"])
def test_a_budget_stops_the_job_before_it_costs_more_than_the_cap_and_fails_the_task(control, conn):
    cap = 0.004  # about 5.8 s of one GPU at the local platform's $2.50/h
    op = submit(conn, FLAVORS[conn].spec(epochs=200, seconds_per_epoch=0.4), deferrable=True,
                max_cost_usd=cap, retries=3)  # fmt: skip
    ctx = task_context(op, run_id=f"budget-{conn}")
    with pytest.raises(TrainingJobStoppedByGuard, match=r"max_cost_usd: the job has cost \$0\.00"):
        run_task(op, ctx)
    job, cancel = guard_cancel(control, ctx["ti"].xcoms["job_id"])
    if FLAVORS[conn].cancel_reason:
        assert cancel["reason"].startswith("Airflow guard: max_cost_usd")
    assert 0 < job["cost"]["current_usd"] <= cap, job["cost"]  # the platform's own bill
    if FLAVORS[conn].final_checkpoint:
        assert [c for c in job["checkpoints"] if c["kind"] == "final"]
    assert isinstance(TrainingJobStoppedByGuard("x"), AirflowFailException), "no retries spend it again"


@pytest.mark.slow
@pytest.mark.parametrize("conn", ["aws", "pai", "modelarts"])
def test_without_a_platform_cost_the_budget_prices_training_time_by_the_hour(control, conn):
    # SageMaker, PAI and ModelArts report no cost while a job runs: the user states the hourly
    # price (here the local platform's own, $2.50 per GPU hour) and the guard counts training time
    cap = 0.004  # about 5.8 s of training
    spec = FLAVORS[conn].spec(epochs=200, seconds_per_epoch=0.4)
    op = submit(conn, spec, deferrable=True, max_cost_usd=cap, hourly_cost_usd=2.5)
    ctx = task_context(op, run_id=f"budget-{conn}")
    with pytest.raises(TrainingJobStoppedByGuard, match=r"s of training at hourly_cost_usd"):
        run_task(op, ctx)
    job, _ = guard_cancel(control, ctx["ti"].xcoms["job_id"])
    assert 0 < job["cost"]["current_usd"] <= cap, job["cost"]  # the platform's own bill
    assert job["progress"]["epoch"] < 200 and ctx["ti"].xcoms["guard_stop"]["guard"] == "max_cost_usd"


def test_a_run_time_limit_can_end_the_task_successfully(control):
    op = submit("tensorone", tensorone_spec(epochs=200, seconds_per_epoch=0.4), deferrable=True,
                max_runtime=3, on_max_runtime="succeed")  # fmt: skip
    result = run_task(op, task_context(op, run_id="runtime"))
    assert result["guard"]["guard"] == "max_runtime" and result["guard"]["runtime_seconds"] >= 3
    job, cancel = guard_cancel(control, result["id"])
    assert cancel["reason"].startswith("Airflow guard: max_runtime")


@pytest.mark.parametrize("conn", ["aws", "modelarts"])
def test_a_guard_the_platform_cannot_serve_fails_before_submit(control, conn):
    engine = FLAVORS[conn].platform
    before = len(control.jobs(platform=engine))
    op = submit(
        conn, FLAVORS[conn].spec(epochs=2, seconds_per_epoch=0), early_stopping={"metric": "validation_loss"}
    )
    with pytest.raises(
        AirflowFailException, match="Parameter 'early_stopping': .*reports no per-epoch metrics"
    ):
        run_task(op, task_context(op, run_id="unsupported"))
    op = submit(conn, FLAVORS[conn].spec(epochs=2, seconds_per_epoch=0), max_cost_usd=5)
    with pytest.raises(AirflowFailException, match="Parameter 'max_cost_usd': .*give hourly_cost_usd"):
        run_task(op, task_context(op, run_id="unpriced"))
    assert len(control.jobs(platform=engine)) == before, "nothing was submitted"


def test_bad_guard_parameters_are_refused_when_the_dag_is_parsed():
    with pytest.raises(ValueError, match="parameter 'early_stopping.patience'"):
        submit("tensorone", tensorone_spec(), early_stopping={"metric": "loss", "patience": 0})
    with pytest.raises(ValueError, match="parameter 'on_budget'"):
        submit("tensorone", tensorone_spec(), max_cost_usd=1, on_budget="later")
