"""The training program's own output in the task log (``stream_logs=True``).

While a task waits, each poll reads the lines the job's program printed (the platform's log API,
through :meth:`~airflow_training_provider.platforms.base.Dialect.logs_request`) and they are written
here, once each and in order, as ``[program] <line>``. Where they are comes from a cursor the
dialect defines; like the event cursor it travels in the trigger kwargs and in the try's
``log_cursor.try<n>`` XCom, saved after the lines are written, so a restarted triggerer resumes
after the last line written (``docs/architecture.md``, "Program logs").

A program may print a secret the spec gave it (an environment variable resolved from a connection).
The worker registers resolved values with Airflow's masker, but the triggerer is another process:
every line is masked here against the values the waiting side resolved itself
(:class:`SecretLines`), whichever process writes it. Values written in the spec or rendered from a
template are known on the worker only: while deferred, such a spec's lines are not written
(:func:`note_unreferenced_secrets`). Secrets shorter than ``[logging] min_length_masked_secret``
are not masked, as in Airflow.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from airflow_training_provider.json_values import safe_text
from airflow_training_provider.task_log import TaskLog

#: what marks a program's line in the task log
PREFIX = "[program]"
#: characters of a line written; a longer one is cut there and says how much was left out
MAX_LINE_CHARS = 2000
#: what a masked secret shows as (Airflow's own mask)
MASK = "***"
#: Airflow's default of ``[logging] min_length_masked_secret``: shorter values are not masked (a
#: short value would mask ordinary words and numbers); :func:`min_masked_length` reads the setting
MIN_MASKED_LENGTH = 5
#: values Airflow's masker never masks, compared lowercased (its ``SECRETS_TO_SKIP_MASKING``)
NEVER_MASKED = frozenset({"airflow"})

log = logging.getLogger(__name__)


def min_masked_length() -> int:
    """Airflow's ``[logging] min_length_masked_secret`` (characters; default
    :data:`MIN_MASKED_LENGTH`): as in Airflow's masker, a secret shorter than that is not masked."""
    from airflow.sdk.configuration import conf

    return conf.getint("logging", "min_length_masked_secret", fallback=MIN_MASKED_LENGTH)


def maskable(values: Iterable[str], min_length: int) -> set[str]:
    """The strings of ``values`` that are masked, as Airflow's masker decides: those of at least
    ``min_length`` characters that are not one of :data:`NEVER_MASKED`. A multi-line value (a PEM
    key, a JSON credential) adds each of its stripped lines of that length too: a program's line
    holds one line of it, never the whole."""
    found: set[str] = set()
    for value in values:
        parts = [value, *(part.strip() for part in value.splitlines())] if "\n" in value else [value]
        found.update(p for p in parts if len(p) >= min_length and p.lower() not in NEVER_MASKED)
    return found


class SecretLines:
    """Masks the secret values a spec handed its program in each line before it is written.

    :param values: the secret values (resolved references, W&B key); see :func:`maskable` for which
        are masked (shorter than ``[logging] min_length_masked_secret`` are not, as in Airflow).
        Kept in memory only, never logged or serialized.
    :param min_length: the minimum length masked (characters; default: Airflow's setting,
        :func:`min_masked_length`).
    """

    def __init__(self, values: Iterable[str] = (), min_length: int | None = None) -> None:
        values = list(values)
        if not values:  # nothing to mask: no need to read the setting
            self._values: list[str] = []
            return
        length = min_masked_length() if min_length is None else min_length
        # longest first: a value containing another (a multi-line value, its lines) is masked whole
        self._values = sorted(maskable(values, length), key=len, reverse=True)

    def __repr__(self) -> str:
        return f"SecretLines({len(self._values)} values)"

    @property
    def values(self) -> list[str]:
        """The values masked (never log them)."""
        return list(self._values)

    def mask(self, line: str) -> str:
        """``line`` with each secret value replaced by ``***``."""
        for value in self._values:
            if value in line:
                line = line.replace(value, MASK)
        return line


def shown(line: str) -> str:
    """``line`` cut to :data:`MAX_LINE_CHARS` (``… [1234 more characters]``), control characters
    other than tabs replaced, so one line of the program stays one line of the task log; lone
    surrogates (bytes that were not UTF-8, escaped in a JSON answer) replaced (``json_values.safe_text``)."""
    line = "".join(c if c >= " " or c == "\t" else "�" for c in safe_text(line))
    if len(line) > MAX_LINE_CHARS:
        return f"{line[:MAX_LINE_CHARS]}… [{len(line) - MAX_LINE_CHARS} more characters]"
    return line


def write_lines(task_log: TaskLog, lines: Iterable[str], secrets: SecretLines) -> None:
    """Write each of ``lines`` to ``task_log`` as ``[program] <line>``: masked first, then cut."""
    for line in lines:
        task_log.info("%s %s", PREFIX, shown(secrets.mask(line)))


def note_unavailable(task_log: TaskLog, platform: str) -> None:
    """The one line a task with ``stream_logs=True`` writes on a platform whose program log cannot
    be read (``capabilities.program_logs`` false)."""
    task_log.info(
        "stream_logs: %s does not serve its training program's output through its API; the task log "
        "shows the job's status and platform events only",
        platform,
    )


def note_unreferenced_secrets(task_log: TaskLog) -> None:
    """The one warning a deferrable submit with ``stream_logs=True`` writes when its rendered spec
    holds secret values written in it or rendered from a template
    (:func:`~airflow_training_provider.spec_secrets.secret_values`): only the worker's masker knows
    them, so the triggerer writes none of the program's lines and the UI shows none for that try."""
    task_log.warning(
        "stream_logs: the spec holds secret values written in it or rendered from a template, which "
        "only the worker can mask; the training program's lines are not written while the task is "
        'deferred, nor shown in the Training job tab. Give them as secret references ({"secret": '
        '{"conn_id": ...}} or {"secret": {"variable": ...}}), or set deferrable=False: the wait on the '
        "worker writes the lines masked"
    )


def secret_references(spec: Any) -> list[dict[str, Any]]:
    """The secret references of ``spec`` (``{"conn_id", "field"}`` or ``{"variable"}``): names, never
    values, so they may travel in trigger kwargs; the triggerer resolves them again
    (:func:`resolve_secrets`) to mask the program's lines."""
    from airflow_training_provider.spec_secrets import find_references

    refs = [ref.model_dump(exclude_defaults=True) for _, ref in find_references(spec)]
    return [dict(r) for r in {tuple(sorted(r.items())): r for r in refs}.values()]


def resolve_secrets(references: list[dict[str, Any]]) -> SecretLines:
    """The values ``references`` name (:func:`secret_references`), as a :class:`SecretLines`, and
    registered with Airflow's masker in this process too. Synchronous (secrets backends are).

    :raises SecretNotFoundError: one is no longer defined; the caller writes no program lines then.
    :raises InvalidJobSpecError: one holds no value."""
    from airflow_training_provider.spec_secrets import REFERENCE_KEY, mask, resolve_references

    _, values = resolve_references({"references": [{REFERENCE_KEY: r} for r in references]})
    secrets = SecretLines(values)
    mask(secrets.values)  # a multi-line value's lines too: Airflow's masker masks whole values only
    return secrets
