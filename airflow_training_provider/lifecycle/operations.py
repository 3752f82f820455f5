"""The job API and the one polling loop, written once as sans-IO operations.

An operation is a generator. It yields what it needs done and gets the answer back:

* an :class:`~airflow_training_provider.platforms.base.ApiRequest` → the driver sends it and
  ``send``\\ s back the decoded JSON body, or ``throw``\\ s in the
  :class:`~airflow_training_provider.errors.TrainingPlatformError` the call ended in;
* :class:`Sleep` → the driver waits that many seconds (the worker's driver wakes up early when the
  task is killed);
* :class:`Progress`, :class:`NewEvents` and :class:`NewLogLines` → reports for the task log (the
  trigger saves its event and log cursors after writing them).

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
from datetime import datetime
from functools import partial
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from airflow_training_provider.errors import (
    JobAlreadyExistsError,
    JobNotFoundError,
    JobStateConflictError,
    MalformedResponseError,
    TrainingPlatformError,
    TransientPlatformError,
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
from airflow_training_provider.platforms.base import ApiRequest, Dialect, LogPage, parse_answer
from airflow_training_provider.task_log import TaskLog

if TYPE_CHECKING:
    from airflow_training_provider.lifecycle.guards import GuardStop, GuardWatch

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` before going on.

    :ivar poll: the wait between two polls of a job: a driver pacing the account's budget may
        stretch it (:meth:`~airflow_training_provider.budget.AccountBudget.stretch`), never past
        ``limit`` seconds (the deadline)."""

    seconds: float
    poll: bool = False
    limit: float | None = None


@dataclass(frozen=True)
class Progress:
    """A job state just polled (the driver logs it when it changed)."""

    job: TrainingJob


@dataclass(frozen=True)
class NewEvents:
    """Platform events not reported yet, and the cursor (events reported in all) after them."""

    events: tuple[JobEvent, ...]
    cursor: int


@dataclass(frozen=True)
class NewLogLines:
    """Lines the job's training program printed, not reported yet, and the log cursor after them
    (:class:`~airflow_training_provider.platforms.base.LogPage`; may move with no lines: a log
    stream found)."""

    lines: tuple[str, ...]
    cursor: str | None


#: program-log pages read per poll while the job runs (the rest at the next poll)
LOG_PAGES_PER_POLL = 5
#: program-log pages read once the job ended, before the wait returns (its last lines: a traceback)
LOG_PAGES_AT_END = 50
#: seconds a job's last program lines may take to become readable after it ended (CloudWatch Logs
#: takes them in with a lag): a job that ended more recently is read once more after them
LOG_SETTLE_SECONDS = 3.0


@dataclass
class LogFollow:
    """A wait that follows the job's program log (``stream_logs``): where it is in it.

    :ivar cursor: the dialect's cursor after the last line reported (``None``: from the start).
    :ivar paused: read nothing for now (a trigger that could not resolve the secrets to mask the
        lines with yet); the cursor stays, so no line is lost.
    """

    cursor: str | None = None
    paused: bool = False


Step = ApiRequest | Sleep | Progress | NewEvents | NewLogLines
Operation = Generator[Step, Any, T]
"""A sans-IO operation returning ``T``."""


@dataclass(frozen=True)
class _Read(Generic[T]):
    """One read of a job's data: the request, and how its answer (the decoded JSON body) becomes
    the value (a dialect parser, called through :func:`parse_answer`: whatever it raises on another
    shape is a :class:`MalformedResponseError`)."""

    request: ApiRequest
    parse: Callable[[Any], T]


@dataclass(frozen=True)
class Auxiliary:
    """A kind of auxiliary read: what a wait reads besides the job's status, and what is lost
    while it is unreadable (for the one warning per job and kind).

    :ivar name: the kind, as a key (``events``).
    :ivar subject: how the warning names it (``Events``, ``The metric history``).
    :ivar plural: whether ``subject`` takes "are".
    :ivar consequence: what the task does without it.
    """

    name: str
    subject: str
    plural: bool
    consequence: str


EVENTS = Auxiliary(
    "events", "Events", True, "the task log will not show platform events nor a failure's reason from them"
)
CHECKPOINTS = Auxiliary("checkpoints", "Checkpoints", True, "the task's result will not list them")
METRIC_HISTORY = Auxiliary(
    "metric history",
    "The metric history",
    False,
    "the result will have none and early stopping cannot judge the job meanwhile",
)
PROGRAM_LOG = Auxiliary(
    "program log",
    "The program's log",
    False,
    "its lines are not written to the task log until it is readable again",
)
START_TIME = Auxiliary(
    "start time",
    "The start time",
    False,
    "the guards count its training time from when a poll first saw it running",
)


def _decoded(raw: bytes | str) -> Any:
    """A 2xx body as JSON (``None`` when empty, as the transport decodes it)."""
    return json.loads(raw) if raw else None


def _raw(body: bytes | str) -> bytes | str:
    """An :attr:`ApiRequest.reader` that takes a 2xx body as it is: an auxiliary read parses it
    itself (:func:`parse_answer`), so a malformed body is its to judge (not a failed call retried
    for the outage budget)."""
    return body


def unreadable_reason(request: ApiRequest, exc: BaseException) -> str:
    """Why ``request`` gave nothing readable, in the platform's words and without blaming the
    credentials: ``403 Forbidden on GET /v1/fine-tunes/ft-1/events: <the platform's message>``,
    ``malformed answer to GET …: <what did not parse>``, or the last transient error."""
    where = f"{request.method} {request.path}"
    if isinstance(exc, MalformedResponseError):
        return exc.message
    if isinstance(exc, TrainingPlatformError):
        if exc.status is None or isinstance(exc, TransientPlatformError):
            return f"{where} kept failing: {exc.message}"
        try:
            phrase = f" {HTTPStatus(exc.status).phrase}"
        except ValueError:
            phrase = ""
        code = f" {exc.code}" if exc.code and exc.code.replace(" ", "") != phrase.replace(" ", "") else ""
        said = f": {exc.message}" if exc.message and exc.message != f"HTTP {exc.status}" else ""
        return f"{exc.status}{phrase}{code} on {where}{said}"
    first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    return f"malformed answer to {where}: {first}"


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
        self._unreadable: set[tuple[str, str]] = set()  # (job id, kind) warned about
        #: where the operations' own warnings go; a trigger points it at its task's log (the
        #: triggerer writes only the trigger's own logger into the task log)
        self.log: TaskLog = log
        self.warned_at = 0.0  # time.monotonic() of its last warning (a trigger lets it reach the log)

    def _optional(
        self,
        kind: Auxiliary,
        job_id: str,
        read: _Read[T] | None,
        not_yet: bool = False,
        budget: float | None = None,
    ) -> Operation[T | None]:
        """An auxiliary read: its value, or ``None`` when it is refused (401/403/404 on its
        endpoint), its answer is malformed, or it kept failing — warned about once per job and
        kind, never raised: only the status read decides a wait.

        It is retried like any one-shot call (``RetryPolicy.max_attempts``), never for the outage
        budget: an endpoint that stays down must not hold up the polls, nor the deadline checked
        after them; it is read again at the next poll.

        :param not_yet: a "not found" answer means "not there yet" (a log stream the job has not
            opened): ``None`` without a warning.
        :param budget: seconds to retry it instead (``0``: one attempt, a program-log page)."""
        if read is None:
            return None
        request = replace(read.request, budget=budget, reader=_raw)
        try:
            raw = yield request
            return parse_answer(request, lambda body: read.parse(_decoded(body)), raw)
        except TrainingPlatformError as exc:  # MalformedResponseError included
            if not_yet and isinstance(exc, JobNotFoundError):
                return None
            if (job_id, kind.name) not in self._unreadable:
                self._unreadable.add((job_id, kind.name))
                self.warned_at = time.monotonic()
                self.log.warning(
                    "%s of job %s %s not readable (%s): %s; status polling goes on",
                    kind.subject,
                    job_id,
                    "are" if kind.plural else "is",
                    unreadable_reason(request, exc),
                    kind.consequence,
                )
            return None

    def _read(self, read: _Read[T], budget: float | None = None) -> Operation[T]:
        """A read whose failure is the caller's: a body the parser cannot read is a failed call
        (transient, like a 5xx), as for the status read.

        :raises TrainingPlatformError: the call failed."""
        return (yield replace(read.request, budget=budget, reader=lambda raw: read.parse(_decoded(raw))))

    def _job_read(self, job_id: str) -> _Read[TrainingJob]:
        return _Read(
            self.dialect.get_request(job_id), lambda body: self._linked(self.dialect.parse_job(body))
        )

    def _events_read(self, job_id: str) -> _Read[list[JobEvent]] | None:
        """Where the job's events are: the job object, the events endpoint, or nowhere (``None``)."""
        if self.dialect.capabilities.events_in_job:
            return _Read(self.dialect.get_request(job_id), lambda body: self.dialect.parse_job(body).events)
        request = self.dialect.events_request(job_id)
        return None if request is None else _Read(request, self.dialect.parse_events)

    def _checkpoints_read(self, job_id: str, from_job: bool = False) -> _Read[list[Checkpoint]]:
        """The checkpoints endpoint, or (without one, or ``from_job``) the job object's list."""
        request = None if from_job else self.dialect.checkpoints_request(job_id)
        if request is None:
            return _Read(
                self.dialect.get_request(job_id), lambda body: self.dialect.parse_job(body).checkpoints
            )
        return _Read(request, self.dialect.parse_checkpoints)

    def _history_read(self, job_id: str) -> _Read[list[MetricPoint]]:
        """The metrics endpoint, else one point per checkpointed epoch (:func:`history_from_checkpoints`)."""
        request = self.dialect.metrics_request(job_id)
        if request is not None:
            return _Read(request, self.dialect.parse_metrics)
        checkpoints = self._checkpoints_read(job_id, from_job=self.dialect.capabilities.checkpoints_in_job)
        return _Read(checkpoints.request, lambda body: history_from_checkpoints(checkpoints.parse(body)))

    def _call(self, request: ApiRequest, budget: float | None = None) -> Operation[Any]:
        return (yield request if budget is None else replace(request, budget=budget))

    def linked(self, job: TrainingJob) -> TrainingJob:
        """``job`` (just parsed, this object's) with its console link."""
        return self._linked(job)

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
        :raises MalformedResponseError: the create answer does not read as a job (the create may
            have landed: it is not re-sent).
        """
        request = replace(self.dialect.create_request(spec), kind="create")
        try:
            body = yield from self._call(request)
        except JobAlreadyExistsError:
            job_id = self.dialect.created_job_id(spec)
            if job_id is None or not tags:
                raise
            existing = yield from self._tagged_job(job_id)
            if existing is None or not set(tags) <= set(existing.tags):
                raise
            return existing
        return self._linked(parse_answer(request, self.dialect.parse_created, body))

    def _tagged_job(self, job_id: str) -> Operation[TrainingJob | None]:
        """Job ``job_id`` with its tags (where the job object lacks them, through the list call)."""
        request = self.dialect.tagged_job_request(job_id)
        if request is None:
            return (yield from self.get_job(job_id))
        listed = parse_answer(request, self.dialect.parse_list, (yield from self._call(request)))
        found = [j for j in listed if j.id == job_id]
        return self._linked(found[0]) if found else None

    def get_job(
        self, job_id: str, budget: float | None = None, urgent: bool = False
    ) -> Operation[TrainingJob]:
        """Job ``job_id`` now. ``budget``: seconds to ride out transient errors (outage budget);
        ``urgent``: a read on a cancel's way (:attr:`ApiRequest.urgent`).

        :raises JobNotFoundError: the platform does not know the job.
        """
        request = replace(
            self.dialect.get_request(job_id), budget=budget, reader=self._read_job, urgent=urgent
        )
        return (yield request)

    def _read_job(self, raw: bytes | str) -> TrainingJob:
        """A Get job answer (raw body) as the job; read in the transport, so a 2xx body that is not
        a job is a failed call (transient), like a 5xx."""
        return self._linked(self.dialect.parse_job(json.loads(raw)))

    def list_events(self, job_id: str, budget: float | None = None) -> Operation[list[JobEvent]]:
        """The job's platform events, oldest first (``[]`` for platforms without events).

        :raises TrainingPlatformError: the read failed (a wait reads them as an auxiliary read
            instead, which never fails it)."""
        read = self._events_read(job_id)
        return [] if read is None else (yield from self._read(read, budget))

    def list_checkpoints(self, job_id: str, budget: float | None = None) -> Operation[list[Checkpoint]]:
        """The job's checkpoints, oldest first (the checkpoints endpoint, else the job object's).

        :raises TrainingPlatformError: the read failed."""
        return (yield from self._read(self._checkpoints_read(job_id), budget))

    def final_view(self, job: TrainingJob, events: list[JobEvent] | None = None) -> Operation[TrainingJob]:
        """A terminal job completed with what its object lacks: checkpoints (from the checkpoints
        endpoint where the job does not list them), its metric history (the metrics endpoint, else
        the metrics saved with each checkpoint) and the failure reason from its ``events`` (read
        here when ``None``).

        Each of them is an auxiliary read (:meth:`_optional`): refused, malformed or failing, it is
        left out (warned once per job and kind), never a failure of a finished job's task."""
        caps = self.dialect.capabilities
        if not caps.checkpoints_in_job and not job.checkpoints:
            read = self._checkpoints_read(job.id)
            if checkpoints := (yield from self._optional(CHECKPOINTS, job.id, read)):
                job = job.model_copy(update={"checkpoints": checkpoints})
        request = self.dialect.metrics_request(job.id)
        if request is not None and not job.metric_history:
            read = _Read(request, self.dialect.parse_metrics)
            history = yield from self._optional(METRIC_HISTORY, job.id, read)
            if history is not None:
                job = with_metric_history(job, history)
        elif not job.metric_history:  # no metrics endpoint: the metrics saved with each checkpoint
            job = with_metric_history(job, history_from_checkpoints(job.checkpoints))
        if events is None and caps.events:
            events = yield from self._optional(EVENTS, job.id, self._events_read(job.id))
        return explain_failure(job, events or [], self.dialect)

    def snapshot(self, job_id: str, budget: float | None = None) -> Operation[TrainingJob]:
        """Job ``job_id`` now, as complete as the platform tells, running or not: what a person
        watching it wants (the job, its checkpoints, metric history and events; the failure reason
        once it failed). Costs up to four calls; only the first (the job) may fail it, the others
        are auxiliary reads (:meth:`final_view`).

        :raises JobNotFoundError: the platform does not know the job."""
        job = yield from self.get_job(job_id, budget)
        events: list[JobEvent] = []
        if self.dialect.capabilities.events:
            events = job.events or (
                (yield from self._optional(EVENTS, job_id, self._events_read(job_id))) or []
            )
        job = yield from self.final_view(job, events)
        return job.model_copy(update={"events": events})

    def list_jobs(
        self, tags: list[str], created_after: datetime | None = None
    ) -> Operation[list[TrainingJob]]:
        """Jobs carrying every one of ``tags`` (platforms with ``capabilities.list_jobs``), created
        after ``created_after`` where the platform's list is bounded in time (PAI; see
        :meth:`Dialect.list_request`).

        Filtered here too: a platform may ignore the tag filter of its list call. A listed row that
        does not read as a job is left out (:meth:`Dialect.parse_list`, logged).

        :raises TrainingPlatformError: the list call failed, or its answer is not a list (malformed,
            transient)."""
        request = self.dialect.list_request(tags, created_after)
        jobs = yield from self._read(_Read(request, self.dialect.parse_list))
        return [self._linked(j) for j in jobs if set(tags) <= set(j.tags)]

    def probe(self) -> Operation[None]:
        """One cheap authenticated call (:meth:`Dialect.probe_request`): proves the platform is
        reachable and accepts the credentials. :raises TrainingPlatformError: it does not."""
        yield from self._call(self.dialect.probe_request())

    def cancel_job(self, job_id: str, cancel: CancelRequest) -> Operation[CancelResult]:
        """Ask the platform to cancel. A job that already ended, or is already stopping, is reported
        and not cancelled again (unless ``cancel.force``); that is not an error, and neither is a
        409 (or the platform's equivalent) that turns out to mean the same.

        :raises MalformedResponseError: the cancel's answer does not read (the cancel may have
            landed)."""
        cancel = self.dialect.effective_cancel(cancel)
        if not cancel.force:
            try:  # one attempt: a throttled or failing state check must not hold the cancel back
                job = yield from self.get_job(job_id, budget=0.0, urgent=True)
            except TransientPlatformError:
                job = None
            if job is not None and (skipped := no_cancel_needed(job)):
                return skipped
        request = replace(self.dialect.cancel_request(job_id, cancel), kind="write")
        try:
            body = yield from self._call(request)
        except JobStateConflictError:
            result = no_cancel_needed((yield from self.get_job(job_id, urgent=True)))
            if result is None:
                raise
            return result
        return parse_answer(request, lambda answer: self.dialect.parse_cancel(job_id, answer), body)

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
        logs: LogFollow | None = None,
        coalesce: bool = False,
        events_every: float | None = None,
        urgent: bool = False,
    ) -> Operation[tuple[TrainingJob, int | None]]:
        """Poll job ``job_id`` every ``interval`` s until ``until(job)`` holds or the clock reaches
        ``deadline`` (absolute, ``clock`` seconds); each poll is reported (:class:`Progress`).

        With an event ``cursor`` (platforms with events), new events are reported too
        (:class:`NewEvents`). A job that ended is completed by :meth:`final_view`. The deadline is
        checked *after* a poll, so a job that ended just before it is seen as ended.

        With a guard ``watch``, the guards are asked about each running job (:meth:`_guard`); when
        one fires the poll returns at once, the guard's stop in ``watch.fired``.

        Following the program log (``logs``, platforms with ``capabilities.program_logs``), each
        poll reports its new lines (:class:`NewLogLines`, at most :data:`LOG_PAGES_PER_POLL` pages,
        read within one ``interval`` and never past the ``deadline``; once the job ended, its tail
        before it returns: :meth:`log_tail`) and moves ``logs.cursor`` past them.

        :param coalesce: every status read is marked :attr:`ApiRequest.status_of`, so a driver
            with a batch read may answer it from there (it sends the first one: the job's own read
            proves the job exists and gives its whole view).
        :param events_every: read the events endpoint only when the job's state, status or message
            changed since the last read, once it ended, and at least every ``events_every`` seconds
            (``None``: at every poll). The events themselves are still each reported once.
        :param urgent: polls on a cancel's way (its confirm): its reads are :attr:`ApiRequest.urgent`
            and its sleeps are never stretched by the budget.
        :returns: the last job seen and the event cursor after it.
        :raises TransientPlatformError: polls kept failing for longer than ``budget`` seconds.
        """
        caps = self.dialect.capabilities
        streaming = cursor is not None and caps.events
        # built once for the loop; the answer is read straight into the job by _read_poll
        request = replace(
            self.dialect.get_request(job_id), budget=budget, reader=self._read_poll, urgent=urgent
        )
        status = replace(request, status_of=job_id) if coalesce else request
        events_key: tuple | None = None
        events_at = float("-inf")
        while True:
            job = yield status
            events = None
            if streaming and cursor is not None:  # (streaming implies a cursor)
                if caps.events_in_job:
                    events = job.events
                elif self._events_due(job, events_every, events_key, events_at):
                    # unreadable: none this poll, the cursor kept (they are reported once readable,
                    # tried again at the next poll)
                    read = self._events_read(job_id)
                    events = yield from self._optional(EVENTS, job_id, read)
                    if events is not None:
                        events_key, events_at = (job.state, job.raw_status, job.message), self.clock()
                    events = events or []
                if events is not None and len(events) > cursor:
                    yield NewEvents(tuple(events[cursor:]), len(events))
                    cursor = len(events)
            if logs is not None:  # bounded: the next poll (and the deadline's cancel) must not wait on it
                bound = self.clock() + interval
                if deadline is not None and not job.is_terminal:
                    bound = min(bound, deadline)
                if job.is_terminal:
                    yield from self.log_tail(job, logs, interval)
                else:
                    yield from self.follow_log(job, logs, LOG_PAGES_PER_POLL, bound)
            if job.is_terminal:
                job = yield from self.final_view(job, events)
            yield Progress(job)
            if watch is not None and not job.is_terminal:
                watch.fired = yield from self._guard(job, watch, interval)
                if watch.fired is not None:
                    return job, cursor
            now = self.clock()
            if until(job) or (deadline is not None and now >= deadline):
                return job, cursor
            job = events = None  # not kept while sleeping: thousands of triggers wait at once
            if deadline is None:
                yield Sleep(interval, poll=not urgent)
            else:
                left = max(0.0, deadline - now)
                yield Sleep(min(interval, left), poll=not urgent, limit=left)

    def _events_due(
        self, job: TrainingJob, every: float | None, last_key: tuple | None, last_at: float
    ) -> bool:
        """Whether a poll reads the events endpoint (see :meth:`poll`'s ``events_every``)."""
        if every is None or job.is_terminal:
            return True
        return (job.state, job.raw_status, job.message) != last_key or self.clock() - last_at >= every

    def follow_log(
        self, job: TrainingJob, logs: LogFollow, pages: int, until: float | None = None
    ) -> Operation[bool]:
        """Read up to ``pages`` pages of ``job``'s program log from ``logs.cursor`` and report the
        new lines at once (:class:`NewLogLines`: one report, one cursor save), ``logs.cursor`` then
        after them. An auxiliary read: a page that is refused, malformed or "not there yet" ends
        the read with what was read before it and the cursor kept there (warned once per job,
        "not there yet" not at all); it never fails the wait nor counts against its outage budget.

        Each page is one attempt (a failed one is read again at the next poll), and with ``until``
        (absolute ``clock`` seconds: the next poll, the deadline) no page starts after it and each
        call may take only the time left, so a logs endpoint that hangs does not hold up the status
        polls nor the deadline's cancel. A cursor this version cannot use (another format: an older
        version's, or corrupted) is warned about and the log read from its beginning.

        :returns: whether the read stopped at the end of what is readable now (``False``: the
            ``pages`` or the time ran out with more to read)."""
        if not self.dialect.capabilities.program_logs or logs.paused:
            return True
        complete = True
        lines: list[str] = []
        at = logs.cursor
        for _ in range(pages):
            left = None if until is None else until - self.clock()
            if left is not None and left <= 0:
                complete = False
                break
            request, at = self._logs_request(job, at)
            if request is None:  # nothing to read yet (no task, no stream)
                break
            request = replace(request, timeout=left)
            read: _Read[LogPage] = _Read(request, partial(self.dialect.parse_logs, cursor=at))
            page = yield from self._optional(PROGRAM_LOG, job.id, read, not_yet=True, budget=0.0)
            if page is None:
                break
            lines.extend(page.lines)
            at = page.cursor
            if not page.more:
                break
        else:
            complete = False
        if lines or at != logs.cursor:
            yield NewLogLines(tuple(lines), at)
            logs.cursor = at
        return complete

    def log_tail(self, job: TrainingJob, logs: LogFollow, bound: float) -> Operation[None]:
        """Read ended (or stopped) ``job``'s program log to its end: up to :data:`LOG_PAGES_AT_END`
        pages (its last lines: a traceback, a checkpoint written on the stop), each read given at
        most ``bound`` seconds. A job that ended less than :data:`LOG_SETTLE_SECONDS` ago (its
        ``updated_at``; unknown: just now) is read once more after them, for lines the platform's
        log service takes in late. Lines left unread then are not dropped silently: one warning says
        where the rest is (the job's console page)."""
        if logs.paused:
            return
        complete = yield from self.follow_log(job, logs, LOG_PAGES_AT_END, self.clock() + bound)
        ago = self.clock() - job.updated_at.timestamp() if job.updated_at else 0.0
        if complete and ago < LOG_SETTLE_SECONDS:
            yield Sleep(LOG_SETTLE_SECONDS - max(0.0, ago))
            complete = yield from self.follow_log(job, logs, LOG_PAGES_AT_END, self.clock() + bound)
        if not complete:
            self.warned_at = time.monotonic()
            self.log.warning(
                "stream_logs: job %s printed more than the task log took at its end (%d pages); the "
                "rest is in its log on the platform: %s",
                job.id,
                LOG_PAGES_AT_END,
                job.console_url or f"{self.dialect.name}'s console",
            )

    def _logs_request(self, job: TrainingJob, cursor: str | None) -> tuple[ApiRequest | None, str | None]:
        """The dialect's request for ``job``'s log page at ``cursor``, and the cursor it is at: a
        cursor the dialect cannot use (whatever reading it raises) is warned about and replaced by
        ``None``, the log's beginning (so warned once: the cursor saved next is a new one)."""
        if cursor is not None:
            try:
                return self.dialect.logs_request(job, cursor), cursor
            except Exception as exc:  # noqa: BLE001 - another format: an older version's, or corrupted
                self.warned_at = time.monotonic()
                self.log.warning(
                    "The program log's saved position for job %s is not one this version reads (%s: %s); "
                    "its log is read again from the beginning, so lines may be written twice",
                    job.id,
                    type(exc).__name__,
                    exc,
                )
        return self.dialect.logs_request(job, None), None

    def _guard(self, job: TrainingJob, watch: GuardWatch, interval: float) -> Operation[GuardStop | None]:
        """Ask the guards about running ``job``, reading what they need that a poll does not give:
        when the job started training (once) and its metric history (when it reports a new epoch).
        Both are auxiliary reads: one that fails is warned about once and tried again at the next
        poll (until then the guards judge without it); it never ends the wait."""
        history = None
        if watch.needs_start(job):
            full = yield from self._optional(START_TIME, job.id, self._job_read(job.id))
            if full is not None:
                watch.note_start(full)
        if watch.needs_history(job):
            history = yield from self._optional(METRIC_HISTORY, job.id, self._history_read(job.id))
        return watch.check(job, interval, history)

    def metric_history(self, job_id: str, budget: float | None = None) -> Operation[list[MetricPoint]]:
        """The job's metric history so far, oldest first: the platform's metrics endpoint, else
        one point per checkpointed epoch from the metrics saved with its checkpoints.

        :raises TrainingPlatformError: the read failed."""
        return (yield from self._read(self._history_read(job_id), budget))

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
        """Poll until ``until(job)`` or ``timeout`` seconds passed; the last job seen. Its polls
        wait for a cancel to take (a confirm), so they are urgent (:attr:`ApiRequest.urgent`)."""
        job, _ = yield from self.poll(job_id, until, interval, self.clock() + timeout, budget, urgent=True)
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
