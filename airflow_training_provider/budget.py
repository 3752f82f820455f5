"""The account budget: how many requests per hour a platform account allows, shared by every
request this process makes on one connection's account (polls, events, checkpoints, metrics,
program logs, creates, cancels, the reaper's lists).

Platforms meter their APIs per account, not per job: TensorOne documents 500 reads, 50 updates and
10 job creations an hour for its training API, and answers 429 to every call of the account once
they are spent (``docs/platforms/tensorone.md``, "Errors and rate limits"). SageMaker, PAI and
ModelArts throttle per account and region without publishing the numbers
(``docs/scale.md``, "The platform's quota").

* **Rates** (:class:`ApiRates`): reads, writes and creates per hour. A platform's descriptor carries
  the vendor's documented numbers where there are any; a connection's ``api_budget`` extra
  (``{"read_per_hour": 500, "write_per_hour": 50, "create_per_hour": 10}``) overrides them. A kind
  with no number is not paced: the budget only backs off when the platform throttles.
* **One budget per account and process** (:func:`account_budget`): keyed by the endpoint and a
  digest of the credentials. A process takes its share of the rates
  (``[training_provider] api_budget_share``, default 1.0): triggerers and workers share no store,
  so N processes waiting on one account each take 1/N (``docs/scale.md``).
* **Paced, never over**: reads are spread at the rate with a small burst (:class:`RequestPacer`, a
  generic cell rate algorithm); writes and creates, rare and urgent, may go at once up to the
  window's limit (:class:`WindowLimiter`). Either way no window of the platform's (an hour for
  TensorOne), however aligned, sees more than its limit.
* **Creates and cancels first**: writes and creates have their own limits and never queue behind
  reads, and the reads on a cancel's way (its state check, its confirm polls: ``urgent``) are sent
  at once and only counted; a throttle answer pauses the other reads of the account (its
  ``Retry-After``, else a backoff doubling from 1 s to 60 s), not the writes.
* **Stretched, not broken** (:meth:`AccountBudget.stretch`): pollers register their demand (reads
  per second); when the demand is more than the reads the budget can pace (less a fifth kept for
  the reads a poll cannot plan: events after a change, final views, confirms), every poll interval
  of the account is stretched by the same factor, so each job is still polled in turn.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from airflow_training_provider.errors import TransientPlatformError

RequestKind = Literal["read", "write", "create"]

CONFIG_SECTION = "training_provider"
SHARE_KEY = "api_budget_share"
#: the connection extra that declares the account's rates
EXTRA_KEY = "api_budget"
#: the part of the read rate the poll intervals are planned for: the rest is kept for the reads a
#: poll cannot plan (events read after a change, a job's final view, a cancel's confirm polls)
PLANNED_READ_SHARE = 0.8
#: seconds a throttle answer without ``Retry-After`` pauses the reads, doubling while they repeat
THROTTLE_BACKOFF = (1.0, 60.0)


class ApiRates(BaseModel):
    """Requests per hour an account allows, by kind (``None``: not documented, not paced).

    :ivar read_per_hour: reads (GET, describe, list, search: every status, event, log, checkpoint
        and metric read).
    :ivar write_per_hour: writes other than a create (a cancel / stop).
    :ivar create_per_hour: job creations.
    :ivar window_seconds: the window the platform counts requests in (an hour for TensorOne, whose
        ``X-RateLimit-Window`` says 3600): no window of this length, however aligned, gets more
        than its share of the hourly rate.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    read_per_hour: float | None = Field(None, gt=0)
    write_per_hour: float | None = Field(None, gt=0)
    create_per_hour: float | None = Field(None, gt=0)
    window_seconds: float = Field(3600.0, gt=0)

    def of(self, kind: RequestKind) -> float | None:
        """The hourly rate of ``kind``."""
        return {"read": self.read_per_hour, "write": self.write_per_hour, "create": self.create_per_hour}[
            kind
        ]

    def merged(self, override: Mapping[str, Any] | None) -> ApiRates:
        """These rates with a connection's ``api_budget`` extra over them (a key set to ``null``
        turns a documented rate off).

        :raises ValueError: ``override`` is not a mapping of the fields above to positive numbers
            (the message names the field and the connection extra)."""
        if override is None:
            return self
        if not isinstance(override, Mapping):
            raise ValueError(f"connection extra {EXTRA_KEY!r} must be a JSON object, got {override!r}")
        try:
            return ApiRates.model_validate({**self.model_dump(), **override})
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ValueError(
                f"connection extra {EXTRA_KEY!r}: {where}: {err['msg']} "
                f'(expected requests per hour, e.g. {{"read_per_hour": 500}})'
            ) from None


def budget_share() -> float:
    """``[training_provider] api_budget_share``: the part of each account's rates this process
    takes (0 < share ≤ 1; default 1).

    :raises ValueError: not a number in (0, 1]."""
    from airflow.sdk.configuration import conf  # not at import time: the platforms import this module

    value = conf.getfloat(CONFIG_SECTION, SHARE_KEY, fallback=1.0)
    if not 0 < value <= 1:
        raise ValueError(f"[{CONFIG_SECTION}] {SHARE_KEY} must be in (0, 1], got {value}")
    return value


class RequestPacer:
    """Requests at ``per_hour`` with a burst of a few, as a generic cell rate algorithm: each
    :meth:`reserve` books the next free slot (first come, first served) and says how long to wait
    for it. The burst (1–10 requests) is taken out of the rate, and as many again for urgent reads
    (:meth:`take_now`), so no window of ``window`` seconds, however aligned, holds more than
    ``per_hour`` allows in it while urgent reads stay within a burst per window.

    :param per_hour: requests per hour, > 0.
    :param window: seconds of the platform's counting window (3600: an hour).
    :param clock: monotonic seconds (a test passes a fake one)."""

    def __init__(self, per_hour: float, window: float = 3600.0, clock: Any = time.monotonic) -> None:
        per_window = per_hour * window / 3600.0
        self.burst = max(1.0, min(10.0, per_window * 0.05))
        # a burst's worth more is kept for urgent reads, sent at once past any backlog (take_now)
        self.per_second = max(per_window - 2 * self.burst, per_window * 0.5) / window
        self.interval = 1.0 / self.per_second
        self._tolerance = (self.burst - 1.0) * self.interval
        self._clock = clock
        self._tat = clock()  # the theoretical arrival time of the next request
        self._lock = threading.Lock()  # the sync hook's threads and the event loop may share it

    def reserve(self, not_before: float = 0.0) -> float:
        """Book a slot at or after ``not_before`` (monotonic seconds); seconds to wait for it."""
        with self._lock:
            now = self._clock()
            tat = max(self._tat, now, not_before)
            wait = max(0.0, tat - self._tolerance - now, not_before - now)
            self._tat = tat + self.interval
            return wait

    def take_now(self) -> None:
        """Count a request sent at once (an urgent one): the requests booked after it wait one
        slot more, so the rate holds over time (the planned share keeps room for these)."""
        with self._lock:
            self._tat = max(self._tat, self._clock()) + self.interval


class WindowLimiter:
    """At most ``per_hour`` × ``window`` / 3600 requests in any ``window`` seconds (a sliding log
    of the sends): writes and creates are rare and urgent, so they may all go at once as long as
    no window of the platform's, however aligned, gets more than its limit.

    :param clock: monotonic seconds (a test passes a fake one)."""

    def __init__(self, per_hour: float, window: float = 3600.0, clock: Any = time.monotonic) -> None:
        self.limit = max(1, int(per_hour * window / 3600.0))
        self.window = window
        self._clock = clock
        self._sends: deque[float] = deque()  # booked send times, oldest first (some in the future)
        self._lock = threading.Lock()

    def reserve(self, not_before: float = 0.0) -> float:
        """Book the first send time when the window has room; seconds to wait for it."""
        with self._lock:
            now = self._clock()
            at = max(now, not_before)
            if len(self._sends) >= self.limit:
                at = max(at, self._sends[-self.limit] + self.window)
            while self._sends and self._sends[0] <= now - self.window:
                self._sends.popleft()
            self._sends.append(at)
            return at - now

    def take_now(self) -> None:
        self.reserve()


@dataclass
class AccountBudget:
    """The budget of one account in this process: its rates (already this process's share), a
    pacer per paced kind, the reads' throttle pause and the pollers' registered demand.

    :ivar rates: requests per hour by kind, this process's share.
    :ivar name: how the task log names the account (the connection id and endpoint)."""

    rates: ApiRates
    name: str = ""
    _pacers: dict[str, RequestPacer | WindowLimiter] = field(default_factory=dict)
    _paused_until: float = 0.0
    _throttles: int = 0
    _demand: dict[int, float] = field(default_factory=dict)
    _ids: Any = field(default_factory=itertools.count)
    throttled_answers: int = 0

    def __post_init__(self) -> None:
        for kind in ("read", "write", "create"):
            rate = self.rates.of(kind)
            if rate:
                limiter = RequestPacer if kind == "read" else WindowLimiter
                self._pacers[kind] = limiter(rate, self.rates.window_seconds)

    @property
    def read_rate(self) -> float | None:
        """Reads per second this process may make on the account (``None``: not paced)."""
        pacer = self._pacers.get("read")
        return pacer.per_second if isinstance(pacer, RequestPacer) else None

    def delay(self, kind: RequestKind, urgent: bool = False) -> float:
        """Seconds to wait before sending a request of ``kind`` (its slot booked). Reads wait for
        their slot and out a throttle pause; an ``urgent`` read (a cancel's) does neither, it is
        only counted; writes and creates have their own limits and never queue behind reads."""
        pacer = self._pacers.get(kind)
        if kind == "read" and urgent:
            if pacer is not None:
                pacer.take_now()
            return 0.0
        not_before = self._paused_until if kind == "read" else 0.0
        if pacer is not None:
            return pacer.reserve(not_before)
        return max(0.0, not_before - time.monotonic())

    async def acquire(self, kind: RequestKind, urgent: bool = False) -> None:
        """Wait for a slot of ``kind`` (event loop)."""
        wait = self.delay(kind, urgent)
        if wait > 0:
            await asyncio.sleep(wait)

    def acquire_sync(self, kind: RequestKind, urgent: bool = False) -> None:
        """Wait for a slot of ``kind`` (a worker's thread)."""
        wait = self.delay(kind, urgent)
        if wait > 0:
            time.sleep(wait)

    def answered(self, error: BaseException | None, kind: RequestKind = "read") -> None:
        """Learn from an answer to a request of ``kind``: a throttled read pauses the reads (its
        ``Retry-After``, else a backoff doubling from 1 s to 60 s while throttles repeat); a success
        resets the backoff. A throttled write or create pauses nothing: platforms count them apart
        (TensorOne), and they are retried on their own."""
        if error is None:
            if self._throttles:
                self._throttles = 0
            return
        if not is_throttle(error):
            return
        if kind != "read":
            self.throttled_answers += 1
            return
        self.throttled_answers += 1
        self._throttles += 1
        low, high = THROTTLE_BACKOFF
        pause = getattr(error, "retry_after", None) or min(high, low * 2 ** (self._throttles - 1))
        self._paused_until = max(self._paused_until, time.monotonic() + pause)

    # -- poll demand and the stretch ------------------------------------------------------------
    def register(self, reads_per_second: float) -> int:
        """A poller's demand (reads per second at its asked interval); the handle to
        :meth:`unregister` or :meth:`update` it with."""
        handle = next(self._ids)
        self._demand[handle] = reads_per_second
        return handle

    def update(self, handle: int, reads_per_second: float) -> None:
        if handle in self._demand:
            self._demand[handle] = reads_per_second

    def unregister(self, handle: int) -> None:
        self._demand.pop(handle, None)

    @property
    def demand(self) -> float:
        """Reads per second the registered pollers ask for."""
        return sum(self._demand.values())

    def stretch(self) -> float:
        """The factor every poll interval on the account is multiplied by (≥ 1): the registered
        demand over the reads per second planned for polls (:data:`PLANNED_READ_SHARE` of the rate)."""
        rate = self.read_rate
        if rate is None or not self._demand:
            return 1.0
        return max(1.0, self.demand / (rate * PLANNED_READ_SHARE))

    def stretch_note(self, interval: float, pollers: int | None = None) -> str:
        """The task-log line saying an interval is stretched, with its numbers."""
        factor = self.stretch()
        rate = self.read_rate or 0.0
        jobs = f"{pollers} waiting jobs" if pollers is not None else f"{len(self._demand)} pollers"
        return (
            f"API budget of {self.name}: {jobs} polled every {interval:g} s would make "
            f"{self.demand * 3600:,.0f} reads/h; this process may make {rate * 3600:,.0f} reads/h "
            f"({PLANNED_READ_SHARE:.0%} of it planned for polls; [{CONFIG_SECTION}] {SHARE_KEY} = "
            f"{budget_share():g}), so each job is polled every {interval * factor:,.1f} s instead"
        )


def is_throttle(error: BaseException) -> bool:
    """Whether ``error`` is the platform's "too many requests" (any platform's shape: HTTP 429, or
    a transient error whose code names throttling: SageMaker ``ThrottlingException``, PAI
    ``Throttling.User``, ModelArts ``ModelArts.2799``, Together ``dynamic_request_limited``)."""
    if not isinstance(error, TransientPlatformError):
        return False
    if error.status == 429:
        return True
    code = (error.code or "").lower()
    return code in _THROTTLE_CODES or any(word in code for word in _THROTTLE_WORDS)


_THROTTLE_WORDS = ("thrott", "ratelimit", "rate_limit", "toomanyrequests", "request_limited")
_THROTTLE_CODES = frozenset({"modelarts.2799", "modelarts.4206", "apig.0308", "apigw.0308"})


_BUDGETS: dict[tuple[Any, ...], AccountBudget] = {}
_LOCK = threading.Lock()


def account_budget(key: tuple[Any, ...], rates: ApiRates, name: str) -> AccountBudget:
    """This process's budget of the account ``key`` (endpoint, credentials digest: never a
    secret), made with ``rates`` times :func:`budget_share` on first use. Connections that name
    the same account with different rates keep their own budgets (keyed by the rates too)."""
    full_key = (*key, rates)
    with _LOCK:
        budget = _BUDGETS.get(full_key)
        if budget is None:
            share = budget_share()
            shared = rates.model_copy(
                update={k: v * share for k, v in rates.model_dump(exclude={"window_seconds"}).items() if v}
            )
            budget = _BUDGETS[full_key] = AccountBudget(shared, name)
        return budget
