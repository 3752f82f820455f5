"""ModelArts training-job task logs over the local engine's jobs (``docs/platforms/modelarts.md``,
"Training logs"), the job's lines from :mod:`..engine.job_log` (pure functions, no I/O of their own):

* ``GET …/training-jobs/{id}/tasks/{task_id}/logs/preview`` → ``{content, current_size,
  full_size}``: the whole log while it is at most :data:`PREVIEW_BYTES`, else its latest part
  (:func:`preview`);
* ``GET …/tasks/{task_id}/logs/url`` → ``{obs_url}``: a temporary link to the whole log (a
  ``modelarts-job-<job id>-<task id>.log`` file the local platform serves itself, :func:`log_file_name`);
* ``GET …/training-jobs/{id}/logs/{task_id}`` (the AOM lines, ``ShowTrainingJobLogsFromAom``) →
  ``{start_line, end_line, lines, content}`` (:func:`aom_lines`).

A log's text is its lines, each ending with ``\\n``. A task of a job that has not started has an
empty log. The one task of a local job is ``worker-0`` (``status.tasks``); another task id is
``ModelArts.0101`` (HTTP 400) naming ``task_id`` — not a 404, which clients read as "the job is gone".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_training_platform.engine import TrainingEngine
from airflow_training_platform.engine.job_log import LogLine, job_lines
from airflow_training_platform.platforms.modelarts import wire

PREVIEW_BYTES = 5 * 1024 * 1024
"""The largest ``content`` of a log preview, in bytes (5 MB: the preview API's documented limit,
"最大为5兆"; read as MiB here)."""

AOM_LINES_DEFAULT = 50
"""``lines`` of the AOM lines route when not given (``ShowTrainingJobLogsFromAom``: default 50)."""

AOM_LINES_MAX = 500
"""The most ``lines`` the AOM lines route takes (range 1–500)."""

ORDERS = ("asc", "desc")
"""The AOM lines route's ``order``: ``asc`` old → new, ``desc`` new → old (the default)."""


def task_lines(engine: TrainingEngine, rec: Mapping[str, Any], task_id: str) -> list[LogLine]:
    """The log lines of task ``task_id`` of the job ``rec`` (an engine snapshot), oldest first.

    :raises ApiError: ``ModelArts.0101`` (HTTP 400) when the job has no such task (``status.tasks``).
    """
    if task_id not in wire.TASKS:
        raise wire.bad(
            "task_id", f"'{task_id}' is not a task of training job {rec['job_id']} ({', '.join(wire.TASKS)})"
        )
    return list(job_lines(engine, rec))


def log_text(lines: Sequence[LogLine]) -> str:
    """The log as a file holds it: each line followed by ``\\n``."""
    return "".join(line.text + "\n" for line in lines)


def log_file_name(job_id: str, task_id: str) -> str:
    """``modelarts-job-<job id>-<task id>.log``, the name ModelArts gives a task's log file."""
    return f"modelarts-job-{job_id}-{task_id}.log"


def preview(text: str, limit: int = PREVIEW_BYTES) -> dict[str, Any]:
    """The preview answer of a log ``text``: ``content`` (the whole text while its UTF-8 size is at
    most ``limit`` bytes, else its latest part: the last ``limit`` bytes, starting after the first
    line break among them so no line is cut, or cut anyway when one line is longer),
    ``current_size`` (bytes of ``content``), ``full_size`` (bytes of the whole log)."""
    whole = text.encode("utf-8")
    if len(whole) <= limit:
        part = whole
    else:
        part = whole[len(whole) - limit :]
        if (cut := part.find(b"\n")) != -1 and cut + 1 < len(part):
            part = part[cut + 1 :]
    content = part.decode("utf-8", errors="ignore")
    return {"content": content, "current_size": len(content.encode("utf-8")), "full_size": len(whole)}


def aom_lines(
    lines: Sequence[LogLine], base_line: str | None, count: int = AOM_LINES_DEFAULT, order: str = "desc"
) -> dict[str, Any]:
    """The AOM lines answer over a task's ``lines``. Huawei leaves the paging semantics open; here a
    line's number is its place in the log, 1-based (``LogLine.index + 1``), and:

    * ``order=desc`` (default): the ``count`` lines numbered below ``base_line`` (none given: the
      newest lines), newest first; ``order=asc``: the ``count`` lines numbered above ``base_line``
      (none given: from the first line), oldest first;
    * ``start_line`` / ``end_line`` (strings, as the API types them) are the numbers of the first
      and last line of ``content`` as returned, so the next page in the same direction is
      ``base_line=<end_line>``; with no line, both are ``base_line`` (``"0"`` when none was given);
    * ``lines`` is how many lines ``content`` holds, each ending with ``\\n``.

    :raises ApiError: ``ModelArts.0101`` for ``base_line`` not a whole number ≥ 0, ``count`` outside
        1–:data:`AOM_LINES_MAX`, an ``order`` outside :data:`ORDERS`.
    """
    if base_line not in (None, "") and not str(base_line).isdigit():
        raise wire.bad("base_line", f"'{base_line}' is not a line number")
    if not 1 <= count <= AOM_LINES_MAX:
        raise wire.bad("lines", f"'{count}' must be between 1 and {AOM_LINES_MAX}")
    if order not in ORDERS:
        raise wire.bad("order", f"'{order}' must be asc or desc")
    base = int(base_line) if base_line else None
    if order == "asc":
        chosen = [line for line in lines if base is None or line.index + 1 > base][:count]
    else:
        older = [line for line in lines if base is None or line.index + 1 < base]
        chosen = list(reversed(older[-count:]))
    if not chosen:
        here = str(base) if base is not None else "0"
        return {"start_line": here, "end_line": here, "lines": 0, "content": ""}
    return {
        "start_line": str(chosen[0].index + 1),
        "end_line": str(chosen[-1].index + 1),
        "lines": len(chosen),
        "content": log_text(chosen),
    }
