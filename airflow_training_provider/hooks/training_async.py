"""Async hook: the trigger's way to a training platform.

Connection handling comes from :class:`~airflow.providers.http.hooks.http.HttpAsyncHook` (base URL,
headers and options from the connection extras). :meth:`AsyncTrainingPlatformHook.client` opens ONE
``aiohttp`` session that a trigger keeps for its whole run, not one per poll.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from airflow.providers.common.compat.connection import get_async_connection
from airflow.providers.http.hooks.http import HttpAsyncHook
from tenacity import AsyncRetrying

from airflow_training_provider.errors import JobStateConflictError, TransientPlatformError
from airflow_training_provider.events import explain_failure
from airflow_training_provider.hooks.transport import RetryPolicy, decode_response
from airflow_training_provider.models import (
    CancelRequest,
    CancelResult,
    Checkpoint,
    JobEvent,
    TrainingJob,
    no_cancel_needed,
)
from airflow_training_provider.platforms import Credentials, Dialect, get_dialect
from airflow_training_provider.platforms.base import ApiRequest


class AsyncTrainingPlatformHook(HttpAsyncHook):
    """Async access to the platform behind ``conn_id``.

    :param conn_id: Airflow connection id; its type picks the dialect.
    :param retry_policy: timeouts and backoff (:class:`RetryPolicy`).
    """

    conn_name_attr = "conn_id"
    default_conn_name = "tensorone_default"

    def __init__(self, conn_id: str, retry_policy: RetryPolicy | None = None) -> None:
        super().__init__(method="GET", http_conn_id=conn_id, retry_limit=1)
        self.conn_id = conn_id
        self.retry_policy = retry_policy or RetryPolicy()

    @asynccontextmanager
    async def client(self) -> AsyncIterator[AsyncTrainingPlatformClient]:
        """Resolve the connection once and yield a client bound to one HTTP session."""
        conn = await get_async_connection(self.conn_id, hook=self)
        dialect = get_dialect(conn.conn_type)
        config = await self.config()
        base_url = config.base_url if conn.host else dialect.default_base_url
        credentials = Credentials(login=conn.login, password=conn.password, extra=conn.extra_dejson)
        timeout = aiohttp.ClientTimeout(total=self.retry_policy.call_timeout)
        async with aiohttp.ClientSession(timeout=timeout, headers=config.headers or None) as session:
            yield AsyncTrainingPlatformClient(session, dialect, base_url, credentials, self.retry_policy)


class AsyncTrainingPlatformClient:
    """Job API over one open ``aiohttp`` session; made by :meth:`AsyncTrainingPlatformHook.client`."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        dialect: Dialect,
        base_url: str,
        credentials: Credentials,
        retry_policy: RetryPolicy,
    ) -> None:
        self.session = session
        self.dialect = dialect
        self.base_url = base_url.rstrip("/")
        self._credentials = credentials
        self.retry_policy = retry_policy

    async def call(self, request: ApiRequest, budget: float | None = None) -> Any:
        """Send ``request`` with retries (for ``budget`` seconds if given); return the JSON body."""
        async for attempt in AsyncRetrying(**self.retry_policy.tenacity_kwargs(request, budget)):
            with attempt:
                return await self._send(request)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send(self, request: ApiRequest) -> Any:
        headers = self.dialect.auth_headers(request, self._credentials)
        try:
            async with self.session.request(
                request.method,
                self.base_url + request.path,
                json=request.json,
                params=request.params,
                headers=headers,
            ) as response:
                text = await response.text()
                return decode_response(self.dialect, request, response.status, response.headers, text)
        except aiohttp.ClientConnectorError as exc:
            raise TransientPlatformError(f"cannot connect: {exc.os_error}", sent=False) from exc
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise TransientPlatformError(f"request failed: {exc.__class__.__name__} {exc}") from exc

    async def get_job(self, job_id: str, budget: float | None = None) -> TrainingJob:
        job = self.dialect.parse_job(await self.call(self.dialect.get_request(job_id), budget))
        if not job.console_url:
            job = job.model_copy(update={"console_url": self.dialect.console_url(self.base_url, job.id)})
        return job

    async def list_events(self, job_id: str, budget: float | None = None) -> list[JobEvent]:
        request = self.dialect.events_request(job_id)
        if request is None:
            return []
        return self.dialect.parse_events(await self.call(request, budget))

    async def list_checkpoints(self, job_id: str) -> list[Checkpoint]:
        request = self.dialect.checkpoints_request(job_id)
        if request is None:
            return (await self.get_job(job_id)).checkpoints
        return self.dialect.parse_checkpoints(await self.call(request))

    async def final_view(self, job: TrainingJob, events: list[JobEvent]) -> TrainingJob:
        """A terminal job completed with what its object lacks: checkpoints (from the checkpoints
        endpoint where the job does not list them) and the failure reason from its events."""
        if not self.dialect.capabilities.checkpoints_in_job and not job.checkpoints:
            job = job.model_copy(update={"checkpoints": await self.list_checkpoints(job.id)})
        return explain_failure(job, events, self.dialect)

    async def cancel_job(self, job_id: str, cancel: CancelRequest) -> CancelResult:
        """Cancel, like :meth:`TrainingPlatformHook.cancel_job`: a job that already ended or is
        already stopping is reported and not cancelled again (unless ``cancel.force``)."""
        cancel = self.dialect.effective_cancel(cancel)
        if not cancel.force and (skipped := no_cancel_needed(await self.get_job(job_id))):
            return skipped
        try:
            return self.dialect.parse_cancel(
                job_id, await self.call(self.dialect.cancel_request(job_id, cancel))
            )
        except JobStateConflictError:
            result = no_cancel_needed(await self.get_job(job_id))
            if result is None:
                raise
            return result
