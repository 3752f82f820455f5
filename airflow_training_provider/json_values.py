"""What the provider writes into Airflow's database, made safe: one place for every value that
travels from a platform into XCom, trigger events, the task state store, asset events and
OpenLineage facets.

Airflow keeps those values as JSON (JSONB on PostgreSQL), and a platform's answer may hold what JSON
cannot:

* **NaN and ±Infinity** — an ordinary outcome (a diverged run's loss). Strict JSON has no such
  numbers (``Out of range float values are not JSON compliant``; PostgreSQL: ``invalid input syntax
  for type json``), so they are written as the strings ``"NaN"``, ``"Infinity"`` and
  ``"-Infinity"`` (JavaScript's and JSON5's spellings). The provider's models read those strings
  back as the floats they were (pydantic's float fields accept them), so a trigger event or an XCom
  round-trips; a downstream task reads ``float(value)`` (``float("NaN")`` is ``nan``).
* **NUL characters** (``\\x00``): JSONB refuses ``\\u0000``; they are dropped.
* **Lone surrogates** (a log line that was not UTF-8, decoded with ``surrogateescape``): they are
  replaced by U+FFFD, which any UTF-8 column takes.

Lengths are bounded where the text comes in (:data:`MESSAGE_CHARS` for a job's message,
:data:`EVENT_MESSAGE_CHARS` for an event's: :func:`bounded_text`), and a finished job's size where it
is stored (:mod:`airflow_training_provider.results`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel

NAN = "NaN"
INFINITY = "Infinity"
NEGATIVE_INFINITY = "-Infinity"

#: characters kept of a job's failure reason or status message (a stack trace can be megabytes)
MESSAGE_CHARS = 4000
#: characters kept of one platform event's message
EVENT_MESSAGE_CHARS = 2000


def non_finite_name(value: float) -> str:
    """``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` for a non-finite ``value``."""
    if math.isnan(value):
        return NAN
    return INFINITY if value > 0 else NEGATIVE_INFINITY


def _replace_surrogates(text: str) -> str:
    return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)


def safe_text(text: str) -> str:
    """``text`` as a UTF-8 JSON column takes it: NUL characters dropped, lone surrogates → U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = _replace_surrogates(text)
    return text


def bounded_text(text: str, limit: int) -> str:
    """``safe_text(text)``, cut to ``limit`` characters with a note of how many were cut
    (``… [12345 characters cut]``; the note counts within ``limit``)."""
    text = safe_text(text)
    if len(text) <= limit:
        return text
    # the note's own length depends on the count: size it for the largest count it can say
    keep = max(0, limit - len(f"… [{len(text)} characters cut]"))
    return text[:keep] + f"… [{len(text) - keep} characters cut]"


def json_value(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, numbers, strings...) as strict JSON and JSONB take it:
    non-finite floats as their names (``"NaN"``...), strings through :func:`safe_text`; tuples become
    lists. Anything else is returned unchanged."""
    if isinstance(value, float):
        return value if math.isfinite(value) else non_finite_name(value)
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, Mapping):
        return {safe_text(str(k)): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return value


def dump(model: BaseModel, **kwargs: Any) -> dict[str, Any]:
    """``model.model_dump(mode="json", **kwargs)`` made safe by :func:`json_value`: what the provider
    writes to XCom, trigger events and the task state store."""
    return json_value(model.model_dump(mode="json", **kwargs))


def non_finite_metrics(metrics: Mapping[str, Any]) -> dict[str, str]:
    """The metrics among ``metrics`` whose value is NaN or ±Infinity (a float, or its name as
    :func:`json_value` writes it), by name: ``{"loss": "NaN"}``."""
    found: dict[str, str] = {}
    for name, value in metrics.items():
        if isinstance(value, float) and not math.isfinite(value):
            found[name] = non_finite_name(value)
        elif value in (NAN, INFINITY, NEGATIVE_INFINITY):
            found[name] = value
    return found


def is_finite(value: Any) -> bool:
    """Whether ``value`` is a finite number (``False`` for NaN, ±Infinity, ``None`` and non-numbers)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


Message = Annotated[str, AfterValidator(lambda text: bounded_text(text, MESSAGE_CHARS))]
"""A job's message as a model field: :func:`bounded_text` to :data:`MESSAGE_CHARS`."""

EventMessage = Annotated[str, AfterValidator(lambda text: bounded_text(text, EVENT_MESSAGE_CHARS))]
"""An event's message as a model field: :func:`bounded_text` to :data:`EVENT_MESSAGE_CHARS`."""
