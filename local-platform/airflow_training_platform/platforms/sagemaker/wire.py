"""SageMaker awsJson 1.1 wire format ⇄ engine records (pure functions, no I/O).

Wire contract: ``docs/platforms/sagemaker.md``. Choices where a local platform has to stand in for
AWS:

* **S3 is a directory.** ``s3://bucket/key`` is ``<data_dir>/s3/bucket/key`` (:func:`s3_path`). The
  job's checkpoints are written straight into its ``CheckpointConfig.S3Uri`` (SageMaker syncs its
  ``LocalPath`` there); a new job with the same ``S3Uri`` resumes from the latest checkpoint found
  there, as SageMaker restores them into the container.
* **The data set** is the last path segment of the ``train`` channel's (else the first channel's)
  ``S3Uri`` when it names a bundled one (``s3://any/digits/`` → ``digits``); otherwise ``digits``.
* **Hyperparameters** (strings on the wire): ``epochs``, ``batch_size``, ``learning_rate``,
  ``hidden_units``, ``seed``, ``seconds_per_epoch``, ``checkpoint_seconds``; ``fail_with`` makes the
  trainer fail at start with that message. A value that is not a number is a ``ValidationException``
  naming it.
* **Instances:** ``ResourceConfig.InstanceCount`` simulated GPUs.
* **Statuses:** engine ``pending``/``queued`` → ``InProgress``/``Starting``; ``starting`` →
  ``Downloading``; ``running`` → ``Training``; ``finalizing`` → ``Uploading``; ``stopping`` →
  ``Stopping``; ``succeeded`` → ``Completed``; ``failed`` → ``Failed``; ``cancelled`` → ``Stopped``
  (secondary ``MaxRuntimeExceeded`` when ``StoppingCondition.MaxRuntimeInSeconds`` stopped it).
* **User code** (script mode, mapped images; :mod:`.script_mode`): the job runs the user's program
  instead of the trainer; ``HyperParameters`` are its arguments, not trainer settings, and
  ``FinalMetricDataList`` lists its ``MetricDefinitions`` values.
* **Money:** SageMaker reports ``BillableTimeInSeconds`` only; the answer adds ``x_local_cost_usd``
  (the engine's cost), which AWS clients ignore.
* **A stopped user-code job** adds ``x_local_final_checkpoint``: what the script saved after the
  stop signal, under ``CheckpointConfig.S3Uri`` (shape: :data:`.common.FINAL_CHECKPOINT_FIELD`).
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

from airflow_training_platform.engine import JobSpec
from airflow_training_platform.errors import ApiError
from airflow_training_platform.platforms.common import (
    FINAL_CHECKPOINT_FIELD,
    final_checkpoint_after_stop,
    latest_checkpoint,
    trainer_settings,
)
from airflow_training_platform.trainer import DATASETS

PLATFORM = "sagemaker"
ACCOUNT = "123456789012"
TARGET_PREFIX = "SageMaker."
NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
MAX_RUNTIME_REASON = "max_runtime"
UPLOAD_SECONDS = 0.3

_SECONDARY = {
    "pending": "Starting",
    "queued": "Starting",
    "starting": "Downloading",
    "running": "Training",
    "finalizing": "Uploading",
    "stopping": "Stopping",
    "succeeded": "Completed",
    "failed": "Failed",
    "cancelled": "Stopped",
}
_PRIMARY = {
    "Starting": "InProgress",
    "Downloading": "InProgress",
    "Training": "InProgress",
    "Uploading": "InProgress",
    "Stopping": "Stopping",
    "Completed": "Completed",
    "Failed": "Failed",
    "Stopped": "Stopped",
    "MaxRuntimeExceeded": "Stopped",
}
# reached from Downloading only by a trainer that ran and exited by itself: on AWS it passed Training
_AFTER_TRAINING = frozenset({"Uploading", "Completed", "Failed"})
_MESSAGES = {
    "Starting": "Preparing the instances for training",
    "Downloading": "Downloading input data",
    "Training": "Training image download completed. Training in progress.",
    "Uploading": "Uploading generated training model",
    "Stopping": "Stopping the training job",
    "Completed": "Training job completed",
    "Stopped": "The training job was stopped",
    "MaxRuntimeExceeded": "Training job runtime exceeded MaxRuntimeInSeconds provided",
    "Failed": "Training job failed",
}
_METRICS = {
    "train:loss": "loss",
    "train:accuracy": "accuracy",
    "validation:loss": "val_loss",
    "validation:accuracy": "val_accuracy",
}


def bad(field: str, message: str) -> ApiError:
    """A ``ValidationException`` naming the request field."""
    return ApiError(400, "ValidationException", f"1 validation error detected: Value at '{field}' {message}")


def arn(name: str, region: str) -> str:
    return f"arn:aws:sagemaker:{region}:{ACCOUNT}:training-job/{name.lower()}"


def s3_path(data_dir: str, uri: str) -> str:
    """The directory standing in for ``s3://bucket/key``."""
    match = re.match(r"^s3://([^/]+)/?(.*)$", uri)
    if match is None:
        raise bad("CheckpointConfig.S3Uri", f"'{uri}' failed to satisfy constraint: must be an s3:// URI")
    return os.path.join(data_dir, "s3", match.group(1), *[p for p in match.group(2).split("/") if p])


def _dataset(channels: Any) -> str:
    if not isinstance(channels, list):
        return "digits"
    train = [c for c in channels if isinstance(c, dict) and c.get("ChannelName") == "train"] or channels
    uri = ((train[0] if train else {}).get("DataSource") or {}).get("S3DataSource", {}).get("S3Uri", "")
    last = [p for p in str(uri).split("/") if p]
    name = last[-1].replace("-", "_").lower() if last else ""
    return name if name in DATASETS else "digits"


def _hyper(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise bad("hyperParameters", "failed to satisfy constraint: Member must be a map of strings")
    return trainer_settings(
        raw,
        "hyperParameters",
        lambda field, why: bad(field, f"'{raw[field.split('.')[-1]]}' failed to satisfy constraint: {why}"),
    )


def _required(body: dict[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key)
    if not isinstance(value, dict):
        raise bad(key[0].lower() + key[1:], "failed to satisfy constraint: Member must not be null")
    return value


def parse_create(body: Any, data_dir: str, stop_grace_seconds: float, user_code: bool = False) -> JobSpec:
    """``CreateTrainingJob`` body → engine JobSpec (job id = ``TrainingJobName``). ``user_code``: the
    job runs the user's code (the caller sets ``JobSpec.program``, :mod:`.script_mode`), its
    ``HyperParameters`` are kept as sent and no trainer checkpoint is looked for.

    :raises ApiError: ``ValidationException`` naming the offending field.
    """
    if not isinstance(body, dict):
        raise bad("body", "must be a JSON object")
    name = body.get("TrainingJobName")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise bad("trainingJobName", f"'{name}' failed to satisfy constraint: Member must satisfy regular "
                  "expression pattern: ^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")  # fmt: skip
    if not isinstance(body.get("RoleArn"), str) or not body["RoleArn"].startswith("arn:"):
        raise bad("roleArn", "failed to satisfy constraint: Member must not be null")
    algorithm = _required(body, "AlgorithmSpecification")
    if not (algorithm.get("TrainingImage") or algorithm.get("AlgorithmName")):
        raise bad(
            "algorithmSpecification.trainingImage", "failed to satisfy constraint: Member must not be null"
        )
    output = _required(body, "OutputDataConfig")
    if not str(output.get("S3OutputPath", "")).startswith("s3://"):
        raise bad("outputDataConfig.s3OutputPath", "failed to satisfy constraint: Member must not be null")
    resources = _required(body, "ResourceConfig")
    count = resources.get("InstanceCount", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise bad("resourceConfig.instanceCount", f"'{count}' failed to satisfy constraint: must be >= 1")
    stopping = _required(body, "StoppingCondition")
    max_runtime = stopping.get("MaxRuntimeInSeconds")
    if max_runtime is not None and (
        isinstance(max_runtime, bool) or not isinstance(max_runtime, int) or max_runtime < 1
    ):
        raise bad(
            "stoppingCondition.maxRuntimeInSeconds",
            f"'{max_runtime}' failed to satisfy constraint: must be >= 1",
        )
    tags = body.get("Tags") or []
    if not isinstance(tags, list) or not all(
        isinstance(t, dict) and isinstance(t.get("Key"), str) for t in tags
    ):
        raise bad("tags", "failed to satisfy constraint: Member must be a list of {Key, Value}")

    if user_code:
        hyper: dict[str, Any] = dict(body.get("HyperParameters") or {})
    else:
        hyper = _hyper(body.get("HyperParameters"))
    resume_from = None
    checkpoint_uri = (body.get("CheckpointConfig") or {}).get("S3Uri")
    if checkpoint_uri and not user_code:
        directory = s3_path(data_dir, checkpoint_uri)
        resume_from = latest_checkpoint(directory)
        hyper["checkpoint_dir"] = directory
    return JobSpec(
        name=name,
        platform=PLATFORM,
        dataset=_dataset(body.get("InputDataConfig")),
        hyperparameters=hyper,
        gpu_count=count,
        tags=[f"{t['Key']}:{t.get('Value', '')}" for t in tags],
        labels={"instance_type": str(resources.get("InstanceType", ""))},
        resume_from=resume_from,
        request=body,
        job_id=name,
        finalize_stages=[{"name": "Uploading", "seconds": UPLOAD_SECONDS, "event_type": "uploading"}],
        stop_grace_seconds=stop_grace_seconds,
        max_runtime_seconds=float(max_runtime) if max_runtime else None,
    )


def secondary_of(rec: dict[str, Any], state: str | None = None) -> str:
    """The ``SecondaryStatus`` of a record (or of one of its history ``state``\\ s)."""
    state = state or rec["state"]
    if state == "cancelled" and (rec.get("cancel") or {}).get("reason") == MAX_RUNTIME_REASON:
        return "MaxRuntimeExceeded"
    return _SECONDARY[state]


def transitions(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """``SecondaryStatusTransitions`` from the engine's state history (consecutive repeats merged):
    ``[{"Status", "StartTime", "EndTime" (not on the current one while the job runs),
    "StatusMessage"}]``, times in epoch seconds.

    A built-in trainer that exits without a step or epoch line (it resumed from a checkpoint
    already at its last epoch, or failed as it began) never enters the engine's ``running``; on
    AWS the algorithm's container still ran, and every job that ran passes through ``Training``
    (``DescribeTrainingJob``, ``SecondaryStatusTransitions``): a ``Training`` is put in from the
    trainer's exit (``TrainingStartTime`` = ``TrainingEndTime``) to the next status. A job stopped
    while it downloads gets none, as on AWS.
    """
    out: list[dict[str, Any]] = []
    for entry in rec["state_history"]:
        status = secondary_of(rec, entry["state"])
        if out and out[-1]["Status"] == status:
            continue
        if (
            out
            and out[-1]["Status"] == "Downloading"
            and status in _AFTER_TRAINING
            and rec.get("exited_at")
            and not rec.get("user_code")  # a user program enters running as it starts
        ):
            exited = min(float(rec["exited_at"]), entry["at"])  # the trainer's exit: TrainingEndTime
            out[-1]["EndTime"] = exited
            out.append({"Status": "Training", "StartTime": exited, "StatusMessage": _MESSAGES["Training"]})
        if out:
            out[-1]["EndTime"] = entry["at"]
        message = _MESSAGES[status]
        if status == "Failed" and rec.get("error"):
            message = f"Training job failed: {rec['error']}"
        out.append({"Status": status, "StartTime": entry["at"], "StatusMessage": message})
    if out and rec["state"] in ("succeeded", "failed", "cancelled"):
        out[-1]["EndTime"] = out[-1]["StartTime"]
    return out


def training_start_time(rec: dict[str, Any], steps: list[dict[str, Any]]) -> float | None:
    """``TrainingStartTime``: when the job entered ``Training`` (the engine's ``running_at``, or
    the ``Training`` :func:`transitions` put in for a trainer that had nothing left to train);
    ``None`` for a job that never got there (stopped or failed while starting)."""
    if rec.get("running_at"):
        return float(rec["running_at"])
    return next((t["StartTime"] for t in steps if t["Status"] == "Training"), None)


def job_to_wire(rec: dict[str, Any], region: str) -> dict[str, Any]:
    """Engine record → ``DescribeTrainingJob`` answer."""
    req = rec.get("request") or {}
    secondary = secondary_of(rec)
    status = _PRIMARY[secondary]
    name = rec["job_id"]
    steps = transitions(rec)
    out: dict[str, Any] = {
        "TrainingJobName": name,
        "TrainingJobArn": arn(name, region),
        "TrainingJobStatus": status,
        "SecondaryStatus": secondary,
        "AlgorithmSpecification": req.get("AlgorithmSpecification"),
        "RoleArn": req.get("RoleArn"),
        "InputDataConfig": req.get("InputDataConfig") or [],
        # AWS always answers KmsKeyId, "" when unset (the SageMaker SDK's attach() reads it)
        "OutputDataConfig": {"KmsKeyId": "", **(req.get("OutputDataConfig") or {})},
        "ResourceConfig": req.get("ResourceConfig"),
        "StoppingCondition": req.get("StoppingCondition"),
        "HyperParameters": req.get("HyperParameters") or {},
        "ModelArtifacts": {
            "S3ModelArtifacts": f"{req['OutputDataConfig']['S3OutputPath'].rstrip('/')}/{name}/output/model.tar.gz"
        },
        "CreationTime": rec["created_at"],
        "LastModifiedTime": rec["updated_at"] or rec["created_at"],
        "SecondaryStatusTransitions": steps,
        "x_local_cost_usd": round(rec["cost"]["current_usd"], 6),
    }
    if req.get("CheckpointConfig"):
        out["CheckpointConfig"] = req["CheckpointConfig"]
    if saved := final_checkpoint_after_stop(rec, (req.get("CheckpointConfig") or {}).get("S3Uri")):
        out[FINAL_CHECKPOINT_FIELD] = saved
    if (started := training_start_time(rec, steps)) is not None:
        out["TrainingStartTime"] = started
    if rec["state"] in ("succeeded", "failed", "cancelled"):
        out["TrainingEndTime"] = rec["exited_at"] or rec["finished_at"]
        seconds = int(math.ceil(rec["cost"]["wall_seconds"]))
        out["TrainingTimeInSeconds"] = seconds
        out["BillableTimeInSeconds"] = seconds * int(rec["gpu_count"])
    if rec["state"] == "failed":
        out["FailureReason"] = f"AlgorithmError: {rec.get('error') or 'training failed'}"[:1024]
    metrics = rec.get("metrics") or {}
    stamp = rec["updated_at"] or rec["created_at"]
    if rec.get("program") is not None:  # the user's MetricDefinitions, by name, when last seen
        out["FinalMetricDataList"] = _program_metrics(rec)
        return out
    out["FinalMetricDataList"] = [
        {"MetricName": wire_name, "Value": float(metrics[key]), "Timestamp": stamp}
        for wire_name, key in _METRICS.items()
        if isinstance(metrics.get(key), int | float)
    ]
    return out


def _program_metrics(rec: dict[str, Any]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for row in rec.get("metric_history") or []:
        if row.get("kind") == "program":
            for name, value in row["values"].items():
                seen[name] = {"MetricName": name, "Value": float(value), "Timestamp": row["at"]}
    return list(seen.values())[:40]  # SageMaker returns at most 40


def summary_to_wire(rec: dict[str, Any], region: str) -> dict[str, Any]:
    """Engine record → a ``ListTrainingJobs`` summary."""
    job = job_to_wire(rec, region)
    keys = ("TrainingJobName", "TrainingJobArn", "CreationTime", "TrainingEndTime", "LastModifiedTime",
            "TrainingJobStatus", "SecondaryStatus")  # fmt: skip
    return {k: job[k] for k in keys if k in job}
