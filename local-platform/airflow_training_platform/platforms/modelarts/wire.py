"""ModelArts training jobs (API v2) wire format ⇄ engine records (pure functions, no I/O).

Wire contract: ``docs/platforms/modelarts.md``. Choices where a local platform has to stand in for
Huawei Cloud:

* **OBS is a directory.** ``obs://bucket/key`` and ModelArts' own ``/bucket/key`` are
  ``<data_dir>/obs/bucket/key`` (:func:`obs_path`). The job writes its checkpoints straight into its
  ``checkpoints`` (else ``train_url``) output channel. It resumes from the latest checkpoint in its
  ``resume_from`` input channel, else in that output channel (a script that finds checkpoints there).
* **The data set** is the last path segment of the ``data_url`` (else ``train``, else the first)
  input channel's ``obs_url`` when it names a bundled one (``/bucket/digits/`` → ``digits``).
* **Hyperparameters** are ``algorithm.parameters`` (``[{"name", "value"}]``, strings): ``epochs``,
  ``batch_size``, ``learning_rate``, ``hidden_units``, ``seed``, ``seconds_per_epoch``,
  ``checkpoint_seconds``; ``fail_with`` makes the trainer fail at start with that message.
* **Nodes:** ``spec.resource.node_count`` simulated GPUs.
* **Phases** (``status.phase`` / ``secondary_phase``): engine ``pending`` → ``Creating/Creating``;
  ``queued`` → ``Pending/Queuing``; ``starting`` → ``Pending/Running``; ``running``/``finalizing`` →
  ``Running/Running``; ``stopping`` → ``Terminating/Terminating``; ``succeeded`` →
  ``Completed/Completed``; ``failed`` → ``Failed/Failed`` (with the task's exit code and message);
  ``cancelled`` → ``Terminated/Terminated``.
* **Events** are ``{"time", "level", "message", "source"}``, ``Error`` for the engine's error events.
* **Error codes** (``ModelArts.*``) are this platform's own choice; only the body's shape
  (``error_code``, ``error_msg``) and the HTTP statuses follow the service.
* **User code** (``code_dir`` + ``boot_file``, mapped custom images; :mod:`.user_code`): the job
  runs the user's program; a failed one reports the program's exit code.
* **Money:** the job object has no cost; the answer adds ``x_local_cost_usd`` (the engine's),
  which Huawei's clients ignore.
* **A stopped user-code job** adds ``x_local_final_checkpoint``: what the script saved after the
  stop signal, under its checkpoint channel (shape: :data:`.common.FINAL_CHECKPOINT_FIELD`).
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
    trainer_settings,
)
from airflow_training_platform.trainer import DATASETS

PLATFORM = "modelarts"
CHECKPOINT_CHANNELS = ("checkpoints", "train_url")
RESUME_CHANNEL = "resume_from"
DATA_CHANNELS = ("data_url", "train")

_PHASE = {
    "pending": ("Creating", "Creating"),
    "queued": ("Pending", "Queuing"),
    "starting": ("Pending", "Running"),
    "running": ("Running", "Running"),
    "finalizing": ("Running", "Running"),
    "stopping": ("Terminating", "Terminating"),
    "succeeded": ("Completed", "Completed"),
    "failed": ("Failed", "Failed"),
    "cancelled": ("Terminated", "Terminated"),
}
TASKS = ("worker-0",)
"""``status.tasks``: a local job runs one task (one node, ``VC_TASK_INDEX=0``); its logs are
read by this id."""

ALIVE = ("pending", "queued", "starting", "running", "finalizing")


def bad(field: str, message: str, code: str = "ModelArts.0101") -> ApiError:
    """HTTP 400 naming the request field: ``ModelArts.0101`` ("Invalid parameter"), or the more
    precise documented ``code`` (the search's ``ModelArts.2790`` UnsupportedSortBy, ``2807``
    UnsupportedConditionKey, ``2808`` UnsupportedConditionOperator, ``2809``
    UnsupportedConditionValue, ``2858`` UnsupportedOperation)."""
    return ApiError(400, code, f"Invalid parameter {field}: {message}")


def obs_path(data_dir: str, uri: str, field: str) -> str:
    """The directory standing in for ``obs://bucket/key`` (or ``/bucket/key``)."""
    match = re.match(r"^(?:obs:/)?/([^/]+)/?(.*)$", uri or "")
    if match is None:
        raise bad(field, f"'{uri}' is not an OBS path (obs://bucket/key or /bucket/key)")
    return os.path.join(data_dir, "obs", match.group(1), *[p for p in match.group(2).split("/") if p])


def channel_url(channels: Any, names: tuple[str, ...]) -> str | None:
    """The ``obs_url`` of the first channel named in ``names`` (in that order)."""
    urls = {
        c.get("name"): ((c.get("remote") or {}).get("obs") or {}).get("obs_url")
        for c in channels or []
        if isinstance(c, dict)
    }
    return next((urls[n] for n in names if urls.get(n)), None)


def _dataset(inputs: Any) -> str:
    url = channel_url(inputs, DATA_CHANNELS)
    if url is None and isinstance(inputs, list) and inputs and isinstance(inputs[0], dict):
        url = channel_url(inputs[:1], (inputs[0].get("name"),))
    last = [p for p in (url or "").split("/") if p]
    name = last[-1].replace("-", "_").lower() if last else ""
    return name if name in DATASETS else "digits"


def _hyper(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, list) or not all(isinstance(h, dict) and "name" in h for h in raw):
        raise bad("algorithm.parameters", "must be a list of {name, value}")
    values = {str(h["name"]): h.get("value") for h in raw}
    return trainer_settings(
        values,
        "algorithm.parameters",
        lambda field, why: bad(field, f"'{values[field.split('.')[-1]]}' {why}"),
    )


def _channels(algorithm: dict[str, Any], key: str) -> list[dict[str, Any]]:
    channels = algorithm.get(key) or []
    if not isinstance(channels, list) or not all(isinstance(c, dict) and c.get("name") for c in channels):
        raise bad(f"algorithm.{key}", "must be a list of {name, remote: {obs: {obs_url}}}")
    return channels


def parse_create(
    body: Any, project_id: str, data_dir: str, stop_grace_seconds: float, user_code: bool = False
) -> JobSpec:
    """v2 create body in project ``project_id`` → engine JobSpec. ``user_code``: the job runs the
    user's code (the caller sets ``JobSpec.program``, :mod:`.user_code`): ``algorithm.parameters``
    are the program's, not the trainer's, and no trainer checkpoint is looked for.

    :raises ApiError: ``ModelArts.0101`` naming the offending field.
    """
    if not isinstance(body, dict):
        raise bad("body", "must be a JSON object")
    if body.get("kind", "job") != "job":
        raise bad("kind", f"'{body.get('kind')}' is not supported here (only 'job')")
    metadata = body.get("metadata")
    if not isinstance(metadata, dict):
        raise bad("metadata", "is required")
    name = metadata.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
        raise bad("metadata.name", f"'{name}' must be 1-64 letters, digits, '-' or '_'")
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
        raise bad("metadata.annotations", "must be a map of strings")
    algorithm = body.get("algorithm")
    if not isinstance(algorithm, dict):
        raise bad("algorithm", "is required")
    engine = algorithm.get("engine") or {}
    if not (
        algorithm.get("id")
        or (algorithm.get("code_dir") and algorithm.get("boot_file"))
        or (isinstance(engine, dict) and engine.get("image_url") and algorithm.get("command"))
        or (algorithm.get("subscription_id") and algorithm.get("item_version_id"))
    ):
        raise bad("algorithm", "needs an id, code_dir and boot_file, or engine.image_url and a command")
    inputs, outputs = _channels(algorithm, "inputs"), _channels(algorithm, "outputs")
    spec = body.get("spec")
    resource = spec.get("resource") if isinstance(spec, dict) else None
    if not isinstance(resource, dict) or not (resource.get("flavor_id") or resource.get("pool_id")):
        raise bad("spec.resource.flavor_id", "is required")
    count = resource.get("node_count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise bad("spec.resource.node_count", f"'{count}' must be an integer >= 1")

    hyper = {} if user_code else _hyper(algorithm.get("parameters"))
    resume_from = None
    if not user_code and (url := channel_url(outputs, CHECKPOINT_CHANNELS)):
        directory = obs_path(data_dir, url, "algorithm.outputs.obs_url")
        hyper["checkpoint_dir"] = directory
        resume_from = latest_checkpoint(directory)
    if not user_code and (url := channel_url(inputs, (RESUME_CHANNEL,))):
        resume_from = (
            latest_checkpoint(obs_path(data_dir, url, f"algorithm.inputs.{RESUME_CHANNEL}")) or resume_from
        )
    return JobSpec(
        name=name,
        platform=PLATFORM,
        dataset=_dataset(inputs),
        hyperparameters=hyper,
        gpu_count=count,
        tags=[f"{k}:{v}" for k, v in annotations.items()],
        labels={
            "flavor_id": str(resource.get("flavor_id") or resource.get("pool_id") or ""),
            "project_id": project_id,
        },
        description=metadata.get("description"),
        resume_from=resume_from,
        request=body,
        id_prefix="",
        id_style="uuid4",
        stop_grace_seconds=stop_grace_seconds,
    )


def job_to_wire(rec: dict[str, Any]) -> dict[str, Any]:
    """Engine record → the v2 job object (Show; also the create and terminate answers)."""
    req = rec.get("request") or {}
    metadata = req.get("metadata") or {}
    phase, secondary = _PHASE[rec["state"]]
    started = next((e["at"] for e in rec["state_history"] if e["state"] == "running"), None)
    status: dict[str, Any] = {
        "phase": phase,
        "secondary_phase": secondary,
        "duration": int(math.ceil(rec["cost"]["wall_seconds"] * 1000)),
        "start_time": int(started * 1000) if started else 0,
        "tasks": list(TASKS),
    }
    if rec["state"] == "failed":
        status["task_statuses"] = [
            {
                "task": TASKS[0],
                "exit_code": _exit_code(rec),
                "message": rec.get("error") or "training failed",
            }
        ]
    elif rec["state"] in ("succeeded", "cancelled"):
        status["task_statuses"] = [
            {"task": TASKS[0], "exit_code": 0 if rec["state"] == "succeeded" else 143, "message": ""}
        ]
    resource = ((req.get("spec") or {}).get("resource")) or {}
    out: dict[str, Any] = {
        "kind": req.get("kind", "job"),
        "metadata": {
            "id": rec["job_id"],
            "name": rec["name"],
            "description": rec.get("description") or "",
            "create_time": int(rec["created_at"] * 1000),
            "workspace_id": metadata.get("workspace_id") or "0",
            "user_name": "local",
            "annotations": dict(t.split(":", 1) if ":" in t else (t, "") for t in rec["tags"]),
        },
        "status": status,
        "algorithm": req.get("algorithm") or {},
        "spec": {
            **(req.get("spec") or {}),
            "resource": {
                "policy": resource.get("policy") or "regular",
                "flavor_id": resource.get("flavor_id"),
                "flavor_name": resource.get("flavor_id"),
                "node_count": resource.get("node_count", 1),
            },
        },
        "x_local_cost_usd": round(rec["cost"]["current_usd"], 6),
    }
    outputs = (req.get("algorithm") or {}).get("outputs")
    if saved := final_checkpoint_after_stop(rec, channel_url(outputs, CHECKPOINT_CHANNELS)):
        out[FINAL_CHECKPOINT_FIELD] = saved
    return out


def _exit_code(rec: dict[str, Any]) -> int:
    """A failed job's task exit code: a user program's own (128 + the signal that killed it, as a
    container reports it), else 1."""
    code = rec.get("returncode")
    if rec.get("program") is None or not isinstance(code, int) or code == 0:
        return 1
    return code if code > 0 else 128 - code


def events_to_wire(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The job's events, oldest first."""
    out = []
    for e in rec["events"]:
        level = "Error" if e.get("level") == "error" or "fail" in e["type"].lower() else "Info"
        source = "Task" if e["type"].startswith(("epoch", "checkpoint", "train")) else "Job"
        out.append(
            {
                "time": iso(e["created_at"]),
                "level": level,
                "message": f"[{e['type']}] {e['message']}",
                "source": source,
            }
        )
    return out
