"""Errors the provider raises, by what the caller should do about them.

* :class:`TransientPlatformError` — try again later (429, 5xx, timeouts, resets, and
  :class:`MalformedResponseError`: a 2xx answer the platform's dialect cannot read).
* :class:`JobNotFoundError`, :class:`JobStateConflictError`, :class:`PlatformAuthError` and the base
  :class:`TrainingPlatformError` — the platform said no; retrying the same call will not help.
* :class:`InvalidJobSpecError` — the job spec is wrong; raised before anything is submitted (the
  submit operator then fails the task without retries).
"""

from __future__ import annotations


class TrainingPlatformError(Exception):
    """The platform answered with an error.

    :param message: human-readable text (the platform's own message when it gave one).
    :param status: HTTP status code, or ``None`` when no response was received.
    :param code: the platform's error code (TensorOne envelope ``error``, e.g. ``STATE_CONFLICT``).
    :param request_id: the platform's request id, for support tickets.
    :ivar hint: what the caller should check, added after the message by whoever knows (a refused
        credential names the connection); ``message`` stays the platform's own words.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.request_id = request_id
        self.hint = ""

    def __str__(self) -> str:
        parts = [self.message + (f" — {self.hint}" if self.hint else "")]
        if self.status is not None or self.code:
            parts.append(f"(HTTP {self.status}{', ' + self.code if self.code else ''})")
        if self.request_id:
            parts.append(f"[request {self.request_id}]")
        return " ".join(parts)


class TransientPlatformError(TrainingPlatformError):
    """A failure that says nothing about the job: retry with backoff.

    :param retry_after: seconds the platform asked us to wait (``Retry-After``), if any.
    :param sent: ``False`` when the request certainly never reached the platform (connection
        refused), so even a non-idempotent call may be retried.
    """

    def __init__(self, message: str, *, retry_after: float | None = None, sent: bool = True, **kw) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after
        self.sent = sent


class MalformedResponseError(TransientPlatformError):
    """A 2xx answer whose body is not what the platform documents: not JSON, or a field missing or
    of another type, so the dialect's parser failed on it (``ValueError``, pydantic's
    ``ValidationError``, ``KeyError``, ``TypeError``, ``AttributeError``...; the parser's error is
    the ``__cause__``). Raised by :func:`~airflow_training_provider.platforms.base.parse_answer`,
    the one place a parser is called on an answer.

    It is a failed call, not a verdict on the job: transient, retried like a 5xx (a poll within its
    outage budget; a one-shot call that may have landed, such as a create, is not re-sent), and an
    auxiliary read leaves its value out. ``message`` reads ``malformed answer to <METHOD> <path>:
    <what did not parse>``.
    """


class PlatformAuthError(TrainingPlatformError):
    """401/403: the connection's credentials were refused."""


class JobNotFoundError(TrainingPlatformError):
    """404: the platform has no job with this id."""


class JobStateConflictError(TrainingPlatformError):
    """409: the job's state forbids the call (e.g. cancelling a job that already ended)."""


class JobAlreadyExistsError(JobStateConflictError):
    """The platform already has a job under the name a create asked for (AWS ``ResourceInUse``).
    For a name the provider derived from the task-instance try, that job is this try's own."""


class LostContactError(TrainingPlatformError):
    """The platform could not be reached for longer than the outage budget (seconds)."""


class InvalidJobSpecError(ValueError):
    """The job spec is invalid; nothing was submitted. (The submit operator fails the task with it
    without retries: the same spec would fail the same way.)

    :param field: dotted path of the offending field, e.g. ``config.training.epochs``, or the
        operator parameter that fills it (``parameter=True``, e.g. ``wandb_conn_id``).
    :param expected: what the field should be.
    """

    def __init__(
        self, field: str, expected: str, platform: str | None = None, parameter: bool = False
    ) -> None:
        self.field = field
        self.expected = expected
        if parameter:
            super().__init__(f"Parameter '{field}': {expected}")
            return
        where = f"{platform} job spec" if platform else "job spec"
        super().__init__(f"Invalid {where}: field '{field}': {expected}")
