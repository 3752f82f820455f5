"""Async hook: the trigger's way to a training platform, and the async driver of the job lifecycle.

Connection handling comes from :class:`~airflow.providers.http.hooks.http.HttpAsyncHook` (headers
and options from the connection extras). :meth:`AsyncTrainingPlatformHook.client` resolves the
connection once and opens ONE ``aiohttp`` session that a trigger keeps for its whole run, not one
per poll.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from airflow.providers.common.compat.connection import get_async_connection
from airflow.providers.http.hooks.http import HttpAsyncHook
from airflow.sdk.bases.hook import BaseHook
from tenacity import AsyncRetrying

from airflow_training_provider.errors import PlatformAuthError, TransientPlatformError
from airflow_training_provider.hooks.connection import PlatformConnection
from airflow_training_provider.hooks.job_api import JobApi
from airflow_training_provider.hooks.transport import RetryPolicy, decode_response, prepare_request
from airflow_training_provider.lifecycle.operations import JobOperations, Operation, Sleep, advance
from airflow_training_provider.platforms.base import ApiRequest


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

    async def aget_connection(self, conn_id: str) -> Any:
        """For the HTTP provider's session set-up: our connection without its credentials."""
        if conn_id == self.conn_id and self._platform_connection is not None:
            return self._platform_connection.transport_connection()
        return await BaseHook.aget_connection(conn_id)

    @asynccontextmanager
    async def client(self) -> AsyncIterator[AsyncTrainingPlatformClient]:
        """Resolve the connection once and yield a client bound to one HTTP session."""
        conn = await get_async_connection(self.conn_id)
        # in a thread: a cloud platform may create a session here (e.g. AWS assume-role calls STS)
        self._platform_connection = await asyncio.to_thread(PlatformConnection.resolve, conn)
        config = await self.config()  # headers and options from the extras, via aget_connection above
        timeout = aiohttp.ClientTimeout(total=self.retry_policy.call_timeout)
        options: dict[str, Any] = {}
        if config.extra_options.get("proxy"):
            options["proxy"] = config.extra_options["proxy"]
        if config.extra_options.get("verify_ssl") is False:
            options["ssl"] = False
        async with aiohttp.ClientSession(timeout=timeout, headers=config.headers or None) as session:
            yield AsyncTrainingPlatformClient(session, self._platform_connection, self.retry_policy, options)


class AsyncTrainingPlatformClient(JobApi):
    """The job API over one open ``aiohttp`` session (its methods return awaitables); made by
    :meth:`AsyncTrainingPlatformHook.client`."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        connection: PlatformConnection,
        retry_policy: RetryPolicy,
        request_options: dict[str, Any] | None = None,
    ) -> None:
        self.session = session
        self.connection = connection
        self.dialect = connection.dialect
        self.retry_policy = retry_policy
        self.ops = JobOperations(connection.dialect, connection.base_url)
        self._options = request_options or {}

    async def drive(self, operation: Operation[Any], report: Callable[[Any], Any] | None = None) -> Any:
        """Run a lifecycle operation to its result (see ``TrainingPlatformHook.drive``); ``report``
        may be a coroutine function."""
        reply: Any = None
        error: BaseException | None = None
        while True:
            done, step = advance(operation, reply, error)
            if done:
                return step
            reply = error = None
            if isinstance(step, ApiRequest):
                try:
                    reply = await self.call(step)
                except Exception as exc:  # noqa: BLE001 - the operation decides what it means
                    error = exc
            elif isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
            elif report is not None and inspect.isawaitable(outcome := report(step)):
                await outcome

    async def call(self, request: ApiRequest) -> Any:
        """Send ``request`` with retries; return the decoded JSON body."""
        try:
            async for attempt in AsyncRetrying(**self.retry_policy.tenacity_kwargs(request)):
                with attempt:
                    return await self._send(request)
        except PlatformAuthError as exc:
            raise self.connection.explain_auth_error(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send(self, request: ApiRequest) -> Any:
        conn = self.connection
        if conn.credentials.source is None:
            http = prepare_request(conn.dialect, conn.base_url, request, conn.credentials)
        else:  # refreshable credentials may call out to refresh while signing: not on the event loop
            http = await asyncio.to_thread(
                prepare_request, conn.dialect, conn.base_url, request, conn.credentials
            )
        try:
            async with self.session.request(
                http.method, http.url, data=http.body or None, headers=http.headers, **self._options
            ) as response:
                text = await response.text()
                return decode_response(conn.dialect, request, response.status, response.headers, text)
        except aiohttp.ClientConnectorError as exc:
            raise TransientPlatformError(f"cannot connect: {exc.os_error}", sent=False) from exc
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise TransientPlatformError(f"request failed: {exc.__class__.__name__} {exc}") from exc
