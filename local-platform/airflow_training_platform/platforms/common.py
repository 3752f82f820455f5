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
