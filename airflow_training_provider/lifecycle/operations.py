"""The job API and the one polling loop, written once as sans-IO operations.

An operation is a generator. It yields what it needs done and gets the answer back:

* an :class:`~airflow_training_provider.platforms.base.ApiRequest` → the driver sends it and
  ``send``\\ s back the decoded JSON body, or ``throw``\\ s in the
  :class:`~airflow_training_provider.errors.TrainingPlatformError` the call ended in;
* :class:`Sleep` → the driver waits that many seconds (the worker's driver wakes up early when the
  task is killed);
* :class:`Progress` and :class:`NewEvents` → reports for the task log (the trigger saves its event
  cursor before writing the events).

Its return value is the operation's result. The sync hook (worker) and the async hook (trigger)
are the two drivers (``TrainingPlatformHook.drive``, ``AsyncTrainingPlatformClient.drive``); the
tests drive operations with canned answers and a fake clock, without any socket.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_training_provider.errors import (
    JobAlreadyExistsError,
    JobStateConflictError,
    TrainingPlatformError,
)
from airflow_training_provider.events import explain_failure
from airflow_training_provider.models import (
    CancelRequest,
    CancelResult,
    Checkpoint,
    JobEvent,
    MetricPoint,
    TrainingJob,
    complete_cancel_result,
    no_cancel_needed,
)
from airflow_training_provider.platforms.base import ApiRequest, Dialect

if TYPE_CHECKING:
    from airflow_training_provider.lifecycle.guards import GuardStop, GuardWatch

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` before going on."""

    seconds: float


@dataclass(frozen=True)
class Progress:
    """A job state just polled (the driver logs it when it changed)."""

    job: TrainingJob


@dataclass(frozen=True)
class NewEvents:
    """Platform events not reported yet, and the cursor (events reported in all) after them."""

    events: tuple[JobEvent, ...]
    cursor: int


Step = ApiRequest | Sleep | Progress | NewEvents
Operation = Generator[Step, Any, T]
"""A sans-IO operation returning ``T``."""


def advance(
    operation: Operation[Any], reply: Any = None, error: BaseException | None = None
) -> tuple[bool, Any]:
    """Resume ``operation`` with the answer to its last step (``reply``, or ``error`` thrown in).

    :returns: ``(False, next_step)``, or ``(True, result)`` once it has finished. Every driver is a
        loop around this: perform the step, advance with its answer.
    """
    try:
        return False, (operation.throw(error) if error is not None else operation.send(reply))
    except StopIteration as done:
        return True, done.value


class JobOperations:
    """The job API of one platform, as operations.

    :param dialect: the platform's wire format.
    :param base_url: the connection's API base URL (for console links).
    :param clock: wall-clock seconds (``time.time``); a test passes a fake one.
    """

    def __init__(self, dialect: Dialect, base_url: str, clock: Callable[[], float] = time.time) -> None:
        self.dialect = dialect
        self.base_url = base_url
        self.clock = clock
        self._console: tuple[str, str | None] = ("", None)  # the last job id and its console link

    def _call(self, request: ApiRequest, budget: float | None = None) -> Operation[Any]:
        return (yield request if budget is None else replace(request, budget=budget))

    def _linked(self, job: TrainingJob) -> TrainingJob:
        if not job.console_url:  # the job was just parsed and is ours: set it, no copy (every poll)
            if self._console[0] != job.id:  # a poll asks for the same job's link every time
                self._console = (job.id, self.dialect.console_url(self.base_url, job.id))
            job.console_url = self._console[1]
        return job

    # -- the job API ---------------------------------------------------------------------------
    def create_job(self, spec: dict[str, Any], tags: list[str] | None = None) -> Operation[TrainingJob]:
        """Submit ``spec`` (already validated and tagged with ``tags``); the new job, with its console link.

        Where the client names the job (:meth:`Dialect.created_job_id`), a create answered "already
        exists" is read back: a job carrying every one of ``tags`` (the try's identity) is this create
        (or an earlier send of it) having landed — returned, never a second job and never an error.

        :raises JobAlreadyExistsError: the name is taken by a job that is not this try's.
        """
        try:
            body = yield from self._call(self.dialect.create_request(spec))
        except JobAlreadyExistsError:
            job_id = self.dialect.created_job_id(spec)
            if job_id is None or not tags:
                raise
            existing = yield from self._tagged_job(job_id)
            if existing is None or not set(tags) <= set(existing.tags):
                raise
            return existing
        return self._linked(self.dialect.parse_created(body))

    def _tagged_job(self, job_id: str) -> Operation[TrainingJob | None]:
        """Job ``job_id`` with its tags (where the job object lacks them, through the list call)."""
        request = self.dialect.tagged_job_request(job_id)
        if request is None:
            return (yield from self.get_job(job_id))
        found = [j for j in self.dialect.parse_list((yield from self._call(request))) if j.id == job_id]
        return self._linked(found[0]) if found else None

    def get_job(self, job_id: str, budget: float | None = None) -> Operation[TrainingJob]:
        """Job ``job_id`` now. ``budget``: seconds to ride out transient errors (outage budget).

        :raises JobNotFoundError: the platform does not know the job.
        """
        return (yield replace(self.dialect.get_request(job_id), budget=budget, reader=self._read_job))

    def _read_job(self, raw: bytes | str) -> TrainingJob:
        """A Get job answer (raw body) as the job; read in the transport, so a 2xx body that is not
        a job is a failed call (transient), like a 5xx."""
        return self._linked(self.dialect.parse_job(json.loads(raw)))

    def list_events(self, job_id: str, budget: float | None = None) -> Operation[list[JobEvent]]:
        """The job's platform events, oldest first (``[]`` for platforms without events)."""
        if self.dialect.capabilities.events_in_job:
            return (yield from self.get_job(job_id, budget)).events
        request = self.dialect.events_request(job_id)
        if request is None:
            return []
        return self.dialect.parse_events((yield from self._call(request, budget)))

    def list_checkpoints(self, job_id: str, budget: float | None = None) -> Operation[list[Checkpoint]]:
        """The job's checkpoints, oldest first."""
        request = self.dialect.checkpoints_request(job_id)
        if request is None:
            return (yield from self.get_job(job_id, budget)).checkpoints
        return self.dialect.parse_checkpoints((yield from self._call(request, budget)))

    def final_view(
        self, job: TrainingJob, events: list[JobEvent] | None = None, budget: float | None = None
    ) -> Operation[TrainingJob]:
        """A terminal job completed with what its object lacks: checkpoints (from the checkpoints
        endpoint where the job does not list them), its metric history (where the platform has a
        metrics endpoint) and the failure reason from its events.

        The metric history is a nice-to-have: a failed read of it leaves the history empty (logged)
        rather than failing a finished job's task."""
        caps = self.dialect.capabilities
        if not caps.checkpoints_in_job and not job.checkpoints:
            job = job.model_copy(update={"checkpoints": (yield from self.list_checkpoints(job.id, budget))})
        request = self.dialect.metrics_request(job.id)
        if request is not None and not job.metric_history:
            try:
                history = self.dialect.parse_metrics((yield from self._call(request, budget)))
            except TrainingPlatformError as exc:
                log.warning("Metric history of job %s not read: %s", job.id, exc)
            else:
                job = with_metric_history(job, history)
        elif not job.metric_history:  # no metrics endpoint: the metrics saved with each checkpoint
            job = with_metric_history(job, history_from_checkpoints(job.checkpoints))
        if events is None and caps.events:
            events = yield from self.list_events(job.id, budget)
        return explain_failure(job, events or [], self.dialect)

    def snapshot(self, job_id: str, budget: float | None = None) -> Operation[TrainingJob]:
        """Job ``job_id`` now, as complete as the platform tells, running or not: what a person
        watching it wants (the job, its checkpoints, metric history and events; the failure reason
        once it failed). Costs up to four calls."""
        job = yield from self.get_job(job_id, budget)
        events: list[JobEvent] = []
        if self.dialect.capabilities.events:
            events = job.events or (yield from self.list_events(job_id, budget))
        job = yield from self.final_view(job, events, budget)
        return job.model_copy(update={"events": events})

    def list_jobs(self, tags: list[str]) -> Operation[list[TrainingJob]]:
        """Jobs carrying every one of ``tags`` (platforms with ``capabilities.list_jobs``).

        Filtered here too: a platform may ignore the tag filter of its list call."""
        jobs = self.dialect.parse_list((yield from self._call(self.dialect.list_request(tags))))
        return [self._linked(j) for j in jobs if set(tags) <= set(j.tags)]

    def probe(self) -> Operation[None]:
        """One cheap authenticated call (:meth:`Dialect.probe_request`): proves the platform is
        reachable and accepts the credentials. :raises TrainingPlatformError: it does not."""
        yield from self._call(self.dialect.probe_request())

    def cancel_job(self, job_id: str, cancel: CancelRequest) -> Operation[CancelResult]:
        """Ask the platform to cancel. A job that already ended, or is already stopping, is reported
        and not cancelled again (unless ``cancel.force``); that is not an error, and neither is a
        409 (or the platform's equivalent) that turns out to mean the same."""
        cancel = self.dialect.effective_cancel(cancel)
        if not cancel.force and (skipped := no_cancel_needed((yield from self.get_job(job_id)))):
            return skipped
        try:
            body = yield from self._call(self.dialect.cancel_request(job_id, cancel))
        except JobStateConflictError:
            result = no_cancel_needed((yield from self.get_job(job_id)))
            if result is None:
                raise
            return result
        return self.dialect.parse_cancel(job_id, body)

    # -- polling: the one loop -------------------------------------------------------------------
    def poll(
        self,
        job_id: str,
        until: Callable[[TrainingJob], bool],
        interval: float,
        deadline: float | None = None,
        budget: float | None = None,
        cursor: int | None = None,
        watch: GuardWatch | None = None,
    ) -> Operation[tuple[TrainingJob, int | None]]:
        """Poll job ``job_id`` every ``interval`` s until ``until(job)`` holds or the clock reaches
        ``deadline`` (absolute, ``clock`` seconds); each poll is reported (:class:`Progress`).

        With an event ``cursor`` (platforms with events), new events are reported too
        (:class:`NewEvents`). A job that ended is completed by :meth:`final_view`. The deadline is
        checked *after* a poll, so a job that ended just before it is seen as ended.

        With a guard ``watch``, the guards are asked about each running job (:meth:`_guard`); when
        one fires the poll returns at once, the guard's stop in ``watch.fired``.

        :returns: the last job seen and the event cursor after it.
        :raises TransientPlatformError: polls kept failing for longer than ``budget`` seconds.
        """
        streaming = cursor is not None and self.dialect.capabilities.events
        # built once for the loop; the answer is read straight into the job by _read_poll
        request = replace(self.dialect.get_request(job_id), budget=budget, reader=self._read_poll)
        while True:
            job = yield request
            events = None
            if streaming:
                in_job = self.dialect.capabilities.events_in_job
                events = job.events if in_job else (yield from self.list_events(job_id, budget))
                if len(events) > cursor:
                    yield NewEvents(tuple(events[cursor:]), len(events))
                    cursor = len(events)
            if job.is_terminal:
                job = yield from self.final_view(job, events, budget)
            yield Progress(job)
            if watch is not None and not job.is_terminal:
                watch.fired = yield from self._guard(job, watch, interval, budget)
                if watch.fired is not None:
                    return job, cursor
            now = self.clock()
            if until(job) or (deadline is not None and now >= deadline):
                return job, cursor
            job = events = None  # not kept while sleeping: thousands of triggers wait at once
            yield Sleep(interval if deadline is None else max(0.0, min(interval, deadline - now)))

    def _guard(
        self, job: TrainingJob, watch: GuardWatch, interval: float, budget: float | None
    ) -> Operation[GuardStop | None]:
        """Ask the guards about running ``job``, reading what they need that a poll does not give:
        when the job started training (once) and its metric history (when it reports a new epoch).
        A failed read is logged and tried again at the next poll; it never ends the wait."""
        history = None
        try:
            if watch.needs_start(job):
                watch.note_start((yield from self.get_job(job.id, budget)))
            if watch.needs_history(job):
                history = yield from self.metric_history(job.id, budget)
        except TrainingPlatformError as exc:
            log.warning(
                "Guards of job %s: could not read its progress (%s); asking again next poll", job.id, exc
            )
        return watch.check(job, interval, history)

    def metric_history(self, job_id: str, budget: float | None = None) -> Operation[list[MetricPoint]]:
        """The job's metric history so far, oldest first: the platform's metrics endpoint, else
        one point per checkpointed epoch from the metrics saved with its checkpoints."""
        request = self.dialect.metrics_request(job_id)
        if request is not None:
            return self.dialect.parse_metrics((yield from self._call(request, budget)))
        if self.dialect.capabilities.checkpoints_in_job:
            checkpoints = (yield from self.get_job(job_id, budget)).checkpoints
        else:
            checkpoints = yield from self.list_checkpoints(job_id, budget)
        return history_from_checkpoints(checkpoints)

    def _read_poll(self, raw: bytes | str) -> TrainingJob:
        """A poll's answer (raw body) as the job: :meth:`Dialect.read_poll`, fully parsed once it
        ended. Runs in the transport, so a body that is not a job counts as a failed poll
        (retried within the outage budget), not as a broken wait."""
        job = self.dialect.read_poll(raw)
        if job.is_terminal:
            job = self.dialect.parse_job(json.loads(raw))
        return self._linked(job)

    def wait_until(
        self,
        job_id: str,
        until: Callable[[TrainingJob], bool],
        timeout: float,
        interval: float,
        budget: float | None = None,
    ) -> Operation[TrainingJob]:
        """Poll until ``until(job)`` or ``timeout`` seconds passed; the last job seen."""
        job, _ = yield from self.poll(job_id, until, interval, self.clock() + timeout, budget)
        return job

    def cancel_and_confirm(
        self, job_id: str, cancel: CancelRequest, timeout: float, interval: float
    ) -> Operation[tuple[CancelResult, TrainingJob]]:
        """Cancel, then poll until the platform reports a terminal state (at most ``timeout`` s).

        :returns: the cancel result (completed with the final checkpoint, metrics and cost once
            known) and the last job seen, which is terminal unless the timeout ran out.
        """
        result = yield from self.cancel_job(job_id, cancel)
        job = yield from self.wait_until(job_id, is_terminal, timeout, interval)
        return complete_cancel_result(result, job), job


def with_metric_history(job: TrainingJob, history: list[MetricPoint]) -> TrainingJob:
    """``job`` with ``history``; each metric the job object lacks gets its latest value from it."""
    latest: dict[str, float] = {}
    for point in history:
        latest.update(point.values)
    return job.model_copy(update={"metric_history": history, "metrics": {**latest, **job.metrics}})


def history_from_checkpoints(checkpoints: list[Checkpoint]) -> list[MetricPoint]:
    """A per-epoch metric history from the metrics saved with each checkpoint (kind ``"epoch"``: the
    training and validation metrics at the end of that epoch), for platforms without a metrics
    endpoint. One point per epoch, the latest checkpoint of it; checkpoints without metrics or epoch
    are skipped."""
    by_epoch: dict[int, MetricPoint] = {}
    for c in checkpoints:
        if c.metrics and c.epoch is not None:
            by_epoch[c.epoch] = MetricPoint(step=c.step or 0, kind="epoch", epoch=c.epoch, values=c.metrics)
    return [by_epoch[epoch] for epoch in sorted(by_epoch)]


def is_terminal(job: TrainingJob) -> bool:
    return job.is_terminal


def is_stopping_or_terminal(job: TrainingJob) -> bool:
    return job.is_terminal or job.state.value == "stopping"
