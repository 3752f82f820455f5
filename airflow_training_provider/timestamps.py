"""One way to read a platform's time: every timestamp the provider reads from a platform answer goes
through :func:`parse_timestamp` (wire models through :data:`UtcDateTime` / :data:`UtcDateTimeMs`),
so every time the provider holds is an aware UTC ``datetime`` and any two of them compare and sort.

What the platforms send (``docs/platforms/<platform>.md``, "The job"):

* TensorOne (``timestamps{createdAt, startedAt, lastUpdated}``, ``checkpoints[].createdAt``,
  ``cancellationDetails.cancelledAt``), Together (``created_at``, ``updated_at``, ``started_at``,
  events and checkpoints ``created_at``) and PAI (``GmtCreateTime``, ``GmtModifiedTime``,
  ``StatusTransitions[].StartTime``, event lines, metric ``Timestamp``): ISO-8601 text, ``Z``
  or no zone, fractions of a second up to nanoseconds;
* SageMaker (``CreationTime``, ``TrainingStartTime``, ``LastModifiedTime``,
  ``SecondaryStatusTransitions[].StartTime``): epoch **seconds** as JSON numbers (boto's floats);
* ModelArts v2 (``metadata.create_time``, ``status.start_time``): epoch **milliseconds**; its
  events' ``time``: ISO-8601 text.

``docs/platforms/README.md`` ("Timestamps") says the same for users.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

#: an epoch number of more than this is milliseconds whatever the platform documents: as seconds it
#: would be after the year 5000, as milliseconds it is after 1973
MILLIS_ABOVE = 1e11

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SHORT_DIGITS = re.compile(r"\d{1,8}")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_ISO = re.compile(
    r"(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)"
    r"(?:[Tt ](?P<h>\d\d):(?P<mi>\d\d)(?::(?P<s>\d\d)(?:[.,](?P<f>\d+))?)?"
    r" ?(?P<z>[Zz]|[+-]\d\d(?::?\d\d)?)?)?"
)


def parse_timestamp(value: Any, *, unit: Literal["s", "ms"] = "s") -> datetime:
    """``value`` as an aware UTC ``datetime``.

    Accepted:

    * ISO-8601 text: ``2025-03-01T10:00:00Z``, a ``+08:00``, ``+0800`` or ``+08`` offset, no zone
      (read as UTC), a space instead of the ``T``, seconds or their fraction left out, any number
      of fractional digits (past 6, nanoseconds, cut to microseconds);
    * an epoch number (``int``, ``float`` or the same as text): its size decides, whatever the
      platform documents (``unit``): above :data:`MILLIS_ABOVE` milliseconds, else seconds (a
      platform documented as milliseconds that sends seconds is read right); text of 8 digits or
      fewer (``"20250301"``, ``"2025"``) is a date written without separators, not a time: refused;
    * a ``datetime``: a naive one is UTC, an aware one is converted to UTC.

    :param value: the platform's value.
    :param unit: what an epoch number counts: ``"s"`` (SageMaker, the default) or ``"ms"``
        (ModelArts v2).
    :returns: the instant, ``tzinfo`` UTC.
    :raises ValueError: ``value`` is none of these (``None``, ``""``, ``"yesterday"``, a ``bool``,
        ``NaN``, a date out of range), naming it. In a list answer that makes its row malformed:
        the row alone is left out (:func:`~airflow_training_provider.platforms.base.readable_rows`).
    """
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    text = value.strip() if isinstance(value, str) else None
    if text is not None and _SHORT_DIGITS.fullmatch(text):
        raise ValueError(f"not a timestamp (a date without separators?): {value!r}"[:200])
    number = float(text) if text is not None and _NUMBER.fullmatch(text) else value
    try:
        if isinstance(number, int | float) and not isinstance(number, bool) and math.isfinite(number):
            millis = abs(number) > MILLIS_ABOVE
            return _EPOCH + (timedelta(milliseconds=number) if millis else timedelta(seconds=number))
        match = _ISO.fullmatch(text) if text is not None else None
        if match is not None:
            return _from_iso(match)
    except (OverflowError, ValueError):
        pass
    raise ValueError(f"not a timestamp: {value!r}"[:200])


def _from_iso(match: re.Match[str]) -> datetime:
    part = match.groupdict()
    zone = part["z"] or "Z"
    tz: timezone = UTC
    if zone not in ("Z", "z"):
        digits = zone[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
        tz = timezone(-offset if zone[0] == "-" else offset)
    at = datetime(
        int(part["y"]),
        int(part["mo"]),
        int(part["d"]),
        int(part["h"] or 0),
        int(part["mi"] or 0),
        min(int(part["s"] or 0), 59),  # a leap second (":60", RFC 3339) as its last microsecond
        999999 if part["s"] == "60" else int((part["f"] or "0")[:6].ljust(6, "0")),
        tzinfo=tz,
    )
    return at.astimezone(UTC)


def _seconds(value: Any) -> datetime:
    return parse_timestamp(value)


def _millis(value: Any) -> datetime:
    return parse_timestamp(value, unit="ms")


#: a time before this is a platform's "unset" (Go's zero time ``0001-01-01``, epoch 0), not an instant
UNSET_BEFORE = datetime(2000, 1, 1, tzinfo=UTC)


def informational_time(value: Any, *, unit: Literal["s", "ms"] = "s") -> datetime | None:
    """``value`` as :func:`parse_timestamp` reads it, or ``None`` where it says nothing: empty,
    unreadable, or before :data:`UNSET_BEFORE` (a sentinel for "not yet"). For the times inside a
    job's answer that only inform (when it started, its last change, a checkpoint's or an event's
    time): one of them that does not read must not make the finished job's answer, hence its
    result, unreadable, nor start a ``max_runtime`` clock in 0001. A job's creation time stays
    strict (:data:`UtcDateTime`): the orphan reaper's ``min_age`` and list order need it."""
    if value is None or value == "":
        return None
    try:
        at = parse_timestamp(value, unit=unit)
    except ValueError:
        return None
    return None if at < UNSET_BEFORE else at


UtcDateTime = Annotated[datetime, BeforeValidator(_seconds)]
"""A pydantic field type: any form :func:`parse_timestamp` reads (epoch numbers in seconds), held as
an aware UTC ``datetime``; anything else fails the model's validation, naming the field."""

UtcDateTimeMs = Annotated[datetime, BeforeValidator(_millis)]
""":data:`UtcDateTime` whose epoch numbers are milliseconds (ModelArts v2)."""

InformationalTime = Annotated[datetime | None, BeforeValidator(informational_time)]
"""An optional field type: :func:`informational_time` (``None`` when the value says nothing)."""

InformationalTimeMs = Annotated[datetime | None, BeforeValidator(lambda v: informational_time(v, unit="ms"))]
""":data:`InformationalTime` whose epoch numbers are documented as milliseconds (ModelArts v2)."""
