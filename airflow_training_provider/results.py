"""A finished job as the task returns and stores it: what a downstream task needs, within a size
budget whatever the run's length.

A job's checkpoints, metric history and events grow with its epochs (400 epochs: 227 KB), and
Airflow writes what a task returns into its metadata database (XCom ``return_value``; a trigger's
event into the task instance's ``next_kwargs``; the job record into XCom ``training_job`` and the
task state store). :func:`bounded_job` returns a job whose JSON fits in :data:`RESULT_BYTES` whole;
a larger one keeps every scalar field (state, message, final metrics, progress, cost, console link,
artifacts, tags, times) and, of the lists:

* ``checkpoints``: the last :data:`RESULT_CHECKPOINTS`, and wherever they are the newest, the best
  (:func:`~.models.best_checkpoint`) and the newest ``final``/``best``/``location`` one: the
  checkpoint to resume or promote is always there;
* ``metric_history``: at most :data:`RESULT_HISTORY_POINTS` points, every evaluation and per-epoch
  point first, the training points evenly spaced;
* ``events``: the last :data:`RESULT_EVENTS`.

then, if the JSON is still over the budget (many metrics per point), halves the history, then the
checkpoints (never below the ones it must keep), then the events, until it fits.
``omitted`` says how many of each were left out; the platform keeps them all (the Training job
tab and ``TrainingPlatformHook.snapshot`` read them whole).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from airflow_training_provider.json_values import dump
from airflow_training_provider.models import Checkpoint, MetricPoint, TrainingJob, best_checkpoint

log = logging.getLogger(__name__)

#: the largest JSON (bytes, UTF-8) of a finished job as the task returns it
RESULT_BYTES = 16 * 1024
#: checkpoints kept, newest last (besides the best and the final ones)
RESULT_CHECKPOINTS = 10
#: metric history points kept, evenly spaced over the run
RESULT_HISTORY_POINTS = 50
#: events kept, newest last
RESULT_EVENTS = 20
#: checkpoint kinds always kept: what a downstream task resumes from or promotes
KEPT_KINDS = frozenset({"final", "best", "location"})


def sample_evenly(points: list[MetricPoint], limit: int) -> list[MetricPoint]:
    """At most ``limit`` of ``points``, evenly spaced, the first and the last among them."""
    if len(points) <= limit:
        return list(points)
    if limit <= 1:
        return points[-limit:] if limit == 1 else []
    step = (len(points) - 1) / (limit - 1)
    return [points[round(i * step)] for i in range(limit)]


def sample_history(points: list[MetricPoint], limit: int) -> list[MetricPoint]:
    """At most ``limit`` of ``points``, in their order: the evaluation and per-epoch points first
    (few, and each a curve's only source), evenly sampled if they alone are too many, then as many
    training points as fit, evenly spaced."""
    rare = [p for p in points if p.kind != "train"]
    if len(rare) >= limit:
        kept = {id(p) for p in sample_evenly(rare, limit)}
    else:
        kept = {id(p) for p in rare} | {
            id(p) for p in sample_evenly([p for p in points if p.kind == "train"], limit - len(rare))
        }
    return [p for p in points if id(p) in kept]


def kept_checkpoints(checkpoints: list[Checkpoint], limit: int) -> list[Checkpoint]:
    """The last ``limit`` of ``checkpoints`` and, wherever they are, the newest (always), the best,
    and the newest of each kind in :data:`KEPT_KINDS`; in the platform's order."""
    must = {id(checkpoints[-1])} if checkpoints else set()
    for kind in KEPT_KINDS:
        if of_kind := [c for c in checkpoints if c.kind == kind]:
            must.add(id(of_kind[-1]))
    if (best := best_checkpoint(checkpoints)) is not None:
        must.add(id(best))
    recent = {id(c) for c in checkpoints[-limit:]} if limit > 0 else set()
    return [c for c in checkpoints if id(c) in must or id(c) in recent]


def result_size(job: TrainingJob) -> int:
    """Bytes of ``job``'s JSON as the task writes it (UTF-8, compact)."""
    # ASCII-escaped, as Airflow writes JSON: a non-ASCII character counts its \uXXXX escape
    return len(json.dumps(dump(job), separators=(",", ":")))


def bounded_job(job: TrainingJob, budget: int = RESULT_BYTES) -> TrainingJob:
    """``job`` within ``budget`` bytes of JSON, as described in the module's docstring; ``job``
    itself, whole, when it already is.

    :param job: a job as a dialect parsed it, of any size.
    :param budget: bytes of compact UTF-8 JSON (:func:`result_size`).
    :returns: a copy with ``omitted`` counting what each list left out, added to what ``job``
        already left out (a job bounded twice counts once). Still over ``budget`` with every list
        at its minimum (thousands of metric names, huge tags): that copy, with a warning."""
    if result_size(job) <= budget:
        return job
    limits = [RESULT_HISTORY_POINTS, RESULT_CHECKPOINTS, RESULT_EVENTS]
    while True:
        history = sample_history(job.metric_history, limits[0])
        checkpoints = kept_checkpoints(job.checkpoints, limits[1])
        events = job.events[-limits[2] :] if limits[2] else []
        left_out = {
            "checkpoints": len(job.checkpoints) - len(checkpoints),
            "metric_history": len(job.metric_history) - len(history),
            "events": len(job.events) - len(events),
        }
        omitted = {
            name: job.omitted.get(name, 0) + count
            for name, count in left_out.items()
            if count or job.omitted.get(name)
        }
        bounded = job.model_copy(
            update={
                "checkpoints": checkpoints,
                "metric_history": history,
                "events": events,
                "omitted": omitted,
            }
        )
        size = result_size(bounded)
        if size <= budget:
            return bounded
        if not any(limits):
            log.warning(
                "Training job %s: its result is %d bytes even with its lists cut short (budget %d)",
                job.id,
                size,
                budget,
            )
            return bounded
        # shrink the history first (the platform keeps it whole), then the checkpoints, then the events
        first = next(i for i, limit in enumerate(limits) if limit)
        limits[first] //= 2


def job_result(job: TrainingJob, **extra: Any) -> dict[str, Any]:
    """What the task returns for a finished ``job`` (XCom ``return_value``): the bounded job as
    JSON (:func:`bounded_job`, :func:`~.json_values.dump`), with ``extra`` keys added (a guard's
    ``guard`` entry)."""
    return {**dump(bounded_job(job)), **extra}
