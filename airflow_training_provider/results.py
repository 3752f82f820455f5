"""A finished job as the task returns and stores it: what a downstream task needs, within a size
budget whatever the run's length.

A job's checkpoints, metric history and events grow with its epochs (400 epochs: 227 KB), and
Airflow writes what a task returns into its metadata database (XCom ``return_value``; a trigger's
event into the task instance's ``next_kwargs``; the job record into XCom ``training_job`` and the
task state store). :func:`bounded_job` keeps every scalar field (state, message, final metrics,
progress, cost, console link, artifacts, tags, times) and, of the lists:

* ``checkpoints``: the last :data:`RESULT_CHECKPOINTS`, and the best (:func:`~.models.best_checkpoint`)
  and every ``final``/``best``/``location`` one wherever it is: the checkpoint to resume or
  promote is always there;
* ``metric_history``: at most :data:`RESULT_HISTORY_POINTS` points, evenly spaced, the first and the
  last kept;
* ``events``: the last :data:`RESULT_EVENTS`.

then, if the JSON is still over :data:`RESULT_BYTES` (many metrics per point), halves the history
and the checkpoints together (never below the checkpoints it must keep), then the events, until it
fits.
``omitted`` says how many of each were left out; the platform keeps them all (the Training job
tab and ``TrainingPlatformHook.snapshot`` read them whole).
"""

from __future__ import annotations

import json
from typing import Any

from airflow_training_provider.json_values import dump
from airflow_training_provider.models import Checkpoint, MetricPoint, TrainingJob, best_checkpoint

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


def kept_checkpoints(checkpoints: list[Checkpoint], limit: int) -> list[Checkpoint]:
    """The last ``limit`` of ``checkpoints`` and, wherever they are, the best and those of
    :data:`KEPT_KINDS`; in the platform's order."""
    must = {id(c) for c in checkpoints if c.kind in KEPT_KINDS}
    if (best := best_checkpoint(checkpoints)) is not None:
        must.add(id(best))
    recent = {id(c) for c in checkpoints[-limit:]} if limit > 0 else set()
    return [c for c in checkpoints if id(c) in must or id(c) in recent]


def result_size(job: TrainingJob) -> int:
    """Bytes of ``job``'s JSON as the task writes it (UTF-8, compact)."""
    return len(json.dumps(dump(job), separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def bounded_job(job: TrainingJob, budget: int = RESULT_BYTES) -> TrainingJob:
    """``job`` within ``budget`` bytes of JSON, as described in the module's docstring; ``job``
    itself when it already is (and leaves nothing out).

    :param job: a job as a dialect parsed it, of any size.
    :param budget: bytes of compact UTF-8 JSON (:func:`result_size`).
    :returns: a copy with ``omitted`` counting what each list left out, added to what ``job``
        already left out (a job bounded twice counts once)."""
    history_limit, checkpoint_limit, event_limit = RESULT_HISTORY_POINTS, RESULT_CHECKPOINTS, RESULT_EVENTS
    while True:
        history = sample_evenly(job.metric_history, history_limit)
        checkpoints = kept_checkpoints(job.checkpoints, checkpoint_limit)
        events = job.events[-event_limit:] if event_limit else []
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
        if result_size(bounded) <= budget or (history_limit, checkpoint_limit, event_limit) == (0, 0, 0):
            return job if not any(left_out.values()) else bounded
        # shrink what grows with the run, the history and the checkpoints together, then the events
        if history_limit or checkpoint_limit:
            history_limit, checkpoint_limit = history_limit // 2, checkpoint_limit // 2
        else:
            event_limit //= 2


def job_result(job: TrainingJob, **extra: Any) -> dict[str, Any]:
    """What the task returns for a finished ``job`` (XCom ``return_value``): the bounded job as
    JSON (:func:`bounded_job`, :func:`~.json_values.dump`), with ``extra`` keys added (a guard's
    ``guard`` entry)."""
    return {**dump(bounded_job(job)), **extra}
