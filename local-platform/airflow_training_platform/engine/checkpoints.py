"""Checkpoints of the local platform's jobs: recording the trainer's checkpoint files, finding one to
resume from, deleting them when a cancel does not preserve them. Files live under
``<job_dir>/checkpoints/``; the record keeps their metadata (no locking here: the engine's lock)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_training_platform.engine.records import JobRecord
    from airflow_training_platform.engine.reports import CheckpointReport


class CheckpointNotFound(LookupError):
    """A resume reference names no checkpoint file."""


def add_checkpoint(job: JobRecord, report: CheckpointReport, now: float) -> None:
    """Record a trainer ``checkpoint`` report; a checkpoint written again under the same id replaces the
    earlier one."""
    ckpt: dict[str, Any] = {
        "checkpoint_id": report["checkpoint_id"],
        "path": report["path"],
        "epoch": report["epoch"],
        "step": report["step"],
        "kind": report.get("kind", "automatic"),
        "size_bytes": report.get("size_bytes", 0),
        "metrics": report.get("metrics") or {},
        "created_at": now,
    }
    job.checkpoints = [c for c in job.checkpoints if c["checkpoint_id"] != ckpt["checkpoint_id"]]
    job.checkpoints.append(ckpt)
    if ckpt["kind"] == "final":
        job.final_checkpoint_id = ckpt["checkpoint_id"]
    job.add_event(
        "checkpoint_save",
        f"Checkpoint {ckpt['checkpoint_id']} saved",
        step=ckpt["step"],
        epoch=ckpt["epoch"],
        checkpoint_path=ckpt["path"],
    )


def resolve_checkpoint(jobs: Mapping[str, JobRecord], ref: str) -> str:
    """The checkpoint file named by ``ref``: ``"<job_id>/<checkpoint_id>"`` or a file path.

    :raises CheckpointNotFound: no such checkpoint file.
    """
    if not os.path.isabs(ref) and "/" in ref:
        job_id, ckpt_id = ref.split("/", 1)
        job = jobs.get(job_id)
        if job is not None:
            for ckpt in job.checkpoints:
                if ckpt["checkpoint_id"] == ckpt_id and os.path.isfile(ckpt["path"]):
                    return ckpt["path"]
    elif os.path.isfile(ref):
        return os.path.abspath(ref)
    raise CheckpointNotFound(f"checkpoint {ref!r} not found")


def delete_checkpoints(job: JobRecord, keep_final: bool) -> None:
    """Delete the job's checkpoint files (all, or all but the final one), recording each in
    ``deleted_checkpoints``."""
    kept = []
    for ckpt in job.checkpoints:
        if keep_final and ckpt["kind"] == "final":
            kept.append(ckpt)
            continue
        try:
            os.remove(ckpt["path"])
        except FileNotFoundError:
            pass
        job.deleted_checkpoints.append({**ckpt, "deleted_at": time.time()})
    job.checkpoints = kept
    if not kept:
        shutil.rmtree(os.path.join(job.job_dir, "checkpoints"), ignore_errors=True)
        os.makedirs(os.path.join(job.job_dir, "checkpoints"), exist_ok=True)
