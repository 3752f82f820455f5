"""Async hook: the trigger's way to a training platform, and the async driver of the job lifecycle.

Connection handling comes from :class:`~airflow.providers.http.hooks.http.HttpAsyncHook` (headers
and options from the connection extras). :meth:`AsyncTrainingPlatformHook.client` resolves the
connection once per trigger run. The ``aiohttp`` session is shared by every trigger of the
triggerer process that talks to the same endpoint with the same credentials and options
(:func:`shared_session`), and keeps its connections alive longer than a poll interval: a poll
reuses a connection instead of opening one (a TLS handshake per poll against a real API).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
from airflow.providers.common.compat.connection import get_async_connection
from airflow.providers.http.hooks.http import HttpAsyncHook
from airflow.sdk.bases.hook import BaseHook
from tenacity import AsyncRetrying
from yarl import URL

from airflow_training_provider.budget import AccountBudget
from airflow_training_provider.errors import PlatformAuthError, TransientPlatformError
from airflow_training_provider.hooks.coalescing import StatusPoller, poller_for, release_poller
from airflow_training_provider.hooks.connection import PlatformConnection
from airflow_training_provider.hooks.job_api import JobApi
from airflow_training_provider.hooks.transport import PreparedRequests, RetryPolicy, decode_response
from airflow_training_provider.lifecycle.operations import JobOperations, Operation, Sleep, advance
from airflow_training_provider.platforms.base import ApiRequest, Dialect

#: seconds an idle connection is kept for the next poll (aiohttp's default, 15 s, is shorter than a
#: poll interval); a connection the server closed meanwhile is re-opened by aiohttp for a GET.
KEEPALIVE_SECONDS = 120.0


@dataclass
class _Shared:
    session: aiohttp.ClientSession
    users: int = 0


_SHARED: dict[tuple[Any, ...], _Shared] = {}


def _acquire(
    key: tuple[Any, ...], make: Callable[[], aiohttp.ClientSession]
) -> tuple[tuple[Any, ...], _Shared]:
    """Join the session for ``key`` in this event loop (made by ``make()`` for its first user);
    returns what to :func:`_release` it with."""
    key = (id(asyncio.get_running_loop()), *key)
    entry = _SHARED.get(key)
    if entry is None or entry.session.closed:
        entry = _SHARED[key] = _Shared(make())
    entry.users += 1
    return key, entry


async def _release(key: tuple[Any, ...], entry: _Shared) -> None:
    """Leave ``entry``; its last user closes its session."""
    entry.users -= 1
    if entry.users == 0:
        if _SHARED.get(key) is entry:
            del _SHARED[key]
        await entry.session.close()


@asynccontextmanager
async def shared_session(key: tuple[Any, ...], make: Callable[[], aiohttp.ClientSession]):
    """The session for ``key`` in this event loop, made by ``make()`` for its first user and closed
    when its last user leaves. ``key`` must tell apart everything the session carries (endpoint,
    credentials, headers, options)."""
    key, entry = _acquire(key, make)
    try:
        yield entry.session
    finally:
        await _release(key, entry)


class AsyncTrainingPlatformHook(HttpAsyncHook):
    """Async access to the platform behind ``conn_id``.

    :param conn_id: Airflow connection id; its type picks the platform.
    :param retry_policy: timeouts and backoff (:class:`RetryPolicy`).
    """

    conn_name_attr = "conn_id"

    def __init__(self, conn_id: str, retry_policy: RetryPolicy | None = None) -> None:
        super().__init__(method="GET", http_conn_id=conn_id, retry_limit=1)
        self.conn_id = conn_id
        self.retry_policy = retry_policy or RetryPolicy()
        self._platform_connection: PlatformConnection | None = None

    # an instance method where BaseHook has a classmethod: the HTTP provider asks the hook itself
    async def aget_connection(self, conn_id: str) -> Any:  # type: ignore[override]
        """For the HTTP provider's session set-up: our connection without its credentials."""
        if conn_id == self.conn_id and self._platform_connection is not None:
            return self._platform_connection.transport_connection()
        return await BaseHook.aget_connection(conn_id)

    def client(self) -> _OpenClient:
        """``async with hook.client() as client``: resolve the connection once and give a client
        bound to the shared HTTP session (:func:`shared_session`), left when the block ends."""
        return _OpenClient(self)

    async def _open(self) -> tuple[AsyncTrainingPlatformClient, tuple[tuple[Any, ...], _Shared]]:
        """The client and its session key (to release). What resolving needed (the Airflow
        connection, the HTTP provider's config) is dropped on return: a waiting trigger keeps
        only the client."""
        conn = await get_async_connection(self.conn_id)
        # in a thread: a cloud platform may create a session here (e.g. AWS assume-role calls STS)
        self._platform_connection = await asyncio.to_thread(PlatformConnection.resolve, conn)
        config = await self.config()  # headers and options from the extras, via aget_connection above
        timeout = aiohttp.ClientTimeout(total=self.retry_policy.call_timeout)
        options: dict[str, Any] = {}
        extra_options = config.extra_options or {}
        if extra_options.get("proxy"):
            options["proxy"] = extra_options["proxy"]
        if extra_options.get("verify_ssl") is False:
            options["ssl"] = False
        headers = dict(config.headers or {})
        platform = self._platform_connection

        def make() -> aiohttp.ClientSession:
            return aiohttp.ClientSession(
                timeout=timeout,
                headers=headers or None,
                connector=aiohttp.TCPConnector(keepalive_timeout=KEEPALIVE_SECONDS),
                cookie_jar=aiohttp.DummyCookieJar(),  # shared: no cookie of one trigger reaches another
            )

        key = (
            platform.base_url,
            platform.credentials.fingerprint(),  # a digest: no secret in the key
            tuple(sorted(headers.items())),
            tuple(sorted(options.items())),
            self.retry_policy.call_timeout,
        )
        shared = _acquire(key, make)
        client = AsyncTrainingPlatformClient(
            shared[1].session, platform, self.retry_policy, options, platform.budget(), platform.account_key
        )
        return client, shared


class _OpenClient:
    """The ``async with`` of :meth:`AsyncTrainingPlatformHook.client`: a plain object rather than
    a generator, so that a waiting trigger holds two small objects instead of a suspended frame."""

    __slots__ = ("_hook", "_shared", "_client")

    def __init__(self, hook: AsyncTrainingPlatformHook) -> None:
        self._hook: AsyncTrainingPlatformHook | None = hook
        self._shared: tuple[tuple[Any, ...], _Shared] | None = None
        self._client: AsyncTrainingPlatformClient | None = None

    async def __aenter__(self) -> AsyncTrainingPlatformClient:
        assert self._hook is not None, "a hook.client() context is entered once"
        self._client, self._shared = await self._hook._open()
        self._hook = None
        return self._client

    async def __aexit__(self, *exc_info: object) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.leave()
        if self._shared is not None:
            shared, self._shared = self._shared, None
            await _release(*shared)


class AsyncTrainingPlatformClient(JobApi):
    """The job API over one open ``aiohttp`` session (its methods return awaitables); made by
    :meth:`AsyncTrainingPlatformHook.client`.

    Every request waits for its slot in the account's ``budget`` (reads paced, writes and creates
    first; :mod:`~airflow_training_provider.budget`) and tells it how it was answered; a poll's
    sleep is stretched by the budget's factor. A client that :meth:`coalesce`-s a job answers its
    status reads from the connection's shared poller (:mod:`~airflow_training_provider.hooks.coalescing`).
    """

    ops: JobOperations

    def __init__(
        self,
        session: aiohttp.ClientSession,
        connection: PlatformConnection,
        retry_policy: RetryPolicy,
        request_options: dict[str, Any] | None = None,
        budget: AccountBudget | None = None,
        key: tuple[Any, ...] = (),
    ) -> None:
        self.budget = budget
        self._key = key
        self.poller: StatusPoller | None = None
        self._members: list[str] = []
        self._demand: int | None = None
        self.session = session
        self.connection = connection
        self.dialect = connection.dialect
        self.retry_policy = retry_policy
        self.ops = JobOperations(connection.dialect, connection.base_url)
        self._options = request_options or {}
        self._prepare = PreparedRequests(
            connection.dialect, connection.base_url, connection.credentials, connection.service_urls
        )
        self._url: tuple[str, URL] = ("", URL())  # the last URL sent, parsed: a poll sends the same one

    # -- coalescing and the budget's demand ----------------------------------------------------------
    def can_coalesce(self, needs_full_rows: bool = False) -> bool:
        """Whether the platform has a batch status read (and, when ``needs_full_rows``, one whose
        rows are whole jobs: a guard judges every poll's metrics)."""
        dialect = self.dialect
        if type(dialect).status_batch_request is Dialect.status_batch_request:
            return False
        return dialect.batch_rows_complete or not needs_full_rows

    def coalesce(self, job_id: str, interval: float) -> None:
        """Answer job ``job_id``'s status reads from the connection's shared poller (polling every
        ``interval`` s); left when the client's ``async with`` ends."""
        if self.budget is None:
            return
        self.poller = poller_for((*self._key, self.dialect.name), self, self.budget)
        self.poller.join(job_id, interval, self)
        self._members.append(job_id)

    def plan(self, reads_per_second: float) -> None:
        """Register this client's planned reads per second in the account's budget (its polls at
        the asked interval), which stretches every interval when the account's pollers ask for more
        than it allows; unregistered when the client's ``async with`` ends."""
        if self.budget is None:
            return
        if self._demand is None:
            self._demand = self.budget.register(reads_per_second)
        else:
            self.budget.update(self._demand, reads_per_second)

    def leave(self) -> None:
        """Leave the shared poller and the budget's plan (the end of the client's ``async with``)."""
        for job_id in self._members:
            release_poller((*self._key, self.dialect.name), job_id)
        self._members.clear()
        self.poller = None
        if self.budget is not None and self._demand is not None:
            self.budget.unregister(self._demand)
            self._demand = None

    async def drive(self, operation: Operation[Any], report: Callable[[Any], Any] | None = None) -> Any:
        """Run a lifecycle operation to its result (see ``TrainingPlatformHook.drive``); ``report``
        may return an awaitable (awaited before the operation goes on) or ``None``.

        A status read marked :attr:`ApiRequest.status_of` goes to the shared poller (when the job
        :meth:`coalesce`-s), except right after a sleep that reached the deadline; a poll's sleep
        is stretched by the budget's factor (never past its deadline), said once in the log."""
        reply: Any = None
        error: BaseException | None = None
        at_deadline = False  # the last sleep reached the deadline: the next read is urgent and its own
        left: float | None = None  # seconds from the end of the last poll sleep to the deadline
        noted = False
        while True:
            done, step = advance(operation, reply, error)
            if done:
                return step
            reply = error = None
            if isinstance(step, ApiRequest):
                if at_deadline:  # (once: the read right after that sleep)
                    at_deadline = False
                    step = replace(step, urgent=True, status_of=None)
                try:
                    if step.status_of is not None and self.poller is not None:
                        reply = await self._status(step, self.poller, left)
                    else:
                        reply = await self.call(step)
                except Exception as exc:  # noqa: BLE001 - the operation decides what it means
                    error = exc
            elif isinstance(step, Sleep):
                seconds = step.seconds
                if step.poll and self.budget is not None and (factor := self.budget.stretch()) > 1:
                    seconds = seconds * factor if step.limit is None else min(seconds * factor, step.limit)
                    if not noted:
                        noted = True
                        self.ops.warned_at = time.monotonic()
                        self.ops.log.warning("%s", self.budget.stretch_note(step.seconds))
                if step.poll and self.poller is not None and not self.poller.refused:
                    # coalesced: the poller's rounds keep the time; its next status read waits for
                    # the next round (at most until the deadline), so a change is seen when a round
                    # reads it, not a whole interval of its own after the last answer
                    at_deadline = False
                    left = step.limit
                    continue
                at_deadline = step.limit is not None and seconds >= step.limit
                left = None if step.limit is None else max(0.0, step.limit - seconds)
                await asyncio.sleep(seconds)
            elif report is not None and (outcome := report(step)) is not None:
                await outcome

    async def _status(self, request: ApiRequest, poller: StatusPoller, max_wait: float | None) -> Any:
        """A waiting job's status from the shared poller (waiting at most ``max_wait`` s: the time
        to its deadline), or its own read when the poller says so."""
        job_id = request.status_of
        assert job_id is not None
        deadline = None if max_wait is None else time.monotonic() + max_wait
        job = await poller.status(job_id, max_wait)
        if job is None and deadline is not None and time.monotonic() >= deadline - 0.05:
            request = replace(request, urgent=True, status_of=None)  # at the deadline: as it is, at once
        if job is None:
            job = await self.call(request)
            poller.own_read(job_id, job)
        return job

    async def call(self, request: ApiRequest) -> Any:
        """Send ``request``; return the decoded JSON body. The happy call is one send: retries
        (backoff, ``Retry-After``, the outage budget) are built only after a transient failure —
        building them per call would cost a poll more than the HTTP request does."""
        try:
            try:
                return await self._send(request)
            except TransientPlatformError as exc:
                first: TransientPlatformError | None = exc
            # tenacity's first attempt re-raises that failure: its rules decide what follows
            async for attempt in AsyncRetrying(**self.retry_policy.tenacity_kwargs(request)):
                with attempt:
                    if first is not None:
                        error, first = first, None
                        raise error
                    return await self._send(request)
        except PlatformAuthError as exc:
            raise self.connection.explain_auth_error(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send(self, request: ApiRequest) -> Any:
        budget = self.budget
        if budget is None:
            return await self._send_now(request)
        await budget.acquire(request.kind, request.urgent)  # type: ignore[arg-type]
        try:
            answer = await self._send_now(request)
        except TransientPlatformError as exc:
            budget.answered(exc, request.kind)  # type: ignore[arg-type]
            raise
        budget.answered(None)
        return answer

    async def _send_now(self, request: ApiRequest) -> Any:
        conn = self.connection
        if conn.credentials.source is None:
            http = self._prepare(request)
        else:  # refreshable credentials may call out to refresh while signing: not on the event loop
            http = await asyncio.to_thread(self._prepare, request)
        if self._url[0] != http.url:  # yarl parses a str URL on every request; a URL object is used as is
            self._url = (http.url, URL(http.url))
        options = self._options
        if request.timeout is not None:  # a read bounded by the next poll (a program-log page)
            options = {**options, "timeout": aiohttp.ClientTimeout(total=self.retry_policy.timeout(request))}
        try:
            async with self.session.request(
                http.method, self._url[1], data=http.body or None, headers=http.headers, **options
            ) as response:
                raw = await response.read()  # bytes: JSON is UTF-8, no charset sniffing per poll
                return decode_response(conn.dialect, request, response.status, response.headers, raw)
        except aiohttp.ClientConnectorError as exc:
            raise TransientPlatformError(f"cannot connect: {exc.os_error}", sent=False) from exc
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise TransientPlatformError(f"request failed: {exc.__class__.__name__} {exc}") from exc
