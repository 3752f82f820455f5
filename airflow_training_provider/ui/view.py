"""What the "Training job" view shows for one task instance — pure logic, no Airflow or I/O.

The route (:mod:`airflow_training_provider.ui.app`) gathers the inputs (the state of the try shown,
its :class:`~airflow_training_provider.links.JobReference` from the task state store or XCom, the
platform's answer if it was asked, the task instance's tries) and :func:`build_view` turns them into
:class:`TrainingJobView`, the JSON the page draws.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from airflow_training_provider.json_values import is_finite
from airflow_training_provider.links import JobReference
from airflow_training_provider.models import MetricPoint, TrainingJob, best_checkpoint

#: Task instance states in which the job may still change: the page refreshes and the platform is asked.
LIVE_TI_STATES = frozenset({"scheduled", "queued", "running", "deferred", "up_for_retry", "restarting"})

#: The curves drawn, by chart: (series name, metric) pairs; x is the epoch.
CHARTS: dict[str, tuple[tuple[str, str], ...]] = {
    "loss": (("training", "loss"), ("validation", "validation_loss")),
    "accuracy": (("training", "accuracy"), ("validation", "validation_accuracy")),
}

Point = tuple[float, float]


class Curve(BaseModel):
    """One series of a chart: ``points`` are ``(epoch, value)`` pairs, oldest first."""

    name: str
    metric: str
    points: list[Point] = Field(default_factory=list)


class TrySummary(BaseModel):
    """One entry of the page's try picker: a try, its task instance state and its job, if any.

    :ivar job_state: the job's state as that try last saw it (``None``: no job recorded).
    """

    try_number: int
    ti_state: str | None = None
    job_id: str | None = None
    job_state: str | None = None


class ProgramLog(BaseModel):
    """The training program's own log lines (what it printed on the platform), as the task log
    shows them (masked, long lines cut): the last :data:`PROGRAM_LOG_LINES` of what one read of the
    platform's log gave.

    :ivar lines: the lines, oldest first.
    :ivar earlier: lines read before those shown (left out).
    :ivar complete: the read reached the end of the log; ``False``: the log is longer than one read
        (``PROGRAM_LOG_PAGES`` pages), the lines shown are not its last ones.
    :ivar note: why there are no lines (not readable, secrets not resolvable, a sensor's record,
        secrets written in the spec), if that is known.
    """

    lines: list[str] = Field(default_factory=list)
    earlier: int = 0
    complete: bool = True
    note: str | None = None


#: program log lines the view shows at most (the last ones read)
PROGRAM_LOG_LINES = 200


def program_log(lines: list[str], complete: bool, note: str | None = None) -> ProgramLog:
    """The view's program log from the lines one read gave: the last :data:`PROGRAM_LOG_LINES`."""
    shown = lines[-PROGRAM_LOG_LINES:]
    return ProgramLog(lines=shown, earlier=len(lines) - len(shown), complete=complete, note=note)


class TrainingJobView(BaseModel):
    """The page's data for one try of one task instance (the data route's JSON).

    :ivar kind: ``training`` (a job to show), ``waiting`` (a training task that has not submitted
        its job in this try yet) or ``not_training`` (the task does not run training jobs).
    :ivar try_number: the try shown (``None``: the task instance has not been scheduled).
    :ivar tries: every try of the task instance, oldest first (the page's try picker).
    :ivar ti_state: the state of the try shown (an earlier try's from Airflow's task instance
        history; ``None`` before it was scheduled).
    :ivar live: the job may still change: the page refreshes itself every ``refresh_seconds``.
    :ivar source: where ``job`` comes from: ``platform`` (asked just now) or ``xcom`` (what the try
        last published: at submit, or the final job when it ended; read from its XCom or, kept
        across tries, from the task state store).
    :ivar stale_reason: why the platform was not asked or did not answer (then ``source`` is xcom).
    :ivar seen_at: when ``job`` was read (UTC).
    :ivar reason: the failure or cancel reason, when the job failed or was cancelled.
    :ivar curves: by chart (``loss``, ``accuracy``), the training and validation series per epoch.
    :ivar final_checkpoint_id: the checkpoint the job ended with (written on cancel or completion).
    :ivar best_checkpoint_id: the platform's ``best`` checkpoint, else the one with the lowest
        validation loss (or loss).
    :ivar program_log: the training program's last log lines (platforms whose API serves them:
        ``Capabilities.program_logs``); ``None``: the platform has none, or no job yet.
    """

    kind: Literal["training", "waiting", "not_training"]
    message: str = ""
    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    try_number: int | None = None
    tries: list[TrySummary] = Field(default_factory=list)
    ti_state: str | None = None
    live: bool = False
    refresh_seconds: float = 5.0
    platform: str | None = None
    platform_name: str | None = None
    conn_id: str | None = None
    job_id: str | None = None
    console_url: str | None = None
    source: Literal["platform", "xcom"] | None = None
    stale_reason: str | None = None
    seen_at: datetime | None = None
    reason: str | None = None
    job: TrainingJob | None = None
    curves: dict[str, list[Curve]] = Field(default_factory=dict)
    final_checkpoint_id: str | None = None
    best_checkpoint_id: str | None = None
    program_log: ProgramLog | None = None


def curves(history: list[MetricPoint]) -> dict[str, list[Curve]]:
    """The charts' series from a job's metric history, with the epoch as x.

    ``epoch`` points (one per epoch) give all four metrics; ``train`` and ``eval`` points (per step,
    with a fractional epoch) give what they carry. Points without an epoch, and NaN or infinite
    values (a diverged run: a chart cannot draw them; the checkpoints table shows them), are left out.
    """
    charts: dict[str, list[Curve]] = {}
    for chart, series in CHARTS.items():
        charts[chart] = [
            Curve(
                name=name,
                metric=metric,
                points=[
                    (float(p.epoch or 0), float(p.values[metric]))  # is_finite: an epoch
                    for p in history
                    if is_finite(p.epoch) and is_finite(p.values.get(metric))
                ],
            )
            for name, metric in series
        ]
    return charts


def display_name(platform: str) -> str:
    """A platform's name for people (``TensorOne``, ``AWS SageMaker``) from its dialect name."""
    from airflow_training_provider.platforms import PLATFORMS

    names = {p.dialect.name: p.display_name for p in PLATFORMS.values()}
    return names.get(platform, platform)


def build_view(
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int,
    ti_state: str | None,
    is_training_task: bool,
    ref: JobReference | None,
    platform_job: TrainingJob | None = None,
    platform_error: str | None = None,
    now: datetime | None = None,
    try_number: int | None = None,
    tries: list[TrySummary] | None = None,
    current_try: bool = True,
    program_log: ProgramLog | None = None,
) -> TrainingJobView:
    """The view of one try of one task instance.

    :param ti_state: the state of the try shown.
    :param is_training_task: the task is a training operator or sensor (it carries the console link).
    :param ref: the job reference the try published (``None``: none in this try).
    :param platform_job: the job as the platform told just now, if it was asked and answered.
    :param platform_error: why asking the platform failed, if it was asked and did not answer.
    :param try_number: the try shown; ``tries``: every try, for the picker.
    :param current_try: the try shown is the task instance's current one (an earlier try's state is
        history: only its job, while not ended, keeps the page refreshing).
    :param program_log: the job's program log as read just now (``None``: not read).
    """
    where = {
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task_id,
        "map_index": map_index,
        "ti_state": ti_state,
        "try_number": try_number,
        "tries": tries or [],
    }
    ti_live = current_try and (ti_state is None or ti_state in LIVE_TI_STATES)
    if ref is None:
        if not is_training_task:
            return TrainingJobView(
                kind="not_training",
                message="Not a training task: this task does not run training jobs.",
                **{**where, "tries": []},
            )
        if ti_live:
            message = "No training job yet: the task has not submitted one in this try."
        elif current_try:
            message = "No training job: the task ended before it submitted one."
        else:
            message = f"No training job recorded for try {try_number}: it ended before it submitted one."
        return TrainingJobView(kind="waiting", message=message, live=ti_live, **where)
    job, source, seen_at = (platform_job, "platform", now) if platform_job else (ref.job, "xcom", ref.seen_at)
    live = (current_try and ti_state in LIVE_TI_STATES) or (job is not None and not job.is_terminal)
    stale = None
    if platform_job is None and platform_error:
        stale = f"The platform did not answer ({platform_error}); showing the last state the task saw."
    reason = job.message if job is not None and job.state.value in ("failed", "cancelled") else None
    return TrainingJobView(
        kind="training",
        live=live,
        platform=ref.platform,
        platform_name=display_name(ref.platform),
        conn_id=ref.conn_id,
        job_id=ref.job_id,
        console_url=(job.console_url if job is not None else None) or ref.console_url,
        source=source,
        stale_reason=stale,
        seen_at=seen_at,
        reason=reason,
        job=job,
        curves=curves(job.metric_history) if job is not None else curves([]),
        final_checkpoint_id=_final_checkpoint_id(job),
        best_checkpoint_id=(
            best.id if job is not None and (best := best_checkpoint(job.checkpoints)) else None
        ),
        program_log=program_log,
        **where,
    )


def _final_checkpoint_id(job: TrainingJob | None) -> str | None:
    if job is None or not job.checkpoints:
        return None
    if job.is_terminal:
        final = job.final_checkpoint
        return final.id if final is not None else None
    finals = [c for c in job.checkpoints if c.kind == "final"]
    return finals[-1].id if finals else None
