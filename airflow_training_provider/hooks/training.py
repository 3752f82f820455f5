"""Sync hook: the worker's way to a training platform, and the sync driver of the job lifecycle.

Built on :class:`~airflow.providers.http.hooks.http.HttpHook` for the HTTP session (proxies, TLS,
headers from the connection extras). The platform comes from the connection's type, so one hook
serves every platform; a hook class per platform (``TensorOneHook``, ``TogetherHook``...) is
generated from the platform descriptors for Airflow's connection types.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from typing import Any

import requests
from airflow.providers.http.hooks.http import HttpHook
from tenacity import Retrying

from airflow_training_provider.errors import PlatformAuthError, TrainingPlatformError, TransientPlatformError
from airflow_training_provider.hooks.connection import PlatformConnection
from airflow_training_provider.hooks.job_api import JobApi
from airflow_training_provider.hooks.transport import PreparedRequests, RetryPolicy, decode_response
from airflow_training_provider.lifecycle.operations import JobOperations, Operation, Sleep, advance
from airflow_training_provider.platforms import PLATFORMS
from airflow_training_provider.platforms.base import ApiRequest, Dialect
from airflow_training_provider.platforms.descriptor import PlatformDescriptor


class WaitInterrupted(Exception):
    """The driver's ``stop`` event was set while an operation slept (the task is being killed)."""


class TrainingPlatformHook(JobApi, HttpHook):
    """Talk to the training platform behind connection ``conn_id`` (any supported type).

    :param conn_id: Airflow connection id; its type (``tensorone``...) picks the platform.
    :param retry_policy: timeouts and backoff; defaults to :class:`RetryPolicy()`.

    Every call has a timeout (``retry_policy.call_timeout`` seconds) and retries transient errors.
    Errors: :class:`~airflow_training_provider.errors.TrainingPlatformError` and subclasses; a
    refused credential names the connection to fix.
    """

    conn_name_attr = "conn_id"
    hook_name = "Training platform"

    def __init__(self, conn_id: str, retry_policy: RetryPolicy | None = None) -> None:
        super().__init__(method="GET", http_conn_id=conn_id)
        self.conn_id = conn_id
        self.retry_policy = retry_policy or RetryPolicy()
        self._session: requests.Session | None = None

    @cached_property
    def _prepare(self) -> PreparedRequests:
        conn = self.platform_connection
        return PreparedRequests(conn.dialect, conn.base_url, conn.credentials, conn.service_urls)

    def sibling(self, retry_policy: RetryPolicy) -> TrainingPlatformHook:
        """A new hook on the same connection with its own HTTP session and ``retry_policy``,
        reusing the connection this hook has already read (no secrets-backend call: safe in a
        signal handler)."""
        hook = type(self)(self.conn_id, retry_policy)
        if "platform_connection" in self.__dict__:
            hook.__dict__["platform_connection"] = self.platform_connection
        return hook

    @cached_property
    def platform_connection(self) -> PlatformConnection:
        """The connection, read once (:class:`PlatformConnection`)."""
        return PlatformConnection.resolve(super().get_connection(self.conn_id))

    # an instance method where BaseHook has a classmethod: the HTTP provider asks the hook itself
    def get_connection(self, conn_id: str) -> Any:  # type: ignore[override]
        """For the HTTP provider's session set-up: our connection without its credentials."""
        if conn_id == self.conn_id:
            return self.platform_connection.transport_connection()
        return super().get_connection(conn_id)

    @property
    def dialect(self) -> Dialect:
        return self.platform_connection.dialect

    @cached_property
    def ops(self) -> JobOperations:
        return JobOperations(self.dialect, self.platform_connection.base_url)

    @property
    def session(self) -> requests.Session:
        """One ``requests`` session for the hook's life (connection pooling)."""
        if self._session is None:
            self._session = self.get_conn()
        return self._session

    def test_connection(self) -> tuple[bool, str]:
        """Airflow's connection Test button (needs ``[core] test_connection = Enabled``): one cheap
        authenticated call, with one attempt and a 10 s timeout.

        :returns: ``(True, what was reached)`` or ``(False, the platform's own error)`` — a refused
            key reads "authentication failed: …" and names what to check.
        """
        probe = TrainingPlatformHook(self.conn_id, RetryPolicy(call_timeout=10.0, max_attempts=1))
        try:
            probe.drive(probe.ops.probe())
        except PlatformAuthError as exc:
            return False, f"authentication failed: {exc}"
        except TransientPlatformError as exc:
            conn = probe.platform_connection
            return False, f"{conn.platform.display_name} at {conn.base_url} could not be reached: {exc}"
        except (TrainingPlatformError, ValueError) as exc:  # ValueError: a connection field is missing
            return False, str(exc)
        conn = probe.platform_connection
        return True, f"{conn.platform.display_name} at {conn.base_url} accepted the credentials"

    # -- the driver --------------------------------------------------------------------------------
    def drive(
        self,
        operation: Operation[Any],
        report: Callable[[Any], Any] | None = None,
        stop: threading.Event | None = None,
    ) -> Any:
        """Run a lifecycle operation to its result: send its requests, sleep its sleeps, hand its
        reports to ``report``.

        :param stop: when set during a sleep, the operation is abandoned and
            :class:`WaitInterrupted` raised (how ``on_kill`` makes a worker-side wait stop).
        """
        reply: Any = None
        error: BaseException | None = None
        at_deadline = False  # the last sleep reached the deadline: the next read is urgent
        while True:
            done, step = advance(operation, reply, error)
            if done:
                return step
            reply = error = None
            if isinstance(step, ApiRequest):
                if at_deadline:
                    step, at_deadline = replace(step, urgent=True), False
                try:
                    reply = self.call(step)
                except Exception as exc:  # noqa: BLE001 - the operation decides what it means
                    error = exc
            elif isinstance(step, Sleep):
                seconds = self._stretched(step)
                at_deadline = step.limit is not None and seconds >= step.limit
                if stop is None:
                    time.sleep(seconds)
                elif stop.wait(seconds):
                    operation.close()
                    raise WaitInterrupted()
            elif report is not None:
                report(step)

    def call(self, request: ApiRequest) -> Any:
        """Send ``request``; return the decoded JSON body. Retries (backoff, ``Retry-After``, the
        outage budget) are built only after a transient failure: the happy call is one send."""
        try:
            try:
                return self._send(request)
            except TransientPlatformError as exc:
                first: TransientPlatformError | None = exc
            # tenacity's first attempt re-raises that failure: its rules decide what follows
            for attempt in Retrying(**self.retry_policy.tenacity_kwargs(request)):
                with attempt:
                    if first is not None:
                        error, first = first, None
                        raise error
                    return self._send(request)
        except PlatformAuthError as exc:
            raise self.platform_connection.explain_auth_error(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _stretched(self, step: Sleep) -> float:
        """A poll's sleep stretched by the account budget's factor (never past its deadline)."""
        if not step.poll:
            return step.seconds
        factor = self.platform_connection.budget().stretch()
        if factor <= 1:
            return step.seconds
        return step.seconds * factor if step.limit is None else min(step.seconds * factor, step.limit)

    def _send(self, request: ApiRequest) -> Any:
        """One send, in its slot of the account's budget (reads paced, writes and creates first;
        :mod:`~airflow_training_provider.budget`), which learns how it was answered."""
        budget = self.platform_connection.budget()
        budget.acquire_sync(request.kind, request.urgent)  # type: ignore[arg-type]
        try:
            answer = self._send_now(request)
        except TransientPlatformError as exc:
            budget.answered(exc, request.kind)  # type: ignore[arg-type]
            raise
        budget.answered(None)
        return answer

    def _send_now(self, request: ApiRequest) -> Any:
        session = self.session
        conn = self.platform_connection
        http = self._prepare(request)
        try:
            response = session.request(
                http.method,
                http.url,
                data=http.body,
                headers=http.headers,
                timeout=self.retry_policy.timeout(request),
            )
        except requests.exceptions.ConnectionError as exc:
            refused = isinstance(exc, requests.exceptions.ConnectTimeout) or "Connection refused" in str(exc)
            raise TransientPlatformError(
                f"connection error: {exc.__class__.__name__}", sent=not refused
            ) from exc
        except requests.exceptions.Timeout as exc:
            raise TransientPlatformError(
                f"timed out after {self.retry_policy.timeout(request):.1f} s"
            ) from exc
        return decode_response(conn.dialect, request, response.status_code, response.headers, response.text)


def _platform_hook(platform: PlatformDescriptor) -> type[TrainingPlatformHook]:
    """The hook class Airflow registers for ``platform``'s connection type."""

    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return platform.ui_field_behaviour()

    def __init__(self, conn_id: str = platform.default_conn_id, retry_policy: RetryPolicy | None = None):
        TrainingPlatformHook.__init__(self, conn_id, retry_policy)

    return type(
        platform.hook_class_name,
        (TrainingPlatformHook,),
        {
            "__module__": __name__,
            "__doc__": f"{platform.display_name} training jobs (connection type ``{platform.conn_type}``).",
            "__init__": __init__,
            "conn_type": platform.conn_type,
            "hook_name": platform.display_name,
            "default_conn_name": platform.default_conn_id,
            "get_ui_field_behaviour": classmethod(get_ui_field_behaviour),
        },
    )


PLATFORM_HOOKS: dict[str, type[TrainingPlatformHook]] = {c: _platform_hook(p) for c, p in PLATFORMS.items()}
"""Connection type → its generated hook class (``TensorOneHook``, ``TogetherHook``...)."""
globals().update({hook.__name__: hook for hook in PLATFORM_HOOKS.values()})
