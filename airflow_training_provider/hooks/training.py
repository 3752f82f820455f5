"""Sync hook: the operator's and ``on_kill``'s way to a training platform.

Built on :class:`~airflow.providers.http.hooks.http.HttpHook` for connection handling (base URL from
host/schema/port, proxies, TLS and headers from the connection extras). The platform dialect is
chosen from the connection's type, so one hook serves every platform.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cached_property
from typing import Any

import requests
from airflow.providers.http.hooks.http import HttpHook
from tenacity import Retrying

from airflow_training_provider.connections import ui_field_behaviour
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


class TrainingPlatformHook(HttpHook):
    """Talk to the training platform behind connection ``conn_id`` (any supported type).

    :param conn_id: Airflow connection id; its type (``tensorone``...) picks the dialect.
    :param retry_policy: timeouts and backoff; defaults to :class:`RetryPolicy()`.

    Every call has a timeout (``retry_policy.call_timeout`` seconds) and retries transient errors.
    Errors: :class:`~airflow_training_provider.errors.TrainingPlatformError` and subclasses.
    """

    conn_name_attr = "conn_id"
    default_conn_name = "tensorone_default"
    conn_type = "tensorone"
    hook_name = "Training platform"

    def __init__(self, conn_id: str = default_conn_name, retry_policy: RetryPolicy | None = None) -> None:
        super().__init__(method="GET", http_conn_id=conn_id)
        self.conn_id = conn_id
        self.retry_policy = retry_policy or RetryPolicy()
        self._session: requests.Session | None = None

    @cached_property
    def connection(self):
        return self.get_connection(self.conn_id)

    @cached_property
    def dialect(self) -> Dialect:
        return get_dialect(self.connection.conn_type)

    @cached_property
    def credentials(self) -> Credentials:
        conn = self.connection
        return Credentials(login=conn.login, password=conn.password, extra=conn.extra_dejson)

    @property
    def session(self) -> requests.Session:
        """One ``requests`` session for the hook's life (connection pooling)."""
        if self._session is None:
            self.default_host = self.dialect.default_base_url
            self._session = self.get_conn()
        return self._session

    # -- transport ------------------------------------------------------------------------------
    def call(self, request: ApiRequest, budget: float | None = None) -> Any:
        """Send ``request`` with retries; return the decoded JSON body.

        :param budget: retry transient failures for this many seconds instead of a fixed count.
        """
        for attempt in Retrying(**self.retry_policy.tenacity_kwargs(request, budget)):
            with attempt:
                return self._send(request)
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, request: ApiRequest) -> Any:
        session = self.session
        headers = self.dialect.auth_headers(request, self.credentials)
        try:
            response = session.request(
                request.method,
                self.url_from_endpoint(request.path),
                json=request.json,
                params=request.params,
                headers=headers,
                timeout=self.retry_policy.call_timeout,
            )
        except requests.exceptions.ConnectionError as exc:
            refused = isinstance(exc, requests.exceptions.ConnectTimeout) or "Connection refused" in str(exc)
            raise TransientPlatformError(
                f"connection error: {exc.__class__.__name__}", sent=not refused
            ) from exc
        except requests.exceptions.Timeout as exc:
            raise TransientPlatformError(f"timed out after {self.retry_policy.call_timeout} s") from exc
        return decode_response(self.dialect, request, response.status_code, response.headers, response.text)

    # -- job API --------------------------------------------------------------------------------
    def create_job(self, spec: dict[str, Any]) -> TrainingJob:
        """Submit a job. ``spec`` must already be validated (:meth:`Dialect.validate_spec`)."""
        job = self.dialect.parse_created(self.call(self.dialect.create_request(spec)))
        return self._with_console_url(job)

    def get_job(self, job_id: str, budget: float | None = None) -> TrainingJob:
        """Current state of job ``job_id``.

        :raises JobNotFoundError: the platform does not know the job.
        """
        return self._with_console_url(
            self.dialect.parse_job(self.call(self.dialect.get_request(job_id), budget))
        )

    def list_checkpoints(self, job_id: str) -> list[Checkpoint]:
        request = self.dialect.checkpoints_request(job_id)
        if request is None:
            return self.get_job(job_id).checkpoints
        return self.dialect.parse_checkpoints(self.call(request))

    def list_events(self, job_id: str, budget: float | None = None) -> list[JobEvent]:
        """The job's platform events, oldest first (``[]`` for platforms without events)."""
        request = self.dialect.events_request(job_id)
        return self.dialect.parse_events(self.call(request, budget)) if request is not None else []

    def final_view(self, job: TrainingJob, events: list[JobEvent] | None = None) -> TrainingJob:
        """A terminal job completed with what its object lacks: checkpoints (from the checkpoints
        endpoint where the job does not list them) and the failure reason from its events."""
        if not self.dialect.capabilities.checkpoints_in_job and not job.checkpoints:
            job = job.model_copy(update={"checkpoints": self.list_checkpoints(job.id)})
        if events is None and self.dialect.capabilities.events:
            events = self.list_events(job.id)
        return explain_failure(job, events or [], self.dialect)

    def list_jobs(self, tags: list[str]) -> list[TrainingJob]:
        """Jobs carrying every one of ``tags`` (platforms with ``capabilities.list_jobs``).

        Filtered here too: a platform may ignore the tag filter of its list call."""
        jobs = self.dialect.parse_list(self.call(self.dialect.list_request(tags)))
        return [self._with_console_url(j) for j in jobs if set(tags) <= set(j.tags)]

    def cancel_job(self, job_id: str, cancel: CancelRequest | None = None) -> CancelResult:
        """Ask the platform to cancel. A job that already ended, or is already stopping, is reported
        and not cancelled again (unless ``cancel.force``); that is not an error."""
        cancel = self.dialect.effective_cancel(cancel or CancelRequest())
        if not cancel.force and (skipped := no_cancel_needed(self.get_job(job_id))):
            return skipped
        try:
            return self.dialect.parse_cancel(job_id, self.call(self.dialect.cancel_request(job_id, cancel)))
        except JobStateConflictError:
            result = no_cancel_needed(self.get_job(job_id))
            if result is None:
                raise
            return result

    def cancel_and_confirm(
        self, job_id: str, cancel: CancelRequest | None = None, timeout: float = 120.0, interval: float = 2.0
    ) -> tuple[CancelResult, TrainingJob]:
        """Cancel, then poll until the platform reports a terminal state (at most ``timeout`` s).

        :returns: the cancel result (completed with the final checkpoint once known) and the last
            job state seen, which is terminal unless the timeout ran out.
        """
        result = self.cancel_job(job_id, cancel)
        job = self.wait_until(job_id, lambda j: j.is_terminal, timeout, interval)
        return complete_cancel_result(result, job), job

    def wait_until(
        self,
        job_id: str,
        done: Callable[[TrainingJob], bool],
        timeout: float,
        interval: float = 1.0,
        budget: float | None = None,
    ) -> TrainingJob:
        """Poll job ``job_id`` every ``interval`` s until ``done(job)`` or ``timeout`` s have passed;
        return the last job seen (``budget``: outage budget of each poll, seconds)."""
        deadline = time.monotonic() + timeout
        job = self.get_job(job_id, budget)
        while not done(job) and time.monotonic() < deadline:
            time.sleep(interval)
            job = self.get_job(job_id, budget)
        return job

    def _with_console_url(self, job: TrainingJob) -> TrainingJob:
        if job.console_url:
            return job
        self.session  # noqa: B018 - sets base_url
        return job.model_copy(update={"console_url": self.dialect.console_url(self.base_url, job.id)})


def complete_cancel_result(result: CancelResult, job: TrainingJob) -> CancelResult:
    """Fill a cancel result with what the job shows once it stopped: final state, final checkpoint,
    metrics and cost."""
    final = job.final_checkpoint if job.is_terminal else None
    update: dict[str, Any] = {"state": job.state}
    if final is not None and (result.final_checkpoint_id in (None, final.id)) and final.kind == "final":
        update |= {"final_checkpoint_id": final.id, "final_checkpoint_path": final.path}
    if job.metrics and not result.final_metrics:
        update["final_metrics"] = dict(job.metrics)
    if job.cost.total_usd is not None:
        update["cost"] = job.cost
    return result.model_copy(update=update)


class TensorOneHook(TrainingPlatformHook):
    """TensorOne v2 training API (connection type ``tensorone``: host = API base URL, password = API key)."""

    default_conn_name = "tensorone_default"
    conn_type = "tensorone"
    hook_name = "TensorOne"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return ui_field_behaviour(cls.conn_type)


class TogetherHook(TrainingPlatformHook):
    """Together AI fine-tuning API (connection type ``together``: password = API key; host = base
    URL, default ``https://api.together.ai``)."""

    default_conn_name = "together_default"
    conn_type = "together"
    hook_name = "Together AI"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return ui_field_behaviour(cls.conn_type)
