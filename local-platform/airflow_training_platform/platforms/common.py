"""Helpers the emulated platforms share (pure functions): the local trainer's settings among a
create body's hyperparameters, the newest checkpoint in a checkpoint directory, and a record's
``key:value`` tags as ``{"Key", "Value"}`` pairs (SageMaker tags, PAI labels)."""

from __future__ import annotations

import glob
import math
import os
import re
from collections.abc import Callable
from typing import Any

from airflow_training_platform.errors import ApiError

#: hyperparameters the local trainer reads: kind, lowest, highest.
TRAINER_HYPERPARAMETERS = {
    "epochs": ("int", 1, 1000),
    "batch_size": ("int", 1, 100_000),
    "learning_rate": ("number", None, None),
    "hidden_units": ("int", 1, 4096),
    "seed": ("int", 0, 2**32 - 1),
    "seconds_per_epoch": ("number", 0, 3600),
    "checkpoint_seconds": ("number", 0, 600),
    "diverge_at_epoch": ("int", 1, 1000),  # fault injection: the run's losses go NaN/Infinity
}


def latest_checkpoint(directory: str) -> str | None:
    """The checkpoint file with the highest epoch in ``directory`` (a final one wins a tie)."""

    def order(path: str) -> tuple[int, int]:
        name = os.path.basename(path)
        epoch = re.search(r"ckpt_epoch_(\d+)", name)
        return (int(epoch.group(1)) if epoch else -1, 1 if "final" in name else 0)

    files = glob.glob(os.path.join(directory, "*.joblib"))
    return max(files, key=order) if files else None


def trainer_settings(
    values: dict[str, Any], prefix: str, error: Callable[[str, str], ApiError]
) -> dict[str, Any]:
    """The trainer settings among hyperparameters ``values`` (strings on the wire), checked:
    ``error(field, why)`` builds the platform's error naming ``<prefix>.<name>``."""
    out: dict[str, Any] = {}
    for key, (kind, low, high) in TRAINER_HYPERPARAMETERS.items():
        if key not in values:
            continue
        field = f"{prefix}.{key}"
        try:
            value = float(values[key])
        except (TypeError, ValueError):
            raise error(field, "must be a number") from None
        if not math.isfinite(value) or (kind == "int" and value != int(value)):
            raise error(field, f"must be {'an integer' if kind == 'int' else 'finite'}")
        if (low is not None and value < low) or (high is not None and value > high):
            raise error(field, f"must be between {low} and {high}")
        out[key] = int(value) if kind == "int" else value
    if values.get("fail_with"):
        out["fail_with"] = str(values["fail_with"])
    return out


def tags_of(rec: dict[str, Any]) -> list[dict[str, str]]:
    return [{"Key": t.split(":", 1)[0], "Value": t.split(":", 1)[1] if ":" in t else ""} for t in rec["tags"]]


#: the field the local platform adds to a SageMaker, PAI or ModelArts job object of a *stopped
#: user-code job* (none of those APIs says whether the program saved anything after the stop signal):
#: ``{"written": bool, "files": [str], "location": str | None, "at": float | None}``. ``files`` are
#: the checkpoint files new or changed after the stop signal, relative to the checkpoint directory,
#: oldest first; ``location`` is the platform URI that directory is copied to (SageMaker
#: ``CheckpointConfig.S3Uri``, PAI's ``checkpoints`` output channel, ModelArts'
#: ``checkpoints`` else ``train_url``), ``None`` if the spec names none; ``at`` is when the newest
#: file was recorded (epoch seconds; the runner lists the directory every 0.5 s), ``None`` if none.
#: The platforms' own clients ignore it, as they do ``x_local_cost_usd``.
FINAL_CHECKPOINT_FIELD = "x_local_final_checkpoint"


def final_checkpoint_after_stop(rec: dict[str, Any], location: str | None) -> dict[str, Any] | None:
    """The :data:`FINAL_CHECKPOINT_FIELD` value of a record: what its program saved after the stop
    signal, read from the cancel's ``final_checkpoint_written``/``final_checkpoints`` (the engine
    fills them when the program exits); ``None`` for a job that is not a cancelled user-code job."""
    cancel = rec.get("cancel") or {}
    if rec.get("program") is None or rec["state"] != "cancelled" or "final_checkpoints" not in cancel:
        return None
    files = list(cancel["final_checkpoints"])
    written = {
        c["checkpoint_id"]: c["created_at"] for c in rec.get("checkpoints") or [] if c["kind"] == "final"
    }
    files.sort(key=lambda f: written.get(f, 0.0))
    times = [written[f] for f in files if f in written]
    return {"written": bool(files), "files": files, "location": location, "at": max(times) if times else None}
