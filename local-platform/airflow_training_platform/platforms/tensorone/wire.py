"""TensorOne v2 training wire format ⇄ engine records (pure functions, no I/O).

Wire contract: ``docs/platforms/tensorone.md``. Parsing raises
:class:`~airflow_training_platform.errors.ApiError` 400 VALIDATION_ERROR with
``details.field`` naming the offending field (dotted wire path).
"""

from __future__ import annotations

import math
import time
from typing import Any

from airflow_training_platform.engine import JobSpec
from airflow_training_platform.errors import ApiError
from airflow_training_platform.formatting import human_duration, human_size, iso
from airflow_training_platform.trainer import DATASETS

PLATFORM = "tensorone"
ID_PREFIX = "job_train_"

STATUSES = ("queued", "initializing", "running", "paused", "cancelling", "completed", "failed", "cancelled")
"""TensorOne's documented job statuses (``paused`` is never produced here)."""
_STATUS = {
    "pending": "queued",
    "queued": "queued",
    "starting": "initializing",
    "running": "running",
    "finalizing": "running",
    "stopping": "cancelling",
    "succeeded": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
}
ENGINE_STATES = tuple(_STATUS)
"""The engine's job states, each shown as one of :data:`STATUSES` (:func:`status_of`)."""


def status_of(rec_or_state: dict[str, Any] | str) -> str:
    """TensorOne status of an engine record (or of a neutral engine state)."""
    state = rec_or_state if isinstance(rec_or_state, str) else rec_or_state["state"]
    return _STATUS[state]


# trainer key -> (accepted names in config.training / hyperparameters, kind, lower bound, upper bound)
_HYPER = {
    "epochs": (("epochs",), "int", 1, 1000),
    "batch_size": (("batch_size", "batchSize"), "int", 1, 100_000),
    "learning_rate": (("learning_rate", "learningRate"), "number", None, None),
    "hidden_units": (("hidden_units", "hiddenUnits"), "int", 1, 4096),
    "seconds_per_epoch": (("seconds_per_epoch", "secondsPerEpoch"), "number", 0, 3600),
    "seed": (("seed",), "int", 0, 2**32 - 1),
    "checkpoint_seconds": (("checkpoint_seconds", "checkpointSeconds"), "number", 0, 600),
    "diverge_at_epoch": (("diverge_at_epoch",), "int", 1, 1000),  # fault injection: losses go NaN
}
CHECKPOINT_SORT_KEYS = (
    "createdAt",
    "epoch",
    "step",
    "loss",
    "accuracy",
    "validationLoss",
    "validationAccuracy",
)


def _bad(field: str, message: str, **extra: Any) -> ApiError:
    return ApiError(
        400, "VALIDATION_ERROR", f"Invalid value for '{field}': {message}", {"field": field, **extra}
    )


def _obj(body: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(path, "must be an object")
    return value


def _number(value: Any, field: str, kind: str, low: float | None, high: float | None) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(field, f"must be {'an integer' if kind == 'int' else 'a number'}")
    if not math.isfinite(value):
        raise _bad(field, "must be finite")
    if kind == "int":
        if value != int(value):
            raise _bad(field, "must be an integer")
        value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise _bad(field, f"must be between {low} and {high}")
    return value


def _optional_str(body: dict[str, Any], key: str, field: str, max_len: int = 10_000) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > max_len:
        raise _bad(field, f"must be a string of at most {max_len} characters")
    return value


def parse_create(body: Any, default_gpu_count: int = 1) -> tuple[JobSpec, dict[str, str]]:
    """Create-job body (either documented shape, extra fields allowed) → (JobSpec, field map).

    The field map translates engine spec fields (``dataset``, ``gpu_count``, ``resume_from``) back to the
    wire field they came from, for engine validation errors. Hyperparameters: ``config.training.*`` then
    ``hyperparameters.*`` (the latter wins when both set a key).
    """
    if not isinstance(body, dict):
        raise _bad("body", "request body must be a JSON object")
    name = body.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= 100:
        raise _bad("name", "required string of 1-100 characters")
    config = _obj(body, "config", "config")
    training = _obj(config, "training", "config.training")
    hyper_obj = _obj(body, "hyperparameters", "hyperparameters")
    dataset_cfg = _obj(body, "datasetConfig", "datasetConfig")
    infra = _obj(body, "infrastructure", "infrastructure")

    dataset_field, dataset = "datasetId", body.get("datasetId")
    if dataset is None and dataset_cfg.get("datasetId") is not None:
        dataset_field, dataset = "datasetConfig.datasetId", dataset_cfg["datasetId"]
    if dataset is None:
        dataset = "digits"
    if not isinstance(dataset, str) or dataset not in DATASETS:
        raise _bad(dataset_field, f"unknown dataset {dataset!r}", allowed=list(DATASETS))

    hyper: dict[str, Any] = {}
    for source, prefix in ((training, "config.training"), (hyper_obj, "hyperparameters")):
        for key, (names, kind, low, high) in _HYPER.items():
            for wire_name in names:
                if source.get(wire_name) is not None:
                    hyper[key] = _number(source[wire_name], f"{prefix}.{wire_name}", kind, low, high)

    if infra.get("gpuCount") is not None:
        gpu_field, gpu_count = "infrastructure.gpuCount", infra["gpuCount"]
    elif body.get("maxWorkers") is not None:
        gpu_field, gpu_count = "maxWorkers", body["maxWorkers"]
    else:
        gpu_field, gpu_count = "infrastructure.gpuCount", default_gpu_count
    gpu_count = _number(gpu_count, gpu_field, "int", 1, 32)

    tags = body.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise _bad("tags", "must be an array of strings")
    resume_field, resume = "config.resumeFromCheckpoint", config.get("resumeFromCheckpoint")
    if resume is None and body.get("resumeFromCheckpoint") is not None:
        resume_field, resume = "resumeFromCheckpoint", body["resumeFromCheckpoint"]
    if resume is not None and (not isinstance(resume, str) or not resume):
        raise _bad(resume_field, "must be a checkpoint id '<jobId>/<checkpointId>' or a file path")

    labels = {
        k: v for k in ("modelType", "gpuType", "priority", "framework") if isinstance(v := body.get(k), str)
    }
    spec = JobSpec(
        name=name,
        platform=PLATFORM,
        dataset=dataset,
        hyperparameters=hyper,
        gpu_count=gpu_count,
        tags=list(tags),
        labels=labels,
        description=_optional_str(body, "description", "description"),
        resume_from=resume,
        request=body,
        id_prefix=ID_PREFIX,
    )
    return spec, {"dataset": dataset_field, "gpu_count": gpu_field, "resume_from": resume_field}


def parse_cancel(body: Any) -> dict[str, Any]:
    """Cancel body (all optional) → engine.cancel kwargs: reason, preserve_checkpoints (default True),
    create_final_checkpoint (default False), force (default False)."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise _bad("body", "request body must be a JSON object")
    out: dict[str, Any] = {"reason": _optional_str(body, "reason", "reason", 1000)}
    for wire, key, default in (
        ("preserveCheckpoints", "preserve_checkpoints", True),
        ("createFinalCheckpoint", "create_final_checkpoint", False),
        ("force", "force", False),
    ):
        value = body.get(wire, default)
        if value is None:
            value = default
        if not isinstance(value, bool):
            raise _bad(wire, "must be a boolean")
        out[key] = value
    return out


def _metrics(m: dict[str, Any]) -> dict[str, Any]:
    return {
        "loss": m.get("loss"),
        "accuracy": m.get("accuracy"),
        "validationLoss": m.get("val_loss"),
        "validationAccuracy": m.get("val_accuracy"),
    }


def checkpoint_to_wire(ckpt: dict[str, Any], include_metrics: bool = True) -> dict[str, Any]:
    """Engine checkpoint → ``{checkpointId, name, epoch, step, metrics, size, sizeBytes, type, createdAt, path}``."""
    out = {
        "checkpointId": ckpt["checkpoint_id"],
        "name": ckpt["checkpoint_id"],
        "epoch": ckpt["epoch"],
        "step": ckpt["step"],
        "metrics": _metrics(ckpt.get("metrics") or {}),
        "size": human_size(ckpt.get("size_bytes")),
        "sizeBytes": ckpt.get("size_bytes"),
        "type": ckpt.get("kind", "automatic"),
        "createdAt": iso(ckpt["created_at"]),
        "path": ckpt["path"],
    }
    if not include_metrics:
        del out["metrics"]
    return out


def _costs(rec: dict[str, Any]) -> dict[str, Any]:
    cost = rec["cost"]
    return {
        "currentCost": round(cost["current_usd"], 6),
        "estimatedTotalCost": round(cost["estimated_total_usd"], 6),
        "costBreakdown": {"gpuCost": round(cost["current_usd"], 6), "storageCost": 0.0},
    }


def cancellation_details(rec: dict[str, Any]) -> dict[str, Any] | None:
    """``cancellationDetails`` of a job with a cancel request, else None."""
    cancel = rec.get("cancel")
    if not cancel:
        return None
    final_id = rec.get("final_checkpoint_id")
    return {
        "cancelledAt": iso(cancel.get("requested_at") or rec.get("finished_at")),
        "reason": cancel.get("reason"),
        "finalCheckpointCreated": final_id is not None,
        "finalCheckpointId": final_id,
        "resourcesReleased": rec["state"] == "cancelled",
    }


def job_to_wire(
    rec: dict[str, Any], include_metrics: bool = True, include_logs: bool = False, log_lines: int = 100
) -> dict[str, Any]:
    """Engine record → TensorOne job object (get/list)."""
    p = rec["progress"]
    total_steps = p.get("total_steps") or 0
    done = rec["state"] == "succeeded"
    percent = 100.0 if done else (round(100.0 * p["step"] / total_steps, 1) if total_steps else 0.0)
    hp = rec["hyperparameters"]
    out: dict[str, Any] = {
        "jobId": rec["job_id"],
        "name": rec["name"],
        "status": status_of(rec),
        "description": rec["description"],
        "tags": rec["tags"],
        "progress": {
            "currentEpoch": p["total_epochs"] if done else p.get("epoch", 0),
            "totalEpochs": p["total_epochs"],
            "currentStep": p["step"],
            "totalSteps": total_steps,
            "percentComplete": percent,
            "estimatedTimeRemaining": human_duration(rec["estimated_remaining_seconds"]),
        },
        "configuration": {
            "datasetId": rec["dataset"],
            "gpuCount": rec["gpu_count"],
            "hyperparameters": {
                "epochs": p["total_epochs"],
                "batchSize": hp.get("batch_size", 32),
                "learningRate": hp.get("learning_rate", 0.001),
                "hiddenUnits": hp.get("hidden_units", 64),
                "secondsPerEpoch": hp.get("seconds_per_epoch"),
                "seed": hp.get("seed", 0),
                "checkpointSeconds": hp.get("checkpoint_seconds", 0.0),
            },
            "resumeFromCheckpoint": rec["resume_from"],
        },
        "checkpoints": [checkpoint_to_wire(c) for c in rec["checkpoints"]],
        "costs": _costs(rec),
        "timestamps": {
            "createdAt": iso(rec["created_at"]),
            "startedAt": iso(rec["started_at"]),
            "lastUpdated": iso(rec["updated_at"]),
            "finishedAt": iso(rec["finished_at"]),
        },
    }
    if include_metrics:
        m = rec["metrics"]
        spe = p.get("steps_per_epoch") or 0
        out["metrics"] = {
            **_metrics(m),
            "learningRate": m.get("learning_rate", hp.get("learning_rate", 0.001)),
            "throughput": {
                "samplesPerSecond": m.get("samples_per_second"),
                "stepTime": (m["epoch_seconds"] / spe) if m.get("epoch_seconds") and spe else None,
            },
        }
    if rec["state"] == "failed":
        out["message"] = rec["error"]
        out["error"] = "TRAINING_FAILED"
    elif rec["state"] == "cancelled":
        out["message"] = (rec.get("cancel") or {}).get("reason") or "Job cancelled"
    details = cancellation_details(rec)
    if details:
        out["cancellationDetails"] = details
    if include_logs:
        out["logs"] = rec["logs"][-log_lines:]
    return out


def create_response(rec: dict[str, Any]) -> dict[str, Any]:
    """Engine record of a new job → create response."""
    cost = rec["cost"]
    return {
        "jobId": rec["job_id"],
        "name": rec["name"],
        "status": status_of(rec),
        "estimatedStartTime": iso(rec.get("estimated_start_at") or time.time()),
        "estimatedDuration": human_duration(rec["estimated_remaining_seconds"]),
        "estimatedCost": {
            "gpuCost": round(cost["estimated_total_usd"], 6),
            "storageCost": 0.0,
            "totalCost": round(cost["estimated_total_usd"], 6),
        },
        "createdAt": iso(rec["created_at"]),
        "tags": rec["tags"],
        "description": rec["description"],
    }


def cancel_response(rec: dict[str, Any]) -> dict[str, Any]:
    """Engine record after a cancel → cancel response."""
    m, p, cost = rec["metrics"], rec["progress"], rec["cost"]
    details = cancellation_details(rec) or {}
    if rec["state"] != "cancelled":
        details.update(finalCheckpointCreated=False, finalCheckpointId=None, resourcesReleased=False)
    return {
        "jobId": rec["job_id"],
        "status": status_of(rec),
        "cancellationDetails": details,
        "finalMetrics": {
            "finalEpoch": p.get("epoch", 0),
            "finalStep": p["step"],
            "finalLoss": m.get("loss"),
            "finalAccuracy": m.get("accuracy"),
            "trainingDuration": human_duration(cost["wall_seconds"]),
        },
        "costSummary": {
            "totalCost": round(cost["current_usd"], 6),
            "costBreakdown": {"gpuCost": round(cost["current_usd"], 6), "storageCost": 0.0},
            "estimatedSavings": round((rec.get("cancel") or {}).get("estimated_savings_usd", 0.0), 6),
        },
    }


def _sort_value(ckpt: dict[str, Any], key: str) -> Any:
    if key == "createdAt":
        return ckpt["created_at"]
    if key in ("epoch", "step"):
        return ckpt[key]
    metric = {"loss": "loss", "accuracy": "accuracy", "validationLoss": "val_loss"}.get(key, "val_accuracy")
    return (ckpt.get("metrics") or {}).get(metric)


def checkpoints_response(
    rec: dict[str, Any], sort_by: str, sort_order: str, limit: int, include_metrics: bool
) -> dict[str, Any]:
    """Engine record → ``{checkpoints, totalCount, summary{bestCheckpoint, latestCheckpoint, totalSize,
    totalSizeBytes}}``; best = lowest validation loss (else lowest loss), latest = last created."""
    if sort_by not in CHECKPOINT_SORT_KEYS:
        raise _bad("sortBy", f"must be one of {', '.join(CHECKPOINT_SORT_KEYS)}")
    if sort_order not in ("asc", "desc"):
        raise _bad("sortOrder", "must be 'asc' or 'desc'")
    ckpts = list(rec["checkpoints"])
    present = [c for c in ckpts if _sort_value(c, sort_by) is not None]
    missing = [c for c in ckpts if _sort_value(c, sort_by) is None]
    present.sort(key=lambda c: _sort_value(c, sort_by), reverse=sort_order == "desc")
    ordered = present + missing

    def best_key(c: dict[str, Any]) -> float:
        m = c.get("metrics") or {}
        value = m.get("val_loss", m.get("loss"))
        return value if value is not None else math.inf

    best = min(ckpts, key=best_key) if ckpts else None
    total = sum(c.get("size_bytes") or 0 for c in ckpts)
    return {
        "checkpoints": [checkpoint_to_wire(c, include_metrics) for c in ordered[:limit]],
        "totalCount": len(ckpts),
        "summary": {
            "bestCheckpoint": best["checkpoint_id"] if best and best_key(best) != math.inf else None,
            "latestCheckpoint": max(ckpts, key=lambda c: c["created_at"])["checkpoint_id"] if ckpts else None,
            "totalSize": human_size(total),
            "totalSizeBytes": total,
        },
    }
