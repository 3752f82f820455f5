"""The own-script examples (``example_dags/retrain_own_script.py``) through ``airflow dags test`` on a
local platform started with ``--allow-user-code``: ``example_dags/training_code/train.py`` runs by
each platform's contract, and what it read, wrote and printed is judged on the platform's own
records and files, the task's return value (read from Airflow's database), the model registry the
promote step wrote, and the Training job tab's data (``training_job_view``, the function behind the
tab's data route)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import joblib
import pytest
from sklearn.datasets import load_digits

from airflow_training_platform.control import LocalPlatformControl
from tests.conftest import API_KEY

BUCKET = "ml-training-local"

# The train task's return value and the Training job tab's data for the DAG's latest run, read in
# the Airflow home the DAG ran in (its database is not this test process's).
READ_RUN = """
import json, sys
from sqlalchemy import select
from airflow.models.dagrun import DagRun
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
from airflow_training_provider.ui.app import training_job_view

dag_id = sys.argv[1]
with create_session() as session:
    latest = select(DagRun.run_id).filter_by(dag_id=dag_id).order_by(DagRun.id.desc())
    run_id = session.scalars(latest).first()
    row = session.scalars(
        XComModel.get_many(run_id=run_id, key="return_value", dag_ids=dag_id, task_ids="train", limit=1)
    ).first()
    returned = XComModel.deserialize_value(row)
view = training_job_view(dag_id, run_id, "train", -1)
print(json.dumps({"run_id": run_id, "returned": returned, "view": view.model_dump(mode="json")}))
"""

# Where each platform's contract puts the data channel and the model directory, under the job's
# directory on the local platform (SageMaker /opt/ml, PAI /ml, ModelArts /home/ma-user).
CHANNELS = {
    "sagemaker": ("opt/ml/input/data/train", "opt/ml/model"),
    "pai": ("ml/input/data/train/", "ml/output/model/"),
    "modelarts": ("home/ma-user/modelarts/inputs/data_url_0", "home/ma-user/modelarts/outputs/model_url_0"),
}


def epoch_metrics(line: str) -> dict[str, float]:
    """``epoch=10 loss=0.2282 …`` → ``{"epoch": 10.0, "loss": 0.2282, …}``."""
    return {name: float(value) for name, value in re.findall(r"(\w+)=([0-9.]+)", line)}


CLOUDS = ("sagemaker", "pai", "modelarts")


@dataclass
class Run:
    """One ``airflow dags test`` of a cloud's own-script DAG, and what Airflow recorded of it."""

    returncode: int
    out: str
    seconds: float
    returned: dict | None = None
    view: dict | None = None


@pytest.fixture(scope="module")
def own_script_runs(user_code_dag_runs) -> dict[str, Run]:
    """The three DAGs' runs (started side by side with the portable example, each in its own copy
    of the Airflow home: ``user_code_dag_runs``), then the train task's return value and the tab's
    data read from each home."""
    runs = {}
    for cloud in CLOUDS:
        code, out, seconds = user_code_dag_runs[f"{cloud}_retrain_own_script"].wait(timeout=300)
        runs[cloud] = Run(code, out, seconds)
    readers = {
        cloud: subprocess.Popen(
            [sys.executable, "-c", READ_RUN, f"{cloud}_retrain_own_script"],
            env=user_code_dag_runs[f"{cloud}_retrain_own_script"].env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for cloud in CLOUDS
        if runs[cloud].returncode == 0
    }
    for cloud, reader in readers.items():
        stdout, stderr = reader.communicate(timeout=120)
        assert reader.returncode == 0, stderr[-3000:]
        read = json.loads(stdout.strip().splitlines()[-1])
        runs[cloud].returned, runs[cloud].view = read["returned"], read["view"]
    ran = ", ".join(f"{cloud} {run.seconds:.1f} s" for cloud, run in runs.items())
    print(f"own-script DAGs: dags test ended after {ran}")
    return runs


def model_files(platform: str, data_dir: Path, returned: dict) -> dict[str, Path]:
    """The model's files where the platform collected them (SageMaker: unpacked from model.tar.gz)."""
    model = returned["artifacts"]["model"]
    if platform == "sagemaker":
        archive = data_dir / "s3" / model.removeprefix("s3://")
        unpacked = archive.parent / "unpacked"
        with tarfile.open(archive) as tar:
            tar.extractall(unpacked, filter="data")
        return {p.name: p for p in unpacked.iterdir()}
    store = "oss" if platform == "pai" else "obs"
    directory = data_dir / store / model.removeprefix("oss://").strip("/")
    return {p.name: p for p in directory.iterdir()}


@pytest.mark.parametrize("cloud", CLOUDS)
def test_own_script_example_trains_with_the_script_and_promotes_on_its_metrics(
    own_script_runs, user_code_airflow_env, user_code_platform, cloud
):
    run = own_script_runs[cloud]
    out = run.out
    assert run.returncode == 0, out[-5000:]
    control = LocalPlatformControl(user_code_platform.url)
    new = [j for j in control.jobs() if j["platform"] == cloud]
    assert len(new) == 1, "exactly one job submitted"
    job = control.job(new[0]["job_id"])
    assert job["state"] == "succeeded", job.get("error")

    # the script ran from the uploaded code and read the channel and hyperparameters where the
    # platform's contract puts them
    argv = job["program"]["argv"]
    job_dir = job["job_dir"]
    channel, model_dir = (f"{job_dir}/{path}" for path in CHANNELS[cloud])
    if cloud == "sagemaker":
        assert argv[1:] == ["train.py", "--epochs", "10", "--learning_rate", "0.05"]
    elif cloud == "pai":
        assert argv[-3:] == ["sh", "-c", "python train.py $PAI_USER_ARGS"]
    else:
        assert argv[1] == f"{job_dir}/home/ma-user/modelarts/user-job-dir/code/train.py"
        assert argv[2:4] == [f"--data_url={channel}", f"--model_url={model_dir}"]
        assert argv[-2:] == ["--epochs=10", "--learning_rate=0.05"]
    logs = job["logs"]
    assert f"platform: {cloud}; data channel: {channel}; model directory: {model_dir}" in logs
    assert "hyperparameters: epochs=10 learning_rate=0.05 (ignored: [])" in logs
    assert f"data: 1797 rows from digits.csv in {channel}" in logs
    epochs = [line for line in logs if line.startswith("epoch=")]
    assert [epoch_metrics(line)["epoch"] for line in epochs] == [float(e) for e in range(1, 11)]
    last = epoch_metrics(epochs[-1])
    assert last["validation_accuracy"] >= 0.90
    # stream_logs=True: the script's lines in the task log, once each
    assert out.count(f"[program] {epochs[-1]}") == 1, out[-3000:]

    # the model where the platform collects it, trained
    returned, view = run.returned, run.view
    assert returned["id"] == job["job_id"] and returned["state"] == "succeeded"
    model = returned["artifacts"]["model"]
    if cloud == "sagemaker":
        assert model == f"s3://{BUCKET}/own-script/models/{job['job_id']}/output/model.tar.gz"
    else:
        prefix = "oss://" if cloud == "pai" else "/"
        assert model.startswith(f"{prefix}{BUCKET}/own-script/models/"), model
    files = model_files(cloud, Path(user_code_platform.data_dir), returned)
    assert set(files) == {"model.joblib", "metrics.json"}
    digits = load_digits()
    assert joblib.load(files["model.joblib"]).score(digits.data / 16.0, digits.target) >= 0.90
    written = json.loads(files["metrics.json"].read_text())
    assert written == {"epochs": 10, **{k: v for k, v in last.items() if k != "epoch"}}

    # the metrics the script printed are the task's return value (ModelArts: none, it reports no
    # training metrics), and promote recorded the ones it evaluated
    record = json.loads((user_code_airflow_env.registry / f"own-script-{cloud}.json").read_text())
    assert record["job_id"] == job["job_id"] and record["model"] == model
    if cloud == "modelarts":
        assert returned["metrics"] == {}
        assert record["metrics"] == written
    else:
        assert returned["metrics"] == last
        assert record["metrics"] == last
    assert f"validation accuracy {last['validation_accuracy']:.4f} (threshold 0.90)" in out

    # the Training job tab shows that job with those metrics (PAI: per-epoch curves too)
    assert view["kind"] == "training" and view["job_id"] == job["job_id"] and view["platform"] == cloud
    assert view["job"]["state"] == "succeeded" and view["job"]["metrics"] == returned["metrics"]
    if cloud == "pai":
        validation = next(c for c in view["curves"]["accuracy"] if c["name"] == "validation")
        assert validation["points"] == [
            [m["epoch"], m["validation_accuracy"]] for m in map(epoch_metrics, epochs)
        ]
    assert API_KEY not in out
