"""The portable example (``example_dags/portable_retrain.py``) through ``airflow dags test`` on a
local platform that runs user code: one ``portable_spec``, its ``train`` task mapped over the local
SageMaker, PAI and ModelArts connections. Each map index's job ran the same script on the same data
with the same hyperparameters and reported the script's metrics; its model and checkpoints are in
that connection's storage; the Rendered Template view of each map index holds that platform's
native body; ``compare`` and ``promote`` saw all three."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_training_devel.local_fixtures import LOCAL_BUCKET
from airflow_training_platform.control import LocalPlatformControl

DAG_ID = "portable_retrain_own_script"
PLATFORMS = ("sagemaker", "pai", "modelarts")  # the map indexes' order (the DAG's CONNECTIONS)
STORE = {"sagemaker": "s3", "pai": "oss", "modelarts": "obs"}
NATIVE_KEY = {"sagemaker": "AlgorithmSpecification", "pai": "AlgorithmSpec", "modelarts": "algorithm"}

# What Airflow recorded of the DAG's run, read in the Airflow home it ran in: each map index's
# return value and rendered fields, and promote's return value.
READ_RUN = """
import json, sys
from sqlalchemy import select
from airflow.models.dagrun import DagRun
from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session

dag_id = sys.argv[1]
with create_session() as session:
    run_id = session.scalars(select(DagRun.run_id).filter_by(dag_id=dag_id).order_by(DagRun.id.desc())).first()
    def value(task_id, map_index):
        row = session.scalars(
            XComModel.get_many(run_id=run_id, key="return_value", dag_ids=dag_id, task_ids=task_id,
                               map_indexes=map_index, limit=1)
        ).first()
        return None if row is None else XComModel.deserialize_value(row)
    rendered = {
        r.map_index: r.rendered_fields
        for r in session.scalars(select(RTIF).filter_by(dag_id=dag_id, run_id=run_id, task_id="train"))
    }
    print(json.dumps({
        "train": [value("train", i) for i in range(3)],
        "rendered": [rendered.get(i) for i in range(3)],
        "promote": value("promote", -1),
    }))
"""


@pytest.fixture(scope="module")
def portable_run(user_code_dag_runs, portable_platform):
    """The DAG's run (started beside the own-script examples: ``user_code_dag_runs``) on a platform
    of its own (its jobs are the only ones there); what it printed and what Airflow recorded."""
    run = user_code_dag_runs[DAG_ID]
    code, out, seconds = run.wait(timeout=420)
    assert code == 0, out[-6000:]
    print(f"portable DAG: dags test ended after {seconds:.1f} s")
    read = subprocess.run(
        [sys.executable, "-c", READ_RUN, DAG_ID], env=run.env, capture_output=True, text=True, timeout=120
    )
    assert read.returncode == 0, read.stderr[-3000:]
    control = LocalPlatformControl(portable_platform.url)
    return {
        "out": out,
        "recorded": json.loads(read.stdout.strip().splitlines()[-1]),
        "jobs": {job["platform"]: control.job(job["job_id"]) for job in control.jobs()},
        "data_dir": Path(portable_platform.data_dir),
        "registry": run.home / "registry",
    }


def epoch_metrics(line: str) -> dict[str, float]:
    return {name: float(value) for name, value in re.findall(r"(\w+)=([0-9.]+)", line)}


@pytest.mark.parametrize("index", range(3), ids=PLATFORMS)
def test_each_map_index_ran_the_same_script_by_its_connection_alone(portable_run, index):
    platform = PLATFORMS[index]
    jobs = portable_run["jobs"]
    assert sorted(jobs) == sorted(PLATFORMS), "one job per platform, no more"
    job = jobs[platform]
    returned = portable_run["recorded"]["train"][index]
    assert (
        job["state"] == "succeeded" and returned["id"] == job["job_id"] and returned["platform"] == platform
    )
    logs = job["logs"]
    assert "hyperparameters: epochs=10 learning_rate=0.05 (ignored: [])" in logs
    assert any(line.startswith("data: 1797 rows from digits.csv") for line in logs)
    epochs = [line for line in logs if line.startswith("epoch=")]
    assert len(epochs) == 10
    assert returned["metrics"] == epoch_metrics(epochs[-1])  # ModelArts: read from the program log
    run = re.search(r"portable/models/([0-9-]+)/", json.dumps(returned["artifacts"])).group(1)
    store = portable_run["data_dir"] / STORE[platform] / LOCAL_BUCKET
    assert (store / "portable" / "checkpoints" / run / "checkpoint.joblib").is_file()
    if platform == "sagemaker":
        assert returned["artifacts"]["model"].endswith(f"/{job['job_id']}/output/model.tar.gz")
    else:
        assert json.loads((store / "portable" / "models" / run / "metrics.json").read_text())["epochs"] == 10
    # the Rendered Template view: the portable spec as written, and the native body it became
    rendered = portable_run["recorded"]["rendered"][index]
    assert rendered["portable_spec"]["hyperparameters"] == {"epochs": "10", "learning_rate": "0.05"}
    assert NATIVE_KEY[platform] in rendered["spec"], rendered["spec"]
    # the program's own lines in the task log (stream_logs)
    assert f"[program] {epochs[-1]}" in portable_run["out"]


def test_compare_saw_all_three_and_promote_recorded_the_best(portable_run):
    trained = portable_run["recorded"]["train"]
    best = max(trained, key=lambda job: job["metrics"]["validation_accuracy"])
    promoted = portable_run["recorded"]["promote"]
    assert promoted["job_id"] == best["id"] and promoted["metrics"] == best["metrics"]
    assert json.loads((portable_run["registry"] / "portable-digits.json").read_text()) == promoted
    for job in trained:
        assert f"{job['platform']:>10}  {job['id']}  " in portable_run["out"]


CANCEL_DAG = "e2e_portable_cancel"
READ_CANCELS = """
import json, sys
from sqlalchemy import select
from airflow.models.dagrun import DagRun
from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session

dag_id = sys.argv[1]
with create_session() as session:
    run_id = session.scalars(select(DagRun.run_id).filter_by(dag_id=dag_id).order_by(DagRun.id.desc())).first()
    out = {}
    for map_index in range(3):
        row = session.scalars(
            XComModel.get_many(run_id=run_id, key="cancel_result", dag_ids=dag_id, task_ids="train",
                               map_indexes=map_index, limit=1)
        ).first()
        state = session.scalar(select(TaskInstance.state).filter_by(
            dag_id=dag_id, run_id=run_id, task_id="train", map_index=map_index))
        out[map_index] = {"cancel": None if row is None else XComModel.deserialize_value(row), "state": state}
    print(json.dumps({"run_id": run_id, "tries": out}))
"""


@pytest.fixture(scope="module")
def portable_cancel_run(user_code_dag_runs, portable_cancel_platform):
    """The cancel DAG's run: its train tasks time out (``execution_timeout``, deferred), so the run
    fails; what Airflow recorded of each map index and the platform of each job."""
    run = user_code_dag_runs[CANCEL_DAG]
    code, out, seconds = run.wait(timeout=420)
    print(f"portable cancel DAG: dags test ended after {seconds:.1f} s (exit {code})")
    read = subprocess.run(
        [sys.executable, "-c", READ_CANCELS, CANCEL_DAG],
        env=run.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert read.returncode == 0, read.stderr[-3000:]
    control = LocalPlatformControl(portable_cancel_platform.url)
    return {
        "out": out,
        "recorded": json.loads(read.stdout.strip().splitlines()[-1]),
        # a stop may still be under way when the run ends (each task's confirm window ends with it)
        "jobs": {
            job["platform"]: control.wait_job(job["job_id"], {"cancelled"}, timeout=60)
            for job in control.jobs()
        },
        "data_dir": Path(portable_cancel_platform.data_dir),
    }


@pytest.mark.parametrize("index", range(3), ids=PLATFORMS)
def test_a_timed_out_portable_task_cancels_its_job_and_the_checkpoint_stays(portable_cancel_run, index):
    platform = PLATFORMS[index]
    recorded = portable_cancel_run["recorded"]
    tried = recorded["tries"][str(index)]
    job = portable_cancel_run["jobs"][platform]
    assert tried["state"] == "failed", portable_cancel_run["out"][-4000:]
    assert job["state"] == "cancelled" and tried["cancel"]["job_id"] == job["job_id"]
    assert tried["cancel"]["already_terminal"] is False
    # the script saved on SIGTERM into the checkpoint location the platform keeps
    assert job["cancel"]["final_checkpoints"] == ["checkpoint.joblib"], job["cancel"]
    assert any(line.startswith("SIGTERM received: saved a checkpoint") for line in job["logs"])
    run = recorded["run_id"].replace(":", "-")
    stored = portable_cancel_run["data_dir"] / STORE[platform] / LOCAL_BUCKET / "cancel" / "checkpoints" / run
    assert (stored / "checkpoint.joblib").is_file()
