"""The user-program runner's pure parts and the SageMaker toolkit rules, without processes."""

from __future__ import annotations

import json
import os

from airflow_training_platform.engine.programs import (
    CheckpointWatch,
    MetricDefinition,
    MetricParser,
    read_log,
)
from airflow_training_platform.platforms.sagemaker.script_mode import (
    decode,
    is_user_code,
    parse_image_commands,
    to_cmd_args,
)


def test_a_metric_is_the_first_capture_group_or_the_whole_match_and_must_be_a_number():
    parser = MetricParser(
        [
            MetricDefinition("loss", r"loss=([0-9.e-]+) \(best ([0-9.]+)\)"),
            MetricDefinition("acc", r"0\.9\d"),
            MetricDefinition("lr", r"lr=(\S+)"),
        ]
    )
    assert parser.parse("epoch=1 loss=0.25 (best 0.2) acc 0.93 lr=warmup") == {"loss": 0.25, "acc": 0.93}
    assert parser.parse("nothing here") == {}


def test_hyperparameters_become_arguments_by_the_toolkits_rules():
    assert decode('"train.py"') == "train.py" and decode("train.py") == "train.py"
    assert decode("1e-3") == 0.001 and decode("true") is True
    args = to_cmd_args({"lr": decode("1e-3"), "b": decode("32"), "flag": decode("true"), "opts": {"k": 1}})
    assert args == ["-b", "32", "--flag", "True", "--lr", "0.001", "--opts", "k=1"]


def test_user_code_is_script_mode_or_a_mapped_image():
    images = parse_image_commands(["img:1=python run.py --fast"])
    assert images == {"img:1": "python run.py --fast"}
    assert is_user_code({"HyperParameters": {"sagemaker_program": '"train.py"'}}, {})
    assert is_user_code({"AlgorithmSpecification": {"TrainingImage": "img:1"}}, images)
    assert not is_user_code(
        {"AlgorithmSpecification": {"TrainingImage": "img:2"}, "HyperParameters": {}}, images
    )


def test_read_log_pages_and_skips_a_line_still_being_written(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps({"t": i, "line": f"l{i}"}) + "\n" for i in range(5)) + '{"t": 5, "li')
    assert read_log(str(path), start=1, limit=2) == {
        "lines": [{"t": 1, "line": "l1"}, {"t": 2, "line": "l2"}],
        "next": 3,
    }
    assert read_log(str(path), start=3)["next"] == 5 and read_log(str(path), start=5)["lines"] == []
    assert read_log(str(tmp_path / "missing"), start=0) == {"lines": [], "next": 0}


def test_a_checkpoint_new_or_changed_after_the_stop_is_final(tmp_path):
    (tmp_path / "restored.pt").write_text("from the last job")
    watch = CheckpointWatch(str(tmp_path))
    watch.baseline()
    (tmp_path / "epoch1.pt").write_text("1")
    assert watch.changed() == ["epoch1.pt"]
    watch.mark_stop()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "final.pt").write_text("f")
    os.utime(tmp_path / "epoch1.pt", ns=(1, 1))  # rewritten after the signal
    assert watch.changed() == ["epoch1.pt", "sub/final.pt"]
    assert (
        watch.is_final("sub/final.pt") and watch.is_final("epoch1.pt") and not watch.is_final("restored.pt")
    )
