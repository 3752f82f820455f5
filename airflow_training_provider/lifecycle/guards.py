"""Training guards: stop a job early when it stopped learning, before it overspends, or when it has
trained long enough — evaluated at each poll of the shared wait, deferred or not, on every platform.

Pure decisions on what the platform reports, so a guard gives the same answer wherever it runs and
after a triggerer restart:

* **early stopping** reads the job's per-epoch metric history (the platform's metrics endpoint or
  the metrics saved with each checkpoint), re-read from the platform whenever the job reports a
  new epoch: no state of its own to lose. A NaN or infinite value (a diverged epoch) never
  improves and is never the best, so a run that diverged stops after ``patience`` such epochs (the
  best finite epoch's checkpoint is kept); one that was never finite stops too, and its task fails
  (there is no model to keep);
* **budget** reads the job's cost (USD) at each poll (a NaN or infinite cost is no amount: the
  cost is unknown at that poll, ``models.Cost``, and the budget waits for the next finite one) and the rate two polls imply, and stops the
  job when, by the next poll and the stop after it, it would be over ``max_cost_usd``; where the platform reports no cost,
  the cost is the job's training time at the ``hourly_cost_usd`` the user gives;
* **run time** reads when the job started training (the platform's own timestamp where it gives
  one) and stops it ``max_runtime`` seconds later.

A guard stops the job as a cancel does (checkpoints kept, a final checkpoint asked for where the
platform can), recording which guard fired and why; the task then succeeds or fails as the guard
says (early stopping succeeds; budget and run time fail unless told ``"succeed"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from airflow_training_provider.cancellation import Seconds
from airflow_training_provider.json_values import is_finite, json_value, non_finite_name
from airflow_training_provider.models import Checkpoint, MetricPoint, TrainingJob
from airflow_training_provider.platforms.base import Capabilities

GuardName = Literal["early_stopping", "max_cost_usd", "max_runtime"]


class EarlyStopping(BaseModel):
    """Stop when ``metric`` has not improved for ``patience`` epochs.

    :ivar metric: the provider's metric name (``validation_loss``, ``validation_accuracy``, ``loss``...).
    :ivar mode: ``"min"`` (lower is better, a loss) or ``"max"`` (an accuracy).
    :ivar patience: epochs without an improvement before stopping (≥ 1).
    :ivar min_delta: the smallest change that counts as an improvement (≥ 0, in the metric's unit).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: str = Field(min_length=1)
    mode: Literal["min", "max"] = "min"
    patience: int = Field(3, ge=1)
    min_delta: float = Field(0.0, ge=0)


class Guards(BaseModel):
    """The guards of one task; flat JSON, so they travel in trigger kwargs unchanged.

    :ivar early_stopping: see :class:`EarlyStopping`; the task succeeds when it fires.
    :ivar max_cost_usd: stop before the job's cost (USD) would exceed this.
    :ivar hourly_cost_usd: what the job costs per hour of training (USD, all its instances
        together), for a platform that reports no cost (SageMaker, PAI, ModelArts): the budget then
        counts the job's training time, from the platform's start time, at this price. Not used
        where the platform reports a cost.
    :ivar max_runtime: seconds of training (from when the job started running, independent of
        Airflow's ``execution_timeout``) after which the job is stopped.
    :ivar on_budget: what the task does when ``max_cost_usd`` fires: ``"fail"`` or ``"succeed"``
        (with the job's best checkpoint).
    :ivar on_max_runtime: the same for ``max_runtime``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    early_stopping: EarlyStopping | None = None
    max_cost_usd: float | None = Field(None, gt=0)
    hourly_cost_usd: float | None = Field(None, gt=0)
    max_runtime: Seconds | None = None
    on_budget: Literal["fail", "succeed"] = "fail"
    on_max_runtime: Literal["fail", "succeed"] = "fail"

    @model_validator(mode="after")
    def _positive_runtime(self) -> Guards:
        if self.max_runtime is not None and self.max_runtime <= 0:
            raise ValueError("max_runtime must be more than 0 seconds")
        return self

    @property
    def any(self) -> bool:
        return bool(self.early_stopping or self.max_cost_usd or self.max_runtime)


class GuardStop(BaseModel):
    """A guard fired: which, why, and where the job was.

    :ivar guard: ``early_stopping``, ``max_cost_usd`` or ``max_runtime``.
    :ivar succeed: whether the task succeeds (else it fails, after stopping the job).
    :ivar reason: one line for the task log and the platform's cancel record.
    :ivar epoch: the last epoch the job reported.
    :ivar metric, metric_value: the early-stopping metric and its last value.
    :ivar best_epoch, best_value: the epoch with the best value of that metric, and the value.
    :ivar cost_usd: the job's cost when the guard fired (USD).
    :ivar runtime_seconds: how long the job had been training.
    :ivar best_checkpoint: the checkpoint to keep (the best epoch's, else the latest); set once the
        job has stopped.
    """

    guard: GuardName
    succeed: bool
    reason: str
    epoch: float | None = None
    metric: str | None = None
    metric_value: float | None = None
    best_epoch: float | None = None
    best_value: float | None = None
    cost_usd: float | None = None
    runtime_seconds: float | None = None
    best_checkpoint: Checkpoint | None = None


def unsupported(guards: Guards, capabilities: Capabilities, platform: str) -> tuple[str, str] | None:
    """``(parameter, why)`` for a guard the platform cannot serve (asked before submit), else ``None``."""
    if guards.early_stopping is not None and not capabilities.metric_history:
        return "early_stopping", f"{platform} reports no per-epoch metrics while a job runs; use max_runtime"
    if guards.max_cost_usd is not None and not capabilities.cost_usd and guards.hourly_cost_usd is None:
        return "max_cost_usd", (
            f"{platform} reports no cost in USD while a job runs; give hourly_cost_usd (what the job's "
            "instances cost per hour) to count its training time, or use max_runtime"
        )
    return None


def for_platform(guards: Guards, capabilities: Capabilities) -> Guards:
    """``guards`` as they apply on a platform: its own cost, where it reports one, is used instead
    of ``hourly_cost_usd`` (the price then counts for nothing)."""
    if guards.hourly_cost_usd is not None and capabilities.cost_usd:
        return guards.model_copy(update={"hourly_cost_usd": None})
    return guards


# -- early stopping -------------------------------------------------------------------------------
def epoch_values(history: list[MetricPoint], metric: str) -> list[tuple[float, float]]:
    """``(epoch, value)`` of ``metric`` per epoch, oldest first: the last point of each epoch that
    carries it (points without an epoch are skipped)."""
    by_epoch: dict[float, float] = {}
    for point in history:
        if point.epoch is not None and metric in point.values:
            by_epoch[point.epoch] = point.values[metric]
    return sorted(by_epoch.items())


def early_stop(rule: EarlyStopping, history: list[MetricPoint]) -> GuardStop | None:
    """Whether ``rule`` stops a job with this per-epoch ``history``: ``patience`` epochs in a row
    without improving on the best value by more than ``min_delta``."""
    values = epoch_values(history, rule.metric)
    best: tuple[float, float] | None = None
    since = 0
    for epoch, value in values:
        # a NaN or infinite value (a diverged epoch) is never an improvement, nor the best
        if is_finite(value) and (best is None or _improves(value, best[1], rule)):
            best, since = (epoch, value), 0
        else:
            since += 1
    if since < rule.patience or not values:
        return None
    epoch, value = values[-1]
    now = f"now {value:.4f}" if is_finite(value) else f"now {non_finite_name(value)}: the run diverged"
    return GuardStop(
        guard="early_stopping",
        succeed=best is not None,  # a run never finite made no model to keep: the task fails
        reason=(
            f"early stopping: {rule.metric} has not improved for {since} epochs "
            + (f"(best {best[1]:.4f} at epoch {best[0]:g}, " if best else "(never finite, ")
            + f"{now} at epoch {epoch:g})"
        ),
        epoch=epoch,
        metric=rule.metric,
        metric_value=value,
        best_epoch=best[0] if best else None,
        best_value=best[1] if best else None,
    )


def _improves(value: float, best: float, rule: EarlyStopping) -> bool:
    return value < best - rule.min_delta if rule.mode == "min" else value > best + rule.min_delta


# -- budget and run time ----------------------------------------------------------------------------
def over_budget(max_cost_usd: float, cost: float, rate_usd_per_s: float | None, interval: float) -> bool:
    """Whether a job that costs ``cost`` USD now, spending ``rate_usd_per_s``, must be stopped now to
    stay within ``max_cost_usd`` (or already is over it): it would be over by the next poll
    ``interval`` seconds from now plus one more ``interval`` for the stop itself (the platform
    charges until the trainer has saved its final checkpoint and exited)."""
    return cost >= max_cost_usd or (
        rate_usd_per_s is not None and cost + rate_usd_per_s * 2 * interval > max_cost_usd
    )


class GuardWatch:
    """What the guards remember between polls of one wait (only what can be recomputed): the
    last cost sample, for the rate, and when the job started training.

    :param guards: the task's guards.
    :param clock: UNIX seconds (``time.time``; a test passes a fake one).
    """

    def __init__(self, guards: Guards, clock: Callable[[], float]) -> None:
        self.guards = guards
        self.clock = clock
        self._cost_sample: tuple[float, float] | None = None  # (time, USD)
        self.started_at: float | None = None  # UNIX seconds the job started training
        self.history_marker: tuple | None = None  # the progress at the last history read
        self.fired: GuardStop | None = None  # set by the wait when a guard fires

    def needs_start(self, job: TrainingJob) -> bool:
        """The job is training, when it started is not known yet, and a guard counts from then
        (``max_runtime``, or a budget priced by the hour for a job that reports no cost)."""
        counts_time = bool(self.guards.max_runtime) or self._priced_by_time
        return counts_time and self.started_at is None and job.state.value == "running"

    @property
    def _priced_by_time(self) -> bool:
        g = self.guards  # hourly_cost_usd is kept only for a platform that reports no cost
        return bool(g.max_cost_usd and g.hourly_cost_usd)

    def note_start(self, job: TrainingJob) -> None:
        """Remember when ``job`` (fully read) started training: the platform's timestamp, else now."""
        self.started_at = job.started_at.timestamp() if job.started_at else self.clock()

    def needs_history(self, job: TrainingJob) -> bool:
        """Early stopping is on and the job reports progress since the history was last read (a new
        epoch; where the platform reports no epoch, a new step or percent; with none of them, every
        poll)."""
        if self.guards.early_stopping is None:
            return False
        marker = _progress_marker(job)
        return marker is None or marker != self.history_marker

    def check(self, job: TrainingJob, interval: float, history: list[MetricPoint] | None) -> GuardStop | None:
        """The guard that fires for ``job`` at this poll, if any (run time, then budget, then early
        stopping). ``history``: the job's per-epoch metrics, when just read."""
        guards, now = self.guards, self.clock()
        if self.started_at is None and job.state.value == "running":
            self.started_at = job.started_at.timestamp() if job.started_at else now
        if guards.max_runtime and self.started_at is not None and now - self.started_at >= guards.max_runtime:
            ran = now - self.started_at
            return GuardStop(
                guard="max_runtime",
                succeed=guards.on_max_runtime == "succeed",
                reason=f"max_runtime: the job has trained for {ran:.0f} s (limit {guards.max_runtime:.0f} s)",
                epoch=job.progress.epoch,
                cost_usd=job.cost.total_usd,
                runtime_seconds=ran,
            )
        cost = job.cost.total_usd
        priced = self._priced_by_time
        hourly = guards.hourly_cost_usd or 0.0  # set when priced
        if priced and self.started_at is not None:  # training time at the user's hourly price
            cost = (now - self.started_at) * hourly / 3600
        if guards.max_cost_usd and cost is not None:
            rate = hourly / 3600 if priced else None
            if rate is None and self._cost_sample is not None and now > self._cost_sample[0]:
                rate = max(0.0, (cost - self._cost_sample[1]) / (now - self._cost_sample[0]))
            self._cost_sample = (now, cost)
            if over_budget(guards.max_cost_usd, cost, rate, interval):
                return GuardStop(
                    guard="max_cost_usd",
                    succeed=guards.on_budget == "succeed",
                    reason=(
                        f"max_cost_usd: the job has cost ${cost:.4f}"
                        + (
                            f" ({now - self.started_at:.0f} s of training at hourly_cost_usd)"
                            if priced and self.started_at is not None
                            else ""
                        )
                        + (f" and spends ${rate * 3600:.4f}/h" if rate else "")
                        + f"; by the next poll and the stop it would exceed ${guards.max_cost_usd:.4f}"
                    ),
                    epoch=job.progress.epoch,
                    cost_usd=cost,
                    runtime_seconds=None if self.started_at is None else now - self.started_at,
                )
        if guards.early_stopping is not None and history is not None:
            self.history_marker = _progress_marker(job)
            stop = early_stop(guards.early_stopping, history)
            if stop is not None:
                return stop.model_copy(update={"cost_usd": cost})
        return None


def _progress_marker(job: TrainingJob) -> tuple | None:
    """Where the job is: its epoch if it reports one, else its step and percent; ``None`` if nothing."""
    p = job.progress
    if p.epoch is not None:
        return (p.epoch,)
    # a NaN percent as its name: equal to the last poll's, so it is no progress
    return None if p.step is None and p.percent is None else (p.step, json_value(p.percent))


def best_checkpoint(stop: GuardStop, checkpoints: list[Checkpoint]) -> Checkpoint | None:
    """The checkpoint to keep after ``stop``: the best epoch's (early stopping), else the final one,
    else the latest."""
    if stop.best_epoch is not None:
        at_best = [c for c in checkpoints if c.epoch is not None and c.epoch == stop.best_epoch]
        if at_best:
            return at_best[-1]
    finals = [c for c in checkpoints if c.kind == "final"]
    return finals[-1] if finals else (checkpoints[-1] if checkpoints else None)
