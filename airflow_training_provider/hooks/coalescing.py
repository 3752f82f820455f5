"""Coalesced polling: the waiting jobs of one connection in a triggerer process share one poller
that reads many jobs per call (``docs/scale.md``, "Coalesced polling").

Each trigger still runs its own wait (:func:`~airflow_training_provider.lifecycle.waiting.wait_for_job`):
its first status read is the job's own; every later one is marked
(:attr:`~airflow_training_provider.platforms.base.ApiRequest.status_of`) and the async driver asks
the connection's :class:`StatusPoller` instead of sending it. The poller reads every member's
status in rounds, one round every (stretched) interval, with the dialect's batch read
(:meth:`~airflow_training_provider.platforms.base.Dialect.status_batch_request`: SageMaker
``Search`` by name, 100 a page; PAI's, ModelArts', Together's, TensorOne's lists), and answers each
member from the freshest round. The member's own Get job is sent instead (one call) when:

* the job is not in the round's answer, or the round failed: read on its own this time;
* the row says the job ended and the platform's row is partial: its final view is read on its
  own (a whole-job row, SageMaker's or ModelArts', is that view already);
* the platform's row is partial (``Dialect.batch_rows_complete`` false) and says the job's state
  or status changed since its own last read: read on its own, then that view is answered
  until the row changes again;
* no round came within one and a half rounds (and 5 s), or the member's deadline came: its own
  read, so a deadline's cancel is never held up by the poller.

A state change at the platform is therefore seen at the first round after it. Rounds start early
by their read's time (at least a tenth of a round), so that is within one (stretched) interval.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from airflow_training_provider.budget import AccountBudget
from airflow_training_provider.errors import TrainingPlatformError, TransientPlatformError
from airflow_training_provider.lifecycle.operations import JobOperations
from airflow_training_provider.models import TrainingJob
from airflow_training_provider.platforms.base import ApiRequest, parse_answer
from airflow_training_provider.timestamps import parse_timestamp

if TYPE_CHECKING:
    from airflow_training_provider.hooks.training_async import AsyncTrainingPlatformClient

log = logging.getLogger(__name__)

#: seconds a member waits for a round beyond one and a half rounds before reading on its own
ROUND_GRACE = 5.0
#: the least part of a round by which the next one starts early (see ``_run``)
ROUND_LEAD = 0.1
#: most pages one group of a round reads (a list holding far more jobs than were asked for)
MAX_PAGES = 50


@dataclass
class _Member:
    interval: float
    client: AsyncTrainingPlatformClient | None = None  # its session stays open while it waits
    users: int = 1  # waits on this job (an operator's trigger and a sensor may watch one job)
    seen_at: float = -math.inf  # when (monotonic) its last answer was read: its own read, or a round's start
    own_key: tuple | None = None  # state, status, message of its last own read (partial rows)
    own_view: TrainingJob | None = None  # that read's job (partial rows: answered while unchanged)
    created_at: datetime | None = None


@dataclass
class _Round:
    started: float
    rows: dict[str, TrainingJob] | None  # None: the round failed
    asked: frozenset[str] = frozenset()  # the members it read (a later one waits for the next)
    done: asyncio.Event = field(default_factory=asyncio.Event)


class StatusPoller:
    """The coalesced poller of one connection (account and dialect) in one event loop.

    :param client: the client whose session and credentials the rounds use (the connection's shared
        session: every member's client has the same).
    :param budget: the account's budget (the rounds register their demand there).
    """

    def __init__(self, client: AsyncTrainingPlatformClient, budget: AccountBudget) -> None:
        self.dialect = client.dialect
        self.ops = JobOperations(client.dialect, client.connection.base_url)  # console links
        self.budget = budget
        self.members: dict[str, _Member] = {}
        self._latest = _Round(-math.inf, None)
        self._latest.done.set()
        self._next: _Round | None = None
        self._started = asyncio.Event()  # set (and replaced) when a round starts
        self._task: asyncio.Task | None = None
        self._demand = budget.register(0.0)
        self.rounds = 0
        self.calls = 0
        self.refused: str | None = None  # the batch read was refused for good: every member reads its own

    # -- membership ------------------------------------------------------------------------------
    def join(self, job_id: str, interval: float, client: AsyncTrainingPlatformClient) -> None:
        """Job ``job_id`` waits, polled every ``interval`` s, through ``client`` (whose session a
        round may use while the member waits)."""
        member = self.members.get(job_id)
        if member is not None:
            member.users += 1
            member.interval = min(member.interval, interval)
            return
        # answered from rounds that start after it joined: without a time, its wanted round would
        # be the never-run one before the first (no rows), and it would read its own for ever
        self.members[job_id] = _Member(interval, client, seen_at=time.monotonic())

    def leave(self, job_id: str) -> None:
        member = self.members.get(job_id)
        if member is not None:
            member.users -= 1
            if member.users <= 0:
                del self.members[job_id]

    def close(self) -> None:
        """The last member left: its rounds stop and its demand leaves the budget."""
        self.budget.unregister(self._demand)
        if self._task is not None:
            self._task.cancel()

    @property
    def client(self) -> AsyncTrainingPlatformClient:
        """A member's client: the rounds use the session of one that is still waiting."""
        return next(m.client for m in self.members.values() if m.client is not None)

    @property
    def cadence(self) -> float:
        """Seconds between rounds: the shortest interval asked, stretched to fit the budget."""
        if not self.members:
            return 1.0
        return min(m.interval for m in self.members.values()) * self.budget.stretch()

    # -- a member's status read ------------------------------------------------------------------
    async def status(self, job_id: str, max_wait: float | None = None) -> TrainingJob | None:
        """Member ``job_id``'s job from the freshest round after its last answer; ``None``: the
        driver sends the job's own read (see the module doc), then reports it with :meth:`own_read`.

        :param max_wait: seconds it may wait for a round at most (the time left to the member's
            deadline); then its own read."""
        member = self.members.get(job_id)
        if member is None or member.own_view is None or self.refused:  # the first read is its own
            return None
        wanted = member.seen_at + self.cadence / 2  # a round after its last answer, not that one
        round_: _Round | None = self._latest
        if self._latest.started < wanted or job_id not in self._latest.asked:
            round_ = await self._wait_round(wanted, max_wait)
            if round_ is not None and round_.rows is not None and job_id not in round_.asked:
                # it joined while that round was read: the next one reads it
                round_ = await self._wait_round(round_.started + 1e-6, max_wait)
        if round_ is None:  # none came in time: its own read
            return None
        member.seen_at = round_.started
        if round_.rows is None:  # it failed: its own read, and the next poll waits for a later round
            return None
        row = (round_.rows or {}).get(job_id)
        if row is None:
            return None
        if self.dialect.batch_rows_complete:  # the whole job, ended or not (its final view follows)
            return self.ops.linked(row)
        if row.is_terminal:
            return None
        if _key(row) != member.own_key:
            return None
        return member.own_view

    def own_read(self, job_id: str, job: TrainingJob) -> None:
        """The job's own read was made (:meth:`status` said ``None``): what a partial row is
        compared with (and answered with while it does not change), and the job's creation time
        (the list's time bound)."""
        member = self.members.get(job_id)
        if member is not None:
            member.seen_at = time.monotonic()
            member.own_key, member.own_view = _key(job), job
            if member.created_at is None and job.created_at is not None:  # aware UTC: min() below
                member.created_at = parse_timestamp(job.created_at)

    async def _wait_round(self, wanted: float, max_wait: float | None = None) -> _Round | None:
        """The first round started at or after ``wanted`` (monotonic), or ``None`` when none
        comes within one and a half rounds (and :data:`ROUND_GRACE`) or it failed."""
        self._ensure_running()
        limit = time.monotonic() + self.cadence * 1.5 + ROUND_GRACE
        if max_wait is not None:
            limit = min(limit, time.monotonic() + max_wait)
        while True:
            round_ = self._next or self._latest
            if round_.started >= wanted and round_.done.is_set():
                return round_
            left = limit - time.monotonic()
            if left <= 0:
                return None
            target = self._next
            try:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancel that lands as
                # the event is set (every member is woken at once when a round starts), and the
                # cancelled wait went on as a member (found: a triggerer's cancelled waits polling on)
                async with asyncio.timeout(left):
                    if target is None:  # between rounds: woken once when the next one starts
                        await self._started.wait()
                        continue
                    await target.done.wait()
            except TimeoutError:
                return None
            if target.started >= wanted:
                return target

    # -- the rounds ------------------------------------------------------------------------------
    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="training-status-poller")

    async def _run(self) -> None:
        try:
            while self.members and not self.refused:
                started = time.monotonic()
                asked = list(self.members)
                self._next = _Round(started, None, frozenset(asked))
                self._started.set()  # wakes the members waiting between rounds, once
                self._started = asyncio.Event()
                rows, pages = await self._read_round(asked)
                self._next.rows = rows
                self._latest, self._next = self._next, None
                self._latest.done.set()
                self.rounds += 1
                base = min((m.interval for m in self.members.values()), default=1.0)
                self.budget.update(self._demand, pages / base)
                # the next round starts early by this one's duration (at least a tenth of a
                # round, at most half), so that its answers are ready one cadence after this
                # round's: a change that missed this round is seen within one interval, the read's
                # time and the member's delivery included
                took = min(self.cadence / 2, max(self.cadence * ROUND_LEAD, time.monotonic() - started))
                await asyncio.sleep(max(0.0, started + self.cadence - took - time.monotonic()))
        finally:
            self.budget.update(self._demand, 0.0)
            if self._next is not None:  # cancelled mid-round: nobody waits for it in vain
                self._next.done.set()
                self._next = None

    async def _read_round(self, job_ids: list[str]) -> tuple[dict[str, TrainingJob] | None, int]:
        """Every member's row, by job id, and the pages read; ``None``: a read failed (each
        member then reads its own). The groups (``Dialect.batch_size`` jobs each: SageMaker's 100
        names a ``Search``) are read at once, so a round takes about one read, not one per group:
        the time a state change waits beyond the interval."""
        size = max(1, self.dialect.batch_size)
        created = [m.created_at for m in self.members.values() if m.created_at is not None]
        since = min(created) if created else None
        groups = [job_ids[i : i + size] for i in range(0, len(job_ids), size)]
        results = await asyncio.gather(*(self._read_group(g, since) for g in groups))
        pages = sum(n for _, n in results)
        if any(rows is None for rows, _ in results):
            return None, pages
        return {job_id: job for rows, _ in results for job_id, job in (rows or {}).items()}, pages

    async def _read_group(
        self, group: list[str], since: datetime | None
    ) -> tuple[dict[str, TrainingJob] | None, int]:
        """One group's pages: its rows (``None``: a read failed) and the pages read."""
        rows: dict[str, TrainingJob] = {}
        wanted = set(group)
        page: str | None = None
        pages = 0
        for _ in range(MAX_PAGES):
            request = self.dialect.status_batch_request(group, page, since)
            if request is None:
                return None, pages
            request = _bounded(request, self.cadence)
            pages += 1
            self.calls += 1
            try:
                body = await self.client.call(request)
                batch = parse_answer(request, partial(self.dialect.parse_status_batch, page=page), body)
            except TransientPlatformError:
                return None, pages
            except TrainingPlatformError as exc:  # refused (no permission, not served): for good
                self.refused = f"{request.method} {request.path}: {exc}"
                log.warning(
                    "%s: the batch status read was refused (%s); every waiting job is polled on its own",
                    self.dialect.name,
                    exc,
                )
                return None, pages
            for job in batch.jobs:
                rows[job.id] = job
            wanted -= rows.keys()
            # no more pages than the jobs still missing would cost on their own
            if not wanted or batch.next_page is None or pages >= len(wanted):
                break
            page = batch.next_page
        return rows, pages


def _key(job: TrainingJob) -> tuple:
    """What a partial row is compared on: state and status (not the message: a list row may lack
    one the job's own read has, as Together's lacks a stopping job's cancel message)."""
    return (job.state, job.raw_status)


def _bounded(request: ApiRequest, cadence: float) -> ApiRequest:
    """A round's read retried within one round at most (then the members read their own)."""
    return replace(request, budget=min(60.0, max(1.0, cadence)))


_POLLERS: dict[tuple[Any, ...], StatusPoller] = {}


def poller_for(
    key: tuple[Any, ...], client: AsyncTrainingPlatformClient, budget: AccountBudget
) -> StatusPoller:
    """The event loop's poller for connection ``key`` (made with ``client`` for its first member)."""
    full = (id(asyncio.get_running_loop()), *key)
    poller = _POLLERS.get(full)
    if poller is None:
        poller = _POLLERS[full] = StatusPoller(client, budget)
    return poller


def release_poller(key: tuple[Any, ...], job_id: str) -> None:
    """Member ``job_id`` leaves; the last one ends the poller."""
    full = (id(asyncio.get_running_loop()), *key)
    poller = _POLLERS.get(full)
    if poller is None:
        return
    poller.leave(job_id)
    if not poller.members:
        del _POLLERS[full]
        poller.close()
