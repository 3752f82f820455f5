"""PaiStudio (2022-01-12) wire format ⇄ engine records (pure functions, no I/O).

Wire contract: ``docs/platforms/pai.md``. Choices where a local platform has to stand in for
Alibaba Cloud:

* **OSS is a directory.** ``oss://bucket/key`` is ``<data_dir>/oss/bucket/key`` (:func:`oss_path`).
  The job writes its checkpoints straight into its ``checkpoints`` output channel; a new job whose
  ``checkpoints`` channel already holds checkpoints resumes from the latest one (what a PAI
  training script does when it finds them).
* **The data set** is the last path segment of the ``train`` input channel's (else the first
  channel's) ``InputUri`` when it names a bundled one (``oss://any/digits/`` → ``digits``).
* **Hyperparameters** (``[{"Name", "Value"}]``, strings): ``epochs``, ``batch_size``,
  ``learning_rate``, ``hidden_units``, ``seed``, ``seconds_per_epoch``, ``checkpoint_seconds``;
  ``fail_with`` makes the trainer fail at start with that message.
* **Instances:** ``ComputeResource.EcsCount`` (or ``InstanceCount``) simulated GPUs.
* **Statuses:** engine ``pending`` → ``Creating``; ``queued`` → ``Submitted``; ``starting`` →
  ``Initializing``; ``running``/``finalizing`` → ``Running``; ``stopping`` → ``Stopping``;
  ``succeeded`` → ``Succeed``; ``failed`` → ``Failed``; ``cancelled`` → ``Terminated``
  (``ReasonCode`` ``MaxRunningTimeExceeded`` when ``Scheduler.MaxRunningTimeInSeconds`` ended it).
* **Events** are text lines ``<ISO time> [<type>] <message>``; **metrics** are name/value/time
  rows, one group per epoch (``loss``, ``accuracy``, ``validation_loss``, ``validation_accuracy``,
  ``epoch``, ``step``).
* **User code** (a ``CodeDir``, or an ``AlgorithmSpec.Image`` mapped to a local command;
  :mod:`.user_code`): the job runs the user's program instead of the trainer; ``HyperParameters``
  are its ``PAI_HPS``, not trainer settings, and its metrics (``LatestMetrics``,
  ``ListTrainingJobMetrics``) are its ``MetricDefinitions`` values by name.
* **Money:** PAI's job object has no cost; the answer adds ``x_local_cost_usd`` (the engine's),
  which Alibaba's clients ignore.
* **A stopped user-code job** adds ``x_local_final_checkpoint``: what the script saved after the
  stop signal, under the ``checkpoints`` channel (shape: :data:`.common.FINAL_CHECKPOINT_FIELD`).
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

from airflow_training_platform.engine import JobSpec
from airflow_training_platform.errors import ApiError
from airflow_training_platform.formatting import iso
from airflow_training_platform.platforms.common import (
    FINAL_CHECKPOINT_FIELD,
    final_checkpoint_after_stop,
    latest_checkpoint,
    tags_of,
    trainer_settings,
)
from airflow_training_platform.trainer import DATASETS

PLATFORM = "pai"
CHECKPOINT_CHANNEL = "checkpoints"
MAX_RUNTIME_REASON = "max_runtime"
ID_PREFIX = "train"

_STATUS = {
    "pending": "Creating",
    "queued": "Submitted",
    "starting": "Initializing",
    "running": "Running",
    "finalizing": "Running",
    "stopping": "Stopping",
    "succeeded": "Succeed",
    "failed": "Failed",
    "cancelled": "Terminated",
}
_METRICS = {
    "loss": "loss",
    "accuracy": "accuracy",
    "val_loss": "validation_loss",
    "val_accuracy": "validation_accuracy",
}


def bad(field: str, message: str) -> ApiError:
    """An ``InvalidParameter`` error naming the request field (HTTP 400)."""
    return ApiError(400, "InvalidParameter", f"The parameter {field} is invalid: {message}")


def oss_path(data_dir: str, uri: str, field: str) -> str:
    """The directory standing in for ``oss://bucket/key``."""
    match = re.match(r"^oss://([^/]+)/?(.*)$", uri)
    if match is None:
        raise bad(field, f"'{uri}' is not an oss:// URI")
    return os.path.join(data_dir, "oss", match.group(1), *[p for p in match.group(2).split("/") if p])


def _dataset(channels: Any) -> str:
    if not isinstance(channels, list) or not channels:
        return "digits"
    train = [c for c in channels if isinstance(c, dict) and c.get("Name") == "train"] or channels
    uri = str((train[0] if isinstance(train[0], dict) else {}).get("InputUri") or "")
    last = [p for p in uri.split("/") if p]
    name = last[-1].replace("-", "_").lower() if last else ""
    return name if name in DATASETS else "digits"


def _hyper(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, list) or not all(isinstance(h, dict) and "Name" in h for h in raw):
        raise bad("HyperParameters", "must be a list of {Name, Value}")
    values = {str(h["Name"]): h.get("Value") for h in raw}
    return trainer_settings(
        values, "HyperParameters", lambda field, why: bad(field, f"'{values[field.split('.')[-1]]}' {why}")
    )


def checkpoint_uri(request: dict[str, Any]) -> str | None:
    for channel in request.get("OutputChannels") or []:
        if isinstance(channel, dict) and channel.get("Name") == CHECKPOINT_CHANNEL:
            return channel.get("OutputUri")
    return None


def parse_create(body: Any, data_dir: str, stop_grace_seconds: float, user_code: bool = False) -> JobSpec:
    """``CreateTrainingJob`` body → engine JobSpec. ``user_code``: the job runs the user's code (the
    caller sets ``JobSpec.program``, :mod:`.user_code`); its ``HyperParameters`` are kept as sent,
    not read as trainer settings, and no trainer checkpoint is looked for.

    :raises ApiError: ``InvalidParameter`` naming the offending field.
    """
    if not isinstance(body, dict):
        raise bad("body", "must be a JSON object")
    if not isinstance(body.get("WorkspaceId"), str) or not body["WorkspaceId"]:
        raise bad("WorkspaceId", "is mandatory for this action")
    name = body.get("TrainingJobName")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}", name):
        raise bad("TrainingJobName", f"'{name}' must be 1-128 letters, digits, '-' or '_'")
    spec = body.get("AlgorithmSpec")
    if spec is not None and not (isinstance(spec, dict) and spec.get("Image") and spec.get("Command")):
        raise bad("AlgorithmSpec", "needs an Image and a Command")
    if spec is None and not all(
        body.get(k) for k in ("AlgorithmName", "AlgorithmProvider", "AlgorithmVersion")
    ):
        raise bad(
            "AlgorithmSpec",
            "an AlgorithmSpec or AlgorithmName/AlgorithmProvider/AlgorithmVersion is required",
        )
    resources = body.get("ComputeResource")
    if not isinstance(resources, dict):
        raise bad("ComputeResource", "is mandatory for this action")
    count = resources.get("EcsCount", resources.get("InstanceCount", 1))
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise bad("ComputeResource.EcsCount", f"'{count}' must be an integer >= 1")
    labels = body.get("Labels") or []
    if not isinstance(labels, list) or not all(
        isinstance(x, dict) and isinstance(x.get("Key"), str) for x in labels
    ):
        raise bad("Labels", "must be a list of {Key, Value}")
    scheduler = body.get("Scheduler") or {}
    max_runtime = scheduler.get("MaxRunningTimeInSeconds") if isinstance(scheduler, dict) else None
    if max_runtime is not None and (
        isinstance(max_runtime, bool) or not isinstance(max_runtime, int) or max_runtime < 1
    ):
        raise bad("Scheduler.MaxRunningTimeInSeconds", f"'{max_runtime}' must be an integer >= 1")

    if user_code:
        hyper: dict[str, Any] = {}
        raw = body.get("HyperParameters")
        if raw is not None and not (
            isinstance(raw, list) and all(isinstance(h, dict) and isinstance(h.get("Name"), str) for h in raw)
        ):
            raise bad("HyperParameters", "must be a list of {Name, Value}")
    else:
        hyper = _hyper(body.get("HyperParameters"))
    resume_from = None
    if (uri := checkpoint_uri(body)) and not user_code:
        directory = oss_path(data_dir, uri, "OutputChannels.checkpoints.OutputUri")
        resume_from = latest_checkpoint(directory)
        hyper["checkpoint_dir"] = directory
    return JobSpec(
        name=name,
        platform=PLATFORM,
        dataset=_dataset(body.get("InputChannels")),
        hyperparameters=hyper,
        gpu_count=count,
        tags=[f"{x['Key']}:{x.get('Value', '')}" for x in labels],
        labels={"ecs_spec": str(resources.get("EcsSpec") or resources.get("InstanceType") or "")},
        description=body.get("TrainingJobDescription"),
        resume_from=resume_from,
        request=body,
        id_prefix=ID_PREFIX,
        stop_grace_seconds=stop_grace_seconds,
        max_runtime_seconds=float(max_runtime) if max_runtime else None,
    )


def status_of(rec: dict[str, Any]) -> tuple[str, str, str]:
    """``(Status, ReasonCode, ReasonMessage)`` of a record."""
    state = rec["state"]
    status = _STATUS[state]
    cancel = rec.get("cancel") or {}
    if state == "succeeded":
        return status, "TrainingJobSucceed", "KubeDL job runs successfully"
    if state == "failed":
        return status, "TrainingJobFailed", f"Training job failed: {rec.get('error') or 'training failed'}"
    if state == "cancelled" and cancel.get("reason") == MAX_RUNTIME_REASON:
        return status, "MaxRunningTimeExceeded", "The job ran longer than Scheduler.MaxRunningTimeInSeconds"
    if state == "cancelled":
        return status, "JobStoppedByUser", "The training job was stopped"
    return status, "", ""


def transitions(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """``StatusTransitions`` from the engine's state history (consecutive repeats merged)."""
    out: list[dict[str, Any]] = []
    for entry in rec["state_history"]:
        status = _STATUS[entry["state"]]
        if out and out[-1]["Status"] == status:
            continue
        if out:
            out[-1]["EndTime"] = iso(entry["at"])
        out.append({"Status": status, "StartTime": iso(entry["at"])})
    return out


def job_to_wire(rec: dict[str, Any], base_console: str | None = None) -> dict[str, Any]:
    """Engine record → ``GetTrainingJob`` answer (without ``RequestId``)."""
    req = rec.get("request") or {}
    status, reason, message = status_of(rec)
    stamp = iso(rec["updated_at"] or rec["created_at"])
    metrics = rec.get("metrics") or {}
    progress = rec.get("progress") or {}
    total = progress.get("total_steps") or 0
    if _is_program(rec):
        latest = _program_latest(rec)
    else:
        latest = [
            {"Name": wire_name, "Value": float(metrics[key]), "Timestamp": stamp}
            for key, wire_name in _METRICS.items()
            if isinstance(metrics.get(key), int | float)
        ]
    out: dict[str, Any] = {
        "TrainingJobId": rec["job_id"],
        "TrainingJobName": rec["name"],
        "WorkspaceId": req.get("WorkspaceId"),
        "Status": status,
        "ReasonCode": reason,
        "ReasonMessage": message,
        "StatusTransitions": transitions(rec),
        "AlgorithmSpec": req.get("AlgorithmSpec"),
        "AlgorithmName": req.get("AlgorithmName"),
        "AlgorithmProvider": req.get("AlgorithmProvider"),
        "AlgorithmVersion": req.get("AlgorithmVersion"),
        "ComputeResource": req.get("ComputeResource"),
        "HyperParameters": req.get("HyperParameters") or [],
        "InputChannels": req.get("InputChannels") or [],
        "OutputChannels": req.get("OutputChannels") or [],
        "Scheduler": req.get("Scheduler"),
        "Labels": tags_of(rec),
        "TrainingJobDescription": rec.get("description"),
        "GmtCreateTime": iso(rec["created_at"]),
        "GmtModifiedTime": stamp,
        "LatestMetrics": latest,
        "Instances": [
            {"Name": f"{rec['job_id']}-master-0", "Role": "master", "Status": _instance_status(rec["state"])}
        ],
        "x_local_cost_usd": round(rec["cost"]["current_usd"], 6),
    }
    if total and rec["state"] not in ("pending", "queued"):
        out["LatestProgress"] = {
            "OverallProgress": {
                "Value": round(min(1.0, (progress.get("step") or 0) / total), 4),
                "Timestamp": stamp,
            },
            "RemainingTime": {
                "Value": round(rec.get("estimated_remaining_seconds") or 0.0),
                "Timestamp": stamp,
            },
        }
    if rec["state"] in ("succeeded", "failed", "cancelled"):
        out["Duration"] = int(math.ceil(rec["cost"]["wall_seconds"]))
    if model := next((c.get("OutputUri") for c in out["OutputChannels"] if c.get("Name") == "model"), None):
        out["OutputModel"] = {"Uri": model, "OutputChannelName": "model"}
    if base_console:
        out["TrainingJobUrl"] = f"{base_console}/jobs/{rec['job_id']}"
    if saved := final_checkpoint_after_stop(rec, checkpoint_uri(req)):
        out[FINAL_CHECKPOINT_FIELD] = saved
    return out


def _instance_status(state: str) -> str:
    return {"succeeded": "Succeeded", "failed": "Failed", "cancelled": "Stopped"}.get(state, "Running")


def events_to_wire(rec: dict[str, Any]) -> list[str]:
    """The job's events as PAI's text lines, oldest first."""
    return [f"{iso(e['created_at'])} [{e['type']}] {e['message']}" for e in rec["events"]]


def _is_program(rec: dict[str, Any]) -> bool:
    """A user-code job (:mod:`.user_code`): its metrics are its ``MetricDefinitions``, by name."""
    return rec.get("program") is not None or any(
        row.get("kind") == "program" for row in rec.get("metric_history") or []
    )


def _program_rows(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """One ``{Name, Value, Timestamp}`` per value a ``MetricDefinitions`` regex read from a line of
    the program's output (``kind: "program"`` rows of the history), oldest first; the line's time is
    the timestamp, so the values of one line share it."""
    return [
        {"Name": name, "Value": float(value), "Timestamp": iso(row["at"])}
        for row in rec.get("metric_history") or []
        if row.get("kind") == "program"
        for name, value in row["values"].items()
    ]


def _program_latest(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """``LatestMetrics`` of a user-code job: the last value of each metric name, with its time."""
    latest = {row["Name"]: row for row in _program_rows(rec)}
    return list(latest.values())


def metrics_to_wire(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The metric rows (``ListTrainingJobMetrics``), oldest first: per epoch for the built-in
    trainer, per matching output line for a user-code job (:func:`_program_rows`)."""
    if _is_program(rec):
        return _program_rows(rec)
    rows: list[dict[str, Any]] = []
    train = {}
    for point in rec.get("metric_history") or []:
        if point["kind"] == "train":
            train = point
            continue
        stamp = iso(point["at"])
        values = {
            "epoch": point["epoch"],
            "step": point["step"],
            "loss": train.get("loss"),
            "validation_loss": point.get("loss"),
            "validation_accuracy": point.get("accuracy"),
        }
        rows += [
            {"Name": k, "Value": float(v), "Timestamp": stamp} for k, v in values.items() if v is not None
        ]
    return rows
