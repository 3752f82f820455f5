"""The user's own training code on the kill-path stack: a SageMaker script-mode job running the
repository's example script (``tests/data/user_code/train.py``), which writes ``checkpoint.json``
into its checkpoint directory when it receives SIGTERM and resumes from one it finds there at start.

The script, its packing (``sourcedir.tar.gz`` at :data:`CODE_URI`) and its 100-row CSV channel
(:data:`DATA_URI`) are the local platform's user-code tests' (``tests/user_code.py``): one script,
one packing. Script mode is SageMaker's contract as ``docs/platforms/sagemaker.md`` ("Your own
training code") describes it; the program's output lines are read back through ``/_local``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from airflow_training_devel.user_code import (
    CODE_URI,
    DATA_URI,
    METRIC_DEFINITIONS,
    put_code_and_data,
    script_hyperparameters,
)

__all__ = [
    "CODE_URI",
    "DATA_URI",
    "checkpoint_epoch",
    "first_epoch",
    "install",
    "resumed_epoch",
    "sagemaker_script_spec",
    "stopped_at_epoch",
]

EPOCH_METRIC = {"Name": "epoch", "Regex": r"^epoch=([0-9]+) "}
"""The script prints ``epoch=<n> loss=<x> accuracy=<y>`` after each epoch: this definition makes
``<n>`` the job's ``epoch`` metric, which the harness waits on as it waits on the built-in
trainer's ``completed_epochs`` (the local platform reports no progress for a user program)."""

_STOPPED = re.compile(r"^SIGTERM: checkpoint of epoch ([0-9]+) written$")
_RESUMED = re.compile(r"^resumed from epoch ([0-9]+)$")


def install(data_dir: str) -> None:
    """Put the script (``sourcedir.tar.gz``) and its ``train`` channel under the local S3 root of
    the platform serving ``data_dir``; call before any user-code job is submitted."""
    put_code_and_data(data_dir)


def sagemaker_script_spec(
    epochs: int,
    seconds_per_epoch: float,
    checkpoint_uri: str = "s3://kp/checkpoints/{{ dag.dag_id }}/{{ run_id | replace(':', '-') }}",
    **extra: Any,
) -> dict:
    """A ``CreateTrainingJob`` body in script mode (``sagemaker_program`` +
    ``sagemaker_submit_directory``, every hyperparameter JSON-encoded as the SageMaker Python SDK
    sends them) running the script for ``epochs`` epochs of ``seconds_per_epoch`` seconds each, with
    a ``train`` channel, ``MetricDefinitions`` (loss, accuracy, :data:`EPOCH_METRIC`) and a
    ``CheckpointConfig`` at ``checkpoint_uri`` (templated: per DAG run by default)."""
    return {
        "RoleArn": "arn:aws:iam::123456789012:role/KillPaths",
        "AlgorithmSpecification": {
            "TrainingImage": "local/sklearn-script-mode:1",
            "TrainingInputMode": "File",
            "MetricDefinitions": [*METRIC_DEFINITIONS, EPOCH_METRIC],
        },
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": DATA_URI}},
            }
        ],
        "OutputDataConfig": {"S3OutputPath": "s3://kp/output"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "CheckpointConfig": {"S3Uri": checkpoint_uri},
        "HyperParameters": script_hyperparameters(epochs=epochs, seconds_per_epoch=seconds_per_epoch),
        **extra,
    }


def stopped_at_epoch(job: dict) -> int | None:
    """The epoch whose checkpoint the script says it wrote on SIGTERM (its output, from the job's
    ``/_local`` record), ``None`` if it never said so."""
    return _last_match(_STOPPED, job)


def resumed_epoch(job: dict) -> int | None:
    """The epoch of the checkpoint the script says it found in its checkpoint directory at start."""
    return _last_match(_RESUMED, job)


def first_epoch(job: dict) -> int | None:
    """The first epoch the script trained (its first ``epoch=<n>`` line)."""
    for line in job["logs"]:
        if match := re.match(EPOCH_METRIC["Regex"], line):
            return int(match.group(1))
    return None


def checkpoint_epoch(path: Path) -> int:
    """The epoch saved in a ``checkpoint.json`` the script wrote."""
    return int(json.loads(path.read_text())["epoch"])


def _last_match(pattern: re.Pattern[str], job: dict) -> int | None:
    found = [int(m.group(1)) for line in job["logs"] if (m := pattern.match(line))]
    return found[-1] if found else None
