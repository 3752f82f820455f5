"""The "Training job" view's FastAPI sub-application, mounted by the API server at ``/training-job``.

Routes (every one but ``/static`` guarded by Airflow's own auth: a bearer JWT or the UI's
``_token`` cookie, and read access to the DAG's task instances):

* ``GET /view?dag_id=&run_id=&task_id=&map_index=`` — the page (shown in the task instance's tab);
* ``GET /data?…[&try_number=]`` — its data for one try (default: the current one),
  :class:`~airflow_training_provider.ui.view.TrainingJobView` as JSON;
* ``/static/…`` — the page's script and style, and uPlot (vendored, MIT).

The data comes from the metadata database (the task instance and its tries, each try's job
reference: :mod:`airflow_training_provider.ui.tries`) and, while the job may still change, from the
platform through the task's own connection (a short timeout, a few seconds of caching; when the
platform does not answer, the last state the task saw is shown).
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from airflow_training_provider.json_values import dump
from airflow_training_provider.links import JobReference
from airflow_training_provider.models import TrainingJob
from airflow_training_provider.ui.tries import read_task_instance
from airflow_training_provider.ui.view import ProgramLog, TrainingJobView, TrySummary, build_view, program_log

STATIC = Path(__file__).parent / "static"
#: seconds one platform answer is reused (several open tabs, quick refreshes).
PLATFORM_CACHE_SECONDS = 3.0
#: seconds allowed for one platform call from the API server (the page falls back to XCom after).
PLATFORM_CALL_TIMEOUT = 4.0

#: pages of a job's program log one view reads, from its start (the last lines read are shown)
PROGRAM_LOG_PAGES = 5
#: seconds an ended job's program log is reused (it no longer changes)
ENDED_LOG_CACHE_SECONDS = 60.0

_cache: dict[tuple[str, str], tuple[float, TrainingJob | None, str | None]] = {}
_cache_lock = threading.Lock()
#: the view's note when a record came without a spec (a sensor's)
NOT_SHOWN_WITHOUT_SPEC = (
    "Not shown: this task watched a job it did not submit, so the secrets its program may print "
    "are not known here; the task log has its lines (through Airflow's masker)"
)
#: the view's note when the spec held secret values written in it or rendered from a template
NOT_SHOWN_UNREFERENCED = (
    "Not shown: the spec holds secret values written in it or rendered from a template, which only "
    "the worker can mask; give them as secret references to see the lines here"
)
# keyed by what decides the masking too: two tabs showing one job from two records never share lines
_log_cache: dict[tuple[str, str, bool, bool, str], tuple[float, float, ProgramLog | None]] = {}


def map_index_param(map_index: Annotated[str, Query()] = "-1") -> int:
    """``map_index`` as an int; Airflow leaves ``{MAP_INDEX}`` literal on an unmapped task: -1."""
    try:
        return int(map_index)
    except ValueError:
        return -1


def try_number_param(try_number: Annotated[str | None, Query()] = None) -> int | None:
    """``try_number`` as an int; absent, empty or not a positive number: the current try."""
    try:
        number = int(try_number) if try_number else None
    except ValueError:
        return None
    return number if number is not None and number > 0 else None


def _guard() -> Any:
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag

    return Depends(requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE))


def ask_platform(ref: JobReference) -> tuple[TrainingJob | None, str | None]:
    """The job now from its platform (:meth:`JobApi.snapshot`), or ``(None, why not)``; cached."""
    from airflow_training_provider.hooks.training import TrainingPlatformHook
    from airflow_training_provider.hooks.transport import RetryPolicy

    key = (ref.conn_id, ref.job_id)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None and time.monotonic() - hit[0] < PLATFORM_CACHE_SECONDS:
            return hit[1], hit[2]
    job: TrainingJob | None = None
    error: str | None = None
    try:
        hook = TrainingPlatformHook(
            ref.conn_id, RetryPolicy(call_timeout=PLATFORM_CALL_TIMEOUT, max_attempts=1)
        )
        job = hook.snapshot(ref.job_id)
    except Exception as exc:  # noqa: BLE001 - any failure means "show the last known state"
        error = f"{type(exc).__name__}: {exc}"[:300]
    with _cache_lock:
        _cache[key] = (time.monotonic(), job, error)
    return job, error


def ask_program_log(ref: JobReference, job: TrainingJob | None) -> ProgramLog | None:
    """The job's program log from its platform (the same read as ``stream_logs``: up to
    :data:`PROGRAM_LOG_PAGES` pages from the start, the last lines kept), masked against the
    secrets the try's spec named (``ref.secret_references``, resolved here) and cut as the task log
    cuts them; cached per job and masking. ``None``: no job, or the platform serves no program log.
    No lines, with a note, for a record that came without a spec (a sensor's: the secrets its
    program may print are unknown here) or whose spec holds secret values written in it
    (``ref.unreferenced_secrets``: only the worker knew them)."""
    from airflow_training_provider.hooks.training import TrainingPlatformHook
    from airflow_training_provider.hooks.transport import RetryPolicy
    from airflow_training_provider.lifecycle.operations import LogFollow, NewLogLines
    from airflow_training_provider.program_logs import resolve_secrets, shown

    if job is None:
        return None
    key = (
        ref.conn_id,
        ref.job_id,
        ref.spec_known,
        ref.unreferenced_secrets,
        json.dumps(ref.secret_references, sort_keys=True),
    )
    with _cache_lock:
        hit = _log_cache.get(key)
        if hit is not None and time.monotonic() - hit[0] < hit[1]:
            return hit[2]
    keep = ENDED_LOG_CACHE_SECONDS if job.is_terminal else PLATFORM_CACHE_SECONDS
    try:
        hook = TrainingPlatformHook(
            ref.conn_id, RetryPolicy(call_timeout=PLATFORM_CALL_TIMEOUT, max_attempts=1)
        )
        if not hook.dialect.capabilities.program_logs:
            log: ProgramLog | None = None
        elif not ref.spec_known:
            log = program_log([], True, NOT_SHOWN_WITHOUT_SPEC)
        elif ref.unreferenced_secrets:
            log = program_log([], True, NOT_SHOWN_UNREFERENCED)
        else:
            try:
                secrets = resolve_secrets(ref.secret_references)
            except Exception as exc:  # noqa: BLE001 - no line rather than one showing a secret
                log = program_log(
                    [], True, f"Not shown: the spec's secrets could not be resolved here ({exc})"[:300]
                )
            else:
                read: list[str] = []
                report = lambda step: read.extend(step.lines) if isinstance(step, NewLogLines) else None  # noqa: E731
                complete = hook.drive(hook.ops.follow_log(job, LogFollow(), PROGRAM_LOG_PAGES), report)
                log = program_log([shown(secrets.mask(line)) for line in read], complete)
    except Exception as exc:  # noqa: BLE001 - the rest of the view still shows
        log, keep = (
            program_log([], True, f"Not readable: {type(exc).__name__}: {exc}"[:300]),
            PLATFORM_CACHE_SECONDS,
        )
    with _cache_lock:
        _log_cache[key] = (time.monotonic(), keep, log)
    return log


def training_job_view(
    dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int | None = None
) -> TrainingJobView:
    """Gather the inputs of :func:`build_view` for one try of one task instance (default: its
    current try) and build it."""
    run_id = run_id.replace(" ", "+")  # a '+' that arrived unencoded
    facts = read_task_instance(dag_id, run_id, task_id, map_index)
    shown = facts.pick(try_number)
    # no such try: asked for one the task instance does not have (nothing to show), or none yet
    current = try_number is None if shown is None else shown.try_number == facts.try_number
    ref = shown.ref if shown is not None else None
    platform_job = platform_error = None
    # a job that may change, or one whose stored copy left part of its lists out (a long run): the
    # platform's whole job, falling back to the stored one
    if ref is not None and (ref.job is None or not ref.job.is_terminal or ref.job.omitted):
        platform_job, platform_error = ask_platform(ref)
    tries = [
        TrySummary(
            try_number=t.try_number,
            ti_state=t.ti_state,
            job_id=t.ref.job_id if t.ref else None,
            job_state=(
                t.ref.job.state.value
                if t.ref and t.ref.job
                else "succeeded"  # a try returned its job only when it succeeded
                if t.ref and t.ref.job_in_return_value
                else None
            ),
        )
        for t in facts.tries.values()
    ]
    return build_view(
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        map_index=map_index,
        ti_state=shown.ti_state if shown is not None else (facts.state if current else None),
        is_training_task=facts.is_training or any(t.ref is not None for t in facts.tries.values()),
        ref=ref,
        platform_job=platform_job,
        platform_error=platform_error,
        now=datetime.now(UTC),
        try_number=shown.try_number if shown is not None else try_number,
        tries=tries,
        current_try=current,
        program_log=ask_program_log(ref, platform_job or ref.job) if ref is not None else None,
    )


def create_app() -> FastAPI:
    """The sub-application the plugin registers (``fastapi_apps``)."""
    app = FastAPI(title="Training job view", description=__doc__)
    guard = _guard()

    @app.get("/view", response_class=HTMLResponse, dependencies=[guard])
    def page() -> HTMLResponse:
        return HTMLResponse((STATIC / "view.html").read_text(encoding="utf-8"))

    @app.get("/data", response_model=TrainingJobView, dependencies=[guard])
    def data(
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: Annotated[int, Depends(map_index_param)],
        try_number: Annotated[int | None, Depends(try_number_param)] = None,
    ) -> JSONResponse:
        # NaN/Infinity (a diverged run's metrics) as their names: strict JSON has no such numbers
        return JSONResponse(dump(training_job_view(dag_id, run_id, task_id, map_index, try_number)))

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
