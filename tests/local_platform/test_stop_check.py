"""The stop-readiness check (``airflow-training-platform check-stop``) on the repository's user
script: ready when it saves on SIGTERM; not ready, naming why, when it ignores SIGTERM (killed after
the grace, no checkpoint) or crashes on it."""

from __future__ import annotations

import json

import pytest

from airflow_training_devel.user_code import (
    DATA_URI,
    PAI_CODE,
    PAI_COMMAND,
    PAI_DATA_URI,
    put_code_and_data,
    put_pai_code_and_data,
    script_hyperparameters,
)
from airflow_training_platform.cli import main
from tests import modelarts_user_code


def check(tmp_path, capsys, **hyperparameters) -> tuple[int, str]:
    put_code_and_data(str(tmp_path))
    spec = {
        "AlgorithmSpecification": {"TrainingImage": "local/sklearn:1", "TrainingInputMode": "File"},
        "HyperParameters": script_hyperparameters(epochs=1000, seconds_per_epoch=0.2, **hyperparameters),
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": DATA_URI}},
            }
        ],
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    status = main(
        [
            "check-stop",
            str(path),
            "--data-dir",
            str(tmp_path),
            "--after-seconds",
            "1.5",
            "--grace-seconds",
            "2",
        ]
    )
    return status, capsys.readouterr().out


def test_a_script_that_saves_on_sigterm_is_ready(tmp_path, capsys):
    status, out = check(tmp_path, capsys)
    assert status == 0, out
    assert out.startswith("READY")
    assert "checkpoints written after the stop: checkpoint.json" in out
    assert "SIGTERM: checkpoint of epoch" in out  # its last output


@pytest.mark.parametrize(
    "behaviour, why",
    [
        ("ignore_sigterm", "was still running 2 s after SIGTERM and was killed"),
        ("crash_on_sigterm", "it failed on SIGTERM (exit status 1)"),
    ],
)
def test_a_script_that_does_not_save_is_not_ready_and_says_why(tmp_path, capsys, behaviour, why):
    status, out = check(tmp_path, capsys, **{behaviour: 1})
    assert status == 1, out
    assert out.startswith("NOT READY")
    assert why in out
    assert "it wrote no checkpoint after SIGTERM" in out
    assert "checkpoints written after the stop: none" in out
    if behaviour == "crash_on_sigterm":
        assert "RuntimeError: the SIGTERM handler failed before saving anything" in out


def test_a_pai_command_that_saves_on_sigterm_is_ready(tmp_path, capsys):
    put_pai_code_and_data(str(tmp_path))
    hyper = {"epochs": 1000, "seconds_per_epoch": 0.2}
    spec = {
        "CodeDir": {"LocationType": "oss", "LocationValue": PAI_CODE},
        "AlgorithmSpec": {"Command": PAI_COMMAND, "Image": "local/numpy:1"},
        "HyperParameters": hyper,  # the mapping a DAG's spec may use, as the provider accepts it
        "InputChannels": [{"Name": "train", "InputUri": PAI_DATA_URI}],
        "OutputChannels": [
            {"Name": "model", "OutputUri": "oss://out/model/"},
            {"Name": "checkpoints", "OutputUri": "oss://out/checkpoints/"},
        ],
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    args = ["check-stop", str(path), "--platform", "pai", "--data-dir", str(tmp_path)]
    status = main([*args, "--after-seconds", "1.5", "--grace-seconds", "5"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "checkpoints written after the stop: checkpoint.json" in out


def test_a_modelarts_boot_file_that_saves_on_sigterm_is_ready(tmp_path, capsys):
    modelarts_user_code.put_code_and_data(str(tmp_path))
    algorithm = modelarts_user_code.algorithm("/out/stop-check", epochs=1000, seconds_per_epoch=0.2)
    # the mapping a DAG's spec may use for parameters, as the provider accepts it
    algorithm["parameters"] = {p["name"]: p["value"] for p in algorithm["parameters"]}
    spec = {
        "algorithm": algorithm,
        "spec": {"resource": {"flavor_id": "modelarts.vm.cpu.2u", "node_count": 1}},
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    args = ["check-stop", str(path), "--platform", "modelarts", "--data-dir", str(tmp_path)]
    status = main([*args, "--after-seconds", "1.5", "--grace-seconds", "5"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "checkpoints written after the stop: checkpoint.json" in out


def test_a_spec_without_a_program_is_refused(tmp_path, capsys):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"HyperParameters": {"epochs": "3"}}))
    assert main(["check-stop", str(path), "--data-dir", str(tmp_path)]) == 2
    assert "names no program" in capsys.readouterr().out


def test_a_program_that_ends_before_the_stop_was_not_checked_and_says_why(tmp_path, capsys):
    put_code_and_data(str(tmp_path))
    spec = {
        "AlgorithmSpecification": {"TrainingImage": "local/sklearn:1", "TrainingInputMode": "File"},
        "HyperParameters": script_hyperparameters(epochs=2, seconds_per_epoch=0.01),
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": DATA_URI}},
            }
        ],
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    status = main(["check-stop", str(path), "--data-dir", str(tmp_path), "--after-seconds", "3"])
    out = capsys.readouterr().out
    assert status == 3, out
    assert out.startswith("NOT CHECKED: the program ended before it could be stopped")
    assert "it finished its work (status 0) before the stop: give it more to do" in out


def test_a_spec_with_templates_or_without_its_uploaded_code_cannot_be_run(tmp_path, capsys):
    spec = {
        "AlgorithmSpecification": {"TrainingImage": "local/sklearn:1", "TrainingInputMode": "File"},
        "HyperParameters": script_hyperparameters(epochs=2, seconds_per_epoch=0.01),
    }
    path = tmp_path / "spec.json"
    path.write_text(
        json.dumps({**spec, "HyperParameters": {**spec["HyperParameters"], "epochs": "{{ params.epochs }}"}})
    )
    assert main(["check-stop", str(path), "--data-dir", str(tmp_path)]) == 2
    assert "the spec still holds Jinja templates" in capsys.readouterr().out

    path.write_text(json.dumps(spec))  # rendered, but nothing uploaded under this data directory
    assert main(["check-stop", str(path), "--data-dir", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "upload the code and data first" in out and str(tmp_path) in out


def test_the_grace_defaults_to_the_local_platforms_for_each_platform():
    from airflow_training_platform.stop_check import default_grace_seconds

    assert [default_grace_seconds(p) for p in ("sagemaker", "pai", "modelarts")] == [120.0, 30.0, 30.0]
