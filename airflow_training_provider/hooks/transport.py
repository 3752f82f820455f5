"""How we talk to a platform, whatever it is: response classification and retry policy.

Shared by the sync and the async hook. The rules:

* 2xx with a JSON body → the body; a 2xx whose body is not JSON is *malformed* → transient.
* 408, 425, 429 (``Retry-After`` honoured), 5xx, timeouts, connection resets → transient: retry with
  exponential backoff and jitter. A non-idempotent call (create) is only retried when the request
  certainly did not land (connection refused, 429, 503), so a retry never submits a second job.
* any other 4xx → the dialect maps it to a definite error; no retry.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from tenacity import (
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)

from airflow_training_provider.errors import TransientPlatformError
from airflow_training_provider.platforms.base import ApiRequest, Dialect

log = logging.getLogger(__name__)

TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
#: answers that prove the platform did not act on the request, so even a create may be re-sent.
NOT_PROCESSED_STATUSES = frozenset({429, 503})


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

    def tenacity_kwargs(self, request: ApiRequest, budget: float | None = None) -> dict[str, Any]:
        """Arguments for ``tenacity.Retrying``/``AsyncRetrying`` for ``request``.

        :param budget: if given, retry transient errors for this many seconds (an outage budget)
            instead of ``max_attempts`` times.
        """
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

        stop = stop_after_delay(budget) if budget is not None else stop_after_attempt(self.max_attempts)
        return {
            "stop": stop,
            "wait": wait,
            "retry": retry_if_exception(retryable),
            "before_sleep": before_sleep,
            "reraise": True,
        }


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` as seconds (delta-seconds or HTTP date); ``None`` when absent or unreadable."""
    value = headers.get("Retry-After") or headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def decode_response(
    dialect: Dialect, request: ApiRequest, status: int, headers: Mapping[str, str], text: str
) -> Any:
    """Turn an HTTP answer into a JSON body or the right exception.

    :raises TransientPlatformError: 408/425/429/5xx, or a 2xx body that is not JSON.
    :raises TrainingPlatformError: (a subclass chosen by the dialect) for any other non-2xx status.
    """
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = None
        if 200 <= status < 300:
            raise TransientPlatformError(
                f"malformed response body from {request.method} {request.path}: {text[:120]!r}", status=status
            ) from None
    if 200 <= status < 300:
        return body
    if status in TRANSIENT_STATUSES:
        code, message, request_id = dialect.error_fields(body)
        raise TransientPlatformError(
            message or f"HTTP {status}",
            status=status,
            code=code,
            request_id=request_id,
            retry_after=retry_after_seconds(headers),
            sent=status not in NOT_PROCESSED_STATUSES,
        )
    raise dialect.parse_error(status, body, text)
