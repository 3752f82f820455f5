"""How we talk to a platform, whatever it is: request preparation, response classification and
retry policy, shared by the sync and the async hook. The rules:

* A request is prepared once (:func:`prepare_request`): URL and query joined by one rule, the body
  serialized to bytes, a ``User-Agent`` naming the provider and its version (:data:`USER_AGENT`),
  then the dialect authenticates exactly those bytes and headers.
* 2xx with a JSON body → the body (or, for a request with a reader, what the reader makes of it); a
  2xx whose body is not JSON, or that the reader cannot read, is *malformed*
  (:class:`~airflow_training_provider.errors.MalformedResponseError`) → transient.
* Errors are classified by the dialect (:meth:`Dialect.classify_error`): by default 408, 425, 429
  (``Retry-After`` honoured) and 5xx are transient, like timeouts and connection resets: retried
  with exponential backoff and jitter. A non-idempotent call (create) is only retried when the
  request certainly did not land (connection refused, 429, 503), so a retry never submits a
  second job. Any other error is definite; no retry.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any
from urllib.parse import urlencode

from tenacity import (
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)

from airflow_training_provider.errors import (
    MalformedResponseError,
    TrainingPlatformError,
    TransientPlatformError,
)
from airflow_training_provider.platforms.base import (
    ApiRequest,
    Credentials,
    Dialect,
    HttpRequest,
    parse_answer,
    retry_after_seconds,
)

log = logging.getLogger(__name__)

__all__ = [
    "USER_AGENT",
    "PreparedRequests",
    "RetryPolicy",
    "decode_response",
    "join_url",
    "prepare_request",
    "retry_after_seconds",
]


DISTRIBUTION = "airflow-training-provider"


def provider_version() -> str:
    """The installed version of this provider's distribution (``0.1.0``); ``unknown`` when it runs
    from a source tree that was never installed."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


#: sent on every request (:func:`prepare_request`), so a platform's logs and support can tell this
#: provider's calls and their version apart: ``airflow-training-provider/0.1.0``. A dialect whose
#: platform wants another sets its own in :attr:`ApiRequest.headers`.
USER_AGENT = f"{DISTRIBUTION}/{provider_version()}"


@dataclass(frozen=True)
class RetryPolicy:
    """Timeouts and backoff for platform calls.

    :ivar call_timeout: seconds allowed for one HTTP call (connect + read).
    :ivar initial_backoff: seconds before the first retry; doubles each time, with jitter.
    :ivar max_backoff: ceiling of one wait, seconds.
    :ivar max_attempts: attempts for a one-shot call (create, cancel) before giving up.
    """

    call_timeout: float = 30.0
    initial_backoff: float = 1.0
    max_backoff: float = 60.0
    max_attempts: int = 5

    def timeout(self, request: ApiRequest) -> float:
        """Seconds allowed for one HTTP call of ``request``: ``call_timeout``, or the request's own
        :attr:`ApiRequest.timeout` when shorter."""
        if request.timeout is None:
            return self.call_timeout
        return max(0.001, min(self.call_timeout, request.timeout))

    def tenacity_kwargs(self, request: ApiRequest) -> dict[str, Any]:
        """Arguments for ``tenacity.Retrying``/``AsyncRetrying`` for ``request``: transient errors
        are retried for ``request.budget`` seconds (an outage budget) if it is set, else
        ``max_attempts`` times."""
        backoff = wait_exponential_jitter(multiplier=self.initial_backoff, max=self.max_backoff)

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            asked = getattr(exc, "retry_after", None) or 0.0
            return max(float(asked), backoff(state))

        def retryable(exc: BaseException) -> bool:
            return isinstance(exc, TransientPlatformError) and (request.idempotent or not exc.sent)

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.warning(
                "%s %s failed (%s); retry %d in %.1f s",
                request.method,
                request.path,
                exc,
                state.attempt_number,
                state.upcoming_sleep,
            )

        budget = request.budget
        stop = stop_after_delay(budget) if budget is not None else stop_after_attempt(self.max_attempts)
        return {
            "stop": stop,
            "wait": wait,
            "retry": retry_if_exception(retryable),
            "before_sleep": before_sleep,
            "reraise": True,
        }


def join_url(
    base_url: str, path: str, params: Mapping[str, Any] | list[tuple[str, Any]] | None = None
) -> str:
    """``base_url`` + ``path`` + query: one rule for both hooks. The base URL keeps its own path
    (``https://host/api`` + ``/v2/x`` → ``https://host/api/v2/x``); slashes between them never double."""
    url = base_url.rstrip("/") + "/" + path.lstrip("/")
    if params:
        pairs = list(params.items()) if isinstance(params, Mapping) else list(params)
        url += "?" + urlencode([(k, _query_value(v)) for k, v in pairs])
    return url


def _url(base_url: str, path: str, params: Mapping[str, Any] | list[tuple[str, Any]] | None) -> str:
    pairs = tuple(params.items()) if isinstance(params, Mapping) else tuple(params or ())
    try:
        return _cached_url(base_url, path, pairs or None)
    except TypeError:  # an unhashable parameter value
        return join_url(base_url, path, params)


@lru_cache(maxsize=4096)
def _cached_url(base_url: str, path: str, params: tuple | None) -> str:
    """:func:`join_url`, remembered: a poll asks for the same URL every time."""
    return join_url(base_url, path, list(params) if params else None)


def _query_value(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def prepare_request(
    dialect: Dialect,
    base_url: str,
    request: ApiRequest,
    credentials: Credentials,
    service_urls: Mapping[str, str] | None = None,
) -> HttpRequest:
    """The exact bytes to send for ``request``: absolute URL with query, headers (``Accept``,
    :data:`USER_AGENT`, the request's own, ``Content-Type`` with a body), body serialized once, then
    authenticated by the dialect (which sees all of it and the signing time).

    :param service_urls: base URL of each companion service; a request naming one
        (:attr:`ApiRequest.service`) goes there.
    :raises TrainingPlatformError: the request names a companion service the connection has no URL
        for (definite: an auxiliary read is left out, warned about once)."""
    if request.service is not None:
        if not service_urls or request.service not in service_urls:
            raise TrainingPlatformError(
                f"{dialect.name}: the connection names no endpoint for service {request.service!r}"
            )
        base_url = service_urls[request.service]
    body = dialect.encode_body(request)
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT, **request.headers}
    if body:
        headers["Content-Type"] = request.content_type
    http = HttpRequest(
        method=request.method,
        url=_url(base_url, request.path, request.params),
        headers=headers,
        body=body,
        timestamp=datetime.now(UTC),
        service=request.service,
    )
    http.headers.update(dialect.authenticate(http, credentials))
    return http


class PreparedRequests:
    """:func:`prepare_request` for one connection, remembering the last request prepared when the
    dialect's authentication depends on nothing but the credentials (a bearer token): a poll sends
    the same request object every time, and then it is prepared once. A dialect that signs (its own
    :meth:`Dialect.authenticate`) or refreshable credentials are prepared per send: a signature
    covers the time.

    :param dialect, base_url, credentials, service_urls: the connection's.
    """

    def __init__(
        self,
        dialect: Dialect,
        base_url: str,
        credentials: Credentials,
        service_urls: Mapping[str, str] | None = None,
    ) -> None:
        self.dialect = dialect
        self.base_url = base_url
        self.credentials = credentials
        self.service_urls = dict(service_urls or {})
        self.reusable = credentials.source is None and type(dialect).authenticate is Dialect.authenticate
        self._last: tuple[ApiRequest, HttpRequest] | None = None

    def __call__(self, request: ApiRequest) -> HttpRequest:
        last = self._last
        if last is not None and last[0] is request:
            return last[1]
        http = prepare_request(self.dialect, self.base_url, request, self.credentials, self.service_urls)
        if self.reusable:
            self._last = (request, http)
        return http


def decode_response(
    dialect: Dialect, request: ApiRequest, status: int, headers: Mapping[str, str], text: str | bytes
) -> Any:
    """Turn an HTTP answer into a JSON body or the right exception. ``text`` is the body as sent
    (bytes: JSON is UTF-8, so a 2xx body is parsed without decoding it to ``str`` first).

    :raises MalformedResponseError: a 2xx body that is not JSON, or that the request's reader cannot
        read (:func:`parse_answer`); transient.
    :raises TransientPlatformError: whatever the dialect classifies as transient (by default
        408/425/429/5xx).
    :raises TrainingPlatformError: (a subclass chosen by :meth:`Dialect.classify_error`) otherwise.
    """
    if request.reader is not None and 200 <= status < 300:
        return parse_answer(request, request.reader, text, status)
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = None
        if 200 <= status < 300:
            raise MalformedResponseError(
                f"malformed answer to {request.method} {request.path}: {_as_text(text)[:120]!r}",
                status=status,
            ) from None
    if 200 <= status < 300:
        return body
    raise dialect.classify_error(status, headers, body, _as_text(text))


def _as_text(text: str | bytes) -> str:
    return text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
