"""PAI ``ListTrainingJobLogs`` over the local engine's jobs (``docs/platforms/pai.md``, "Training
logs"): ``GET /api/v1/trainingjobs/{TrainingJobId}/logs`` → ``{"TotalCount", "Logs": [line, …]}``
(the route adds ``RequestId``), the job's lines from :mod:`..engine.job_log`.

Choices where PAI's reference leaves things open: the one instance of a local job is
``<job id>-master-0`` (as ``GetTrainingJob``'s ``Instances`` names it); before it has started, or
for another ``InstanceId``, the answer is ``TRAINING_JOB_INSTANCE_NOT_FOUND`` (HTTP 404), the error
the pai SDK reads as "no logs yet"; ``PageSize`` defaults to 100 (the reference's example) and is
at most 1000; ``TotalCount`` is a string, as the reference's table and the client's model type it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from airflow_training_platform.engine import TrainingEngine
from airflow_training_platform.engine.job_log import has_started, job_lines
from airflow_training_platform.errors import ApiError
from airflow_training_platform.platforms.pai import wire

INSTANCE_NOT_FOUND = "TRAINING_JOB_INSTANCE_NOT_FOUND"
"""The error code the pai SDK's log printer treats as "no logs yet" (``_TrainingJobLogPrinter``)."""

PAGE_SIZE = 100
"""``PageSize`` when not given (the reference's example value; its default is not documented)."""

MAX_PAGE_SIZE = 1000
"""The largest ``PageSize`` served (a local bound; PAI documents none)."""


def instance_id(rec: Mapping[str, Any]) -> str:
    """The job's one instance, ``<job id>-master-0`` (``GetTrainingJob`` ``Instances[0].Name``)."""
    return f"{rec['job_id']}-master-0"


def list_logs(
    engine: TrainingEngine,
    rec: Mapping[str, Any],
    page: int = 1,
    size: int = PAGE_SIZE,
    since: float | None = None,
    until: float | None = None,
    instance: str | None = None,
) -> dict[str, Any]:
    """``ListTrainingJobLogs`` for the job ``rec`` (an engine snapshot), its query parsed.

    :param page: ``PageNumber`` (1-based). :param size: ``PageSize`` (1 – :data:`MAX_PAGE_SIZE`).
    :param since: ``StartTime`` (epoch seconds, included; ``None``: the job's start).
    :param until: ``EndTime`` (epoch seconds, included; ``None``: now).
    :param instance: ``InstanceId`` (or the deprecated ``WorkerId``); ``None``: the job's instance.
    :returns: ``{"TotalCount": str (lines in the window), "Logs": [str, …]}`` — the page's lines,
        oldest first, each the line as the program wrote it (or a built-in trainer event's message).
    :raises ApiError: ``TRAINING_JOB_INSTANCE_NOT_FOUND`` (404) before the job's instance started or
        for another instance; ``InvalidParameter`` (400) for a ``PageSize`` over the bound.
    """
    if not has_started(rec) or (instance and instance != instance_id(rec)):
        raise ApiError(
            404,
            INSTANCE_NOT_FOUND,
            f"The instance {instance or instance_id(rec)} of training job {rec['job_id']} is not found.",
        )
    if size > MAX_PAGE_SIZE:
        raise wire.bad("PageSize", f"'{size}' must be at most {MAX_PAGE_SIZE}")
    since = float(rec["started_at"]) if since is None else since
    until = time.time() if until is None else until
    lines = [line.text for line in job_lines(engine, rec) if since <= line.at <= until]
    return {"TotalCount": str(len(lines)), "Logs": lines[(page - 1) * size : page * size]}
