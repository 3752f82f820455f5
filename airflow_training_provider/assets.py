"""The trained model as an Airflow asset: its URI, the event's extra, and URI handling for the
storage schemes of the training platforms that no installed provider handles.

A submit operator with ``model_alias="digits-model"`` emits, when its job has produced a model, an
asset event through ``AssetAlias("digits-model")`` (the URI is known only at run time): the asset is
the checkpoint to keep (a guard's best, else the final, else the latest), its URI the checkpoint's
storage location, and the event's extra says which job, platform, epoch, metrics and cost made it.
A DAG scheduled on ``AssetAlias("digits-model")`` runs once per new model.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from airflow_training_provider.json_values import json_value
from airflow_training_provider.models import Checkpoint, TrainingJob
from airflow_training_provider.platforms import dialect_class

#: the scheme of a checkpoint a platform keeps without a storage URI: ``training://<platform>/<job>/<checkpoint>``
TRAINING_SCHEME = "training"
#: storage schemes this provider normalizes (``get_provider_info`` ``asset-uris``): Alibaba OSS,
#: Huawei OBS, and checkpoints known only by platform, job and checkpoint id.
SCHEMES = ("oss", "obs", TRAINING_SCHEME)


def checkpoint_uri(job: TrainingJob, checkpoint: Checkpoint | None) -> str:
    """The asset URI of ``checkpoint`` of ``job``: its storage location as the job's platform reads
    it (:meth:`Dialect.storage_uri`: ``s3://``, ``oss://``, ``obs://``, ``https://`` as reported,
    ModelArts' ``/bucket/key`` as ``obs://bucket/key``, a local file as ``file://``), else
    ``training://<platform>/<job id>/<checkpoint id>``."""
    path = checkpoint.path if checkpoint is not None else None
    if path and (uri := dialect_class(job.platform).storage_uri(path)):
        return uri
    name = checkpoint.id if checkpoint is not None else "final"
    return f"{TRAINING_SCHEME}://{job.platform}/{urllib.parse.quote(job.id, safe='')}/{urllib.parse.quote(name, safe='')}"


def model_checkpoint(job: TrainingJob, best: Checkpoint | None = None) -> Checkpoint | None:
    """The checkpoint that is the model: ``best`` (a guard's), else the job's final, else its latest."""
    return best or job.final_checkpoint


def model_event_extra(
    job: TrainingJob, checkpoint: Checkpoint | None, guard: str | None = None
) -> dict[str, Any]:
    """The asset event's extra (JSON): job id, platform, state, checkpoint id, epoch, metrics
    (the checkpoint's where it has them, else the job's latest), cost in USD, and the guard that
    stopped the job, if one did. NaN and Infinity metrics as their names (the extra is JSON:
    :func:`~airflow_training_provider.json_values.json_value`)."""
    return json_value(
        {
            "job_id": job.id,
            "platform": job.platform,
            "state": job.state.value,
            "checkpoint_id": checkpoint.id if checkpoint else None,
            "epoch": checkpoint.epoch if checkpoint and checkpoint.epoch is not None else job.progress.epoch,
            "metrics": dict(checkpoint.metrics) if checkpoint and checkpoint.metrics else dict(job.metrics),
            "cost_usd": job.cost.total_usd,
            "guard": guard,
            "console_url": job.console_url,
        }
    )


def normalize_uri(parts: urllib.parse.SplitResult) -> urllib.parse.SplitResult:
    """Airflow's URI normalizer for :data:`SCHEMES`: a bucket (or platform) is required, and is
    lower-cased (bucket names are lower-case); the path is kept.

    :raises ValueError: no bucket or platform.
    """
    if not parts.netloc:
        raise ValueError(
            f"{parts.scheme}:// asset URIs need a bucket (or platform): {urllib.parse.urlunsplit(parts)!r}"
        )
    return parts._replace(netloc=parts.netloc.lower())
