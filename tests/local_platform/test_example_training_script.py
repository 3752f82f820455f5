"""The example training script (``example_dags/training_code/train.py``) under the stop-readiness
check, with the example DAGs' own job specs (``example_dags/retrain_own_script.py``) on each
platform's contract: it saves a checkpoint when SIGTERM comes and exits in time, and a job whose
checkpoint location holds that checkpoint resumes from it."""

from __future__ import annotations

import json
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from airflow_training_platform.cli import main
from example_dags import retrain_own_script as example

LONG = {"{{ params.epochs }}": "100000", "{{ params.learning_rate }}": "0.05", example.RUN: "check"}
"""The DAG's templates rendered: enough epochs to be training when the stop comes."""


def put_code_and_data(data_dir: Path, monkeypatch) -> None:
    """What the DAGs' first task uploads, into ``data_dir``'s S3, OSS and OBS directories."""
    monkeypatch.setattr(example, "LOCAL_DATA_DIR", data_dir)
    example.upload_pai()
    example.upload_modelarts()
    s3 = data_dir / "s3" / example.BUCKET / "own-script"
    (s3 / "code").mkdir(parents=True)
    with tarfile.open(s3 / "code" / "sourcedir.tar.gz", "w:gz") as tar:
        tar.add(example.CODE_DIR / "train.py", arcname="train.py")
    (s3 / "data").mkdir()
    shutil.copy(data_dir / "oss" / example.BUCKET / "own-script" / "data" / "digits.csv", s3 / "data")


def wire_body(cloud: str) -> str:
    """The DAG's spec as the create body the provider sends (check-stop reads the wire format):
    PAI's ``HyperParameters`` and ModelArts' ``parameters`` as lists of name/value pairs."""
    spec = json.loads(json.dumps(example.SPECS[cloud]))
    if cloud == "pai":
        spec["HyperParameters"] = [{"Name": k, "Value": v} for k, v in spec["HyperParameters"].items()]
    if cloud == "modelarts":
        parameters = spec["algorithm"]["parameters"]
        spec["algorithm"]["parameters"] = [{"name": k, "value": v} for k, v in parameters.items()]
    text = json.dumps(spec)
    for template, value in LONG.items():
        text = text.replace(template, value)
    return text


def check_stop(data_dir: Path, cloud: str, capsys) -> tuple[int, str]:
    text = wire_body(cloud)
    spec = data_dir / f"{cloud}.json"
    spec.write_text(text)
    args = ["check-stop", str(spec), "--platform", cloud, "--data-dir", str(data_dir)]
    status = main([*args, "--after-checkpoint", "--grace-seconds", "20"])
    return status, capsys.readouterr().out


@pytest.mark.parametrize("cloud", ["sagemaker", "pai", "modelarts"])
def test_the_example_script_saves_a_checkpoint_on_sigterm(tmp_path, capsys, monkeypatch, cloud):
    put_code_and_data(tmp_path, monkeypatch)
    status, out = check_stop(tmp_path, cloud, capsys)
    assert status == 0, out
    assert out.startswith("READY")
    assert "checkpoints written after the stop: checkpoint.joblib" in out
    assert "SIGTERM received: saved a checkpoint, stopping" in out
    assert re.search(r"stopped after epoch \d+; the checkpoint is in ", out), out


def test_a_sagemaker_job_resumes_from_the_checkpoint_the_stop_saved(tmp_path, capsys, monkeypatch):
    put_code_and_data(tmp_path, monkeypatch)
    status, out = check_stop(tmp_path, "sagemaker", capsys)
    assert status == 0, out
    stopped = int(re.search(r"stopped after epoch (\d+)", out).group(1))
    saved = next((tmp_path / "stop-checks").glob("*/opt/ml/checkpoints/checkpoint.joblib"))
    # the spec's CheckpointConfig.S3Uri, where SageMaker keeps a job's checkpoints for the next one
    location = tmp_path / "s3" / example.BUCKET / "own-script" / "checkpoints" / "check"
    location.mkdir(parents=True)
    shutil.copy(saved, location)

    status, out = check_stop(tmp_path, "sagemaker", capsys)
    assert status == 0, out
    ran_in = Path(re.search(r"\(the program ran in (.+)\)", out).group(1))
    lines = [json.loads(row)["line"] for row in (ran_in / "logs" / "algo-1.jsonl").read_text().splitlines()]
    assert f"resuming from the checkpoint of epoch {stopped} in {ran_in}/opt/ml/checkpoints" in lines
    first = next(line for line in lines if line.startswith("epoch="))
    assert first.startswith(f"epoch={stopped + 1} "), lines
