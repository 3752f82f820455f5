"""`make bench`, the quota part: what waiting costs in the platform's API quota (issue 27).

The local training platform runs as its own process with one GPU (``gpus=1``: one job trains, every
other job stays queued and no trainer process runs for it). Per platform dialect (TensorOne,
Together, SageMaker, PAI, ModelArts) and size N, 2N jobs are created through the provider's own
sync hook (the operator's spec defaults and validation applied); then, side by side in the same
run, two processes each run N ``TrainingJobTrigger(...).run()`` in ONE event loop, as a triggerer
does, events on (event cursor 0 where the platform has events), each on its own N jobs:

* ``per-job``   — ``coalesce=False``: every trigger polls its own job (the provider before issue 27);
* ``coalesced`` — ``coalesce=True``: the triggers of one connection share one batch-reading poller
  (reported ``n/a`` while the provider has no ``coalesce`` option).

A third process, once per size, is the ``ideal`` baseline: N bare aiohttp GET + JSON of one
TensorOne job each, on one shared session, at the same interval.

Each trigger process warms up for two intervals (every trigger's first poll lands in them: its
phase in the interval, after a thousand triggers' start), then counts for ``--window`` seconds. Meanwhile ``--cancel-fraction`` of its jobs
are cancelled from the platform's console (``POST /_local/jobs/{id}/cancel``, from this process)
at times spread evenly over the window but its last interval (over its first half, for a window
under two intervals), so each is seen within the window; the process goes on (not counting) until
it has seen every one of them end, or one interval and 15 s after the window.

Measured per platform x N x mode:

* **API calls per waiting job-hour**: the requests the trigger process sent in the window (counted
  in the process at the provider's one send point, ``AsyncTrainingPlatformClient._send``, by kind)
  but those of the cancelled jobs' triggers, / the other jobs (all waiting) / window, x 3600 s: a
  tenth of the jobs ending in under a minute is far more churn than waiting jobs have, so what a
  cancelled job's wait cost (its polls and its end's reads, whole run) is printed on its own. With ``--interval`` below 30 s the per-hour figures are
  scaled to a 30 s interval (x interval / 30: the calls of the same number of polls at 30 s);
  the output says so. Coalesced, a job's events endpoint is also read every ``events_interval``
  from its first poll, which no short window sees: that rate (3,600 / ``events_interval``
  per job-hour, where the dialect reads events on their own) is added, and the line says so.
* **throttled**: answers that were a throttle (HTTP 429, or an error whose message names
  throttling: SageMaker's ``ThrottlingException``, PAI's ``Throttling.User``), whole run.
* **state change to seen, p50/p95 (s)**: from the terminal entry of the job's state history on the
  platform (its ``at``, the platform's clock) to the moment the trigger reported the first poll
  result with that terminal state (the ``Progress`` step handed to the trigger's report, after the
  final view's reads; the same clock: one machine); a job whose wait ended without such a report
  counts the trigger event's arrival. The event's arrival is kept too (``resume_settle`` 0 and the
  log-drain wait 0 in the bench, so it differs only by what follows the report). A change not seen
  by the end of the run is left out of the percentiles and shows in ``changes seen``.
* **CPU per job-poll (µs)**: the trigger process's CPU time in the window / job-status reads
  delivered to triggers in the window (``Progress`` steps reported), beside the ideal's CPU per GET.

Prints a line per run and a markdown table for ``docs/scale.md``; ``--plot`` saves API calls per
waiting job-hour as a PNG (matplotlib, devel's ``bench`` extra).

    python scripts/bench_quota.py [--sizes 100,1000] [--interval 30] [--window 45] [--plot PNG]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: the issue's interval: per-hour figures of a scaled-down run are scaled to it
REFERENCE_INTERVAL = 30.0
#: platform dialects, by connection type (the local fixtures' keys), in the table's order
PLATFORMS = ("aws", "pai", "modelarts", "together", "tensorone")
PLATFORM_NAMES = {
    "aws": "SageMaker",
    "pai": "PAI",
    "modelarts": "ModelArts",
    "together": "Together",
    "tensorone": "TensorOne",
}
MODES = ("per-job", "coalesced")


# -- the platform's side: jobs, cancels, records (this process) -----------------------------------
def _job_spec(conn_type: str, i: int, run: str) -> dict[str, Any]:
    """A long job (1,000 epochs of 60 s: the one that gets the GPU never ends in the run) named
    ``bq<run>-<i>``, its checkpoint location its own."""
    from airflow_training_devel.killpaths.flavors import FLAVORS

    flavor = FLAVORS[conn_type]
    raw = json.dumps(flavor.spec(epochs=1000, seconds_per_epoch=60))
    raw = raw.replace("{{ dag.dag_id }}/{{ run_id | replace(':', '-') }}", f"bq{run}/{i}")
    return flavor.with_name_stem(json.loads(raw), f"bq{run}-{i}")


def create_jobs(conn_type: str, count: int, threads: int = 4) -> list[str]:
    """``count`` jobs on the platform of ``conn_type``, through the provider's sync hook (its
    connection ``<conn_type>_local``), the operator's spec defaults and validation applied; ids."""
    from airflow_training_devel.local_fixtures import LOCAL_FIXTURES
    from airflow_training_provider.hooks.training import TrainingPlatformHook

    local = threading.local()
    run = uuid.uuid4().hex[:6]

    def create(i: int) -> str:
        hook = getattr(local, "hook", None)
        if hook is None:
            hook = local.hook = TrainingPlatformHook(LOCAL_FIXTURES[conn_type].conn_id)
        dialect = hook.dialect
        defaults = dialect.spec_defaults(hook.platform_connection.credentials)
        spec = dialect.validate_spec({**defaults, **_job_spec(conn_type, i, run)})
        return hook.create_job(spec).id

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(create, range(count)))


def terminal_at(record: dict[str, Any]) -> float | None:
    """UNIX time the job entered its terminal state, from the platform's state history."""
    from airflow_training_platform.engine import TERMINAL_STATES

    return next((e["at"] for e in record["state_history"] if e["state"] in TERMINAL_STATES), None)


def server_counts(url: str) -> dict[str, Any] | None:
    """``GET /_local/requests`` per platform, or ``None`` where the local platform does not count."""
    import requests

    r = requests.get(f"{url}/_local/requests", timeout=30)
    return r.json().get("platforms", {}) if r.status_code == 200 else None


def reset_server_counts(url: str) -> None:
    import requests

    requests.delete(f"{url}/_local/requests", timeout=30)


# -- the trigger process ----------------------------------------------------------------------------
@dataclass
class RunResult:
    """What one process measured (JSON between the processes)."""

    platform: str
    size: int
    mode: str
    interval: float
    window: float = 0.0  # seconds counted
    waiting: float = 0.0  # mean jobs waiting over the window (of those never cancelled)
    calls: int = 0  # requests sent in the window, but by the triggers of jobs cancelled in the run
    ended_calls: int = 0  # requests the triggers of jobs cancelled in the run sent, whole run
    calls_by_kind: dict[str, int] = field(default_factory=dict)
    calls_total: int = 0  # requests sent in the whole run (warm-up and tail included)
    throttled: int = 0  # throttled answers, whole run
    polls: int = 0  # job-status reads delivered to triggers in the window
    cpu: float = 0.0  # process CPU seconds in the window
    seen: dict[str, float] = field(default_factory=dict)  # job -> first terminal Progress (UNIX)
    events: dict[str, float] = field(default_factory=dict)  # job -> the trigger event's arrival (UNIX)
    outcomes: dict[str, int] = field(default_factory=dict)  # event status -> count
    unavailable: str = ""  # why the mode could not run
    periodic: float = 0.0  # event reads per job-hour due every ``events_interval``, past the run (added)
    note: str = ""  # e.g. a coalesced run whose platform has no batch read
    stretch: float = 1.0  # the account budget's factor on the poll interval at the window's end

    def per_job_hour(self, scale: float) -> float:
        """API calls per waiting job-hour at the reference interval: the window's, scaled, plus the
        periodic event reads that fall outside any short run (:attr:`periodic`)."""
        return self.calls_per_job_hour * scale + self.periodic

    @property
    def calls_per_job_hour(self) -> float:
        """Measured in the window, unscaled."""
        return (
            self.calls / self.waiting / self.window * 3600 if self.waiting and self.window else float("nan")
        )

    @property
    def cpu_per_poll_us(self) -> float:
        return self.cpu / self.polls * 1e6 if self.polls else float("nan")


def _kind(method: str, path: str, headers: dict[str, str]) -> str:
    """The kind of a request, for the breakdown: the operation (awsJson's ``X-Amz-Target``) or the
    method and the last path segment with ids left out."""
    target = headers.get("X-Amz-Target") or headers.get("x-amz-target")
    if target:
        return target.split(".")[-1]
    segments = [s for s in path.split("?")[0].split("/") if s]
    tail = segments[-1] if segments else ""
    if any(ch.isdigit() for ch in tail) and len(tail) > 8:  # a job id: the job itself
        tail = "{job}"
    return f"{method} {tail}"


def _is_throttle(exc: BaseException) -> bool:
    status = getattr(exc, "status", None)
    return status == 429 or "throttl" in str(exc).lower()


class _Counter:
    """Counts the provider's requests at its one send point (``AsyncTrainingPlatformClient._send``),
    by the task that sends them: the trigger of a job cancelled in the run (named
    ``bench-wait:<job id>``; its reads at the end are the cost of a change, not of waiting) or any
    other (the waiting jobs' triggers, the shared poller)."""

    def __init__(self, cancels: set[str]) -> None:
        self.cancels = cancels
        self.counting = False
        self.calls = 0  # in the window, not by a cancelled job's trigger
        self.by_kind: dict[str, int] = {}
        self.ended_calls = 0  # the whole run, by cancelled jobs' triggers
        self.total = 0
        self.throttled = 0

    def install(self) -> None:
        from airflow_training_provider.hooks import training_async

        send = training_async.AsyncTrainingPlatformClient._send
        counter = self

        async def counted(client: Any, request: Any) -> Any:
            counter.total += 1
            task = asyncio.current_task()
            name = task.get_name() if task is not None else ""
            if name.startswith("bench-wait:") and name.split(":", 1)[1] in counter.cancels:
                counter.ended_calls += 1
            elif counter.counting:
                counter.calls += 1
                kind = _kind(request.method, request.path, dict(request.headers or {}))
                counter.by_kind[kind] = counter.by_kind.get(kind, 0) + 1
            try:
                return await send(client, request)
            except Exception as exc:
                if _is_throttle(exc):
                    counter.throttled += 1
                raise

        training_async.AsyncTrainingPlatformClient._send = counted  # type: ignore[method-assign]


async def _triggers(args: argparse.Namespace, result: RunResult, jobs: list[str], cancels: set[str]) -> None:
    from airflow_training_provider.lifecycle.operations import Progress
    from airflow_training_provider.lifecycle.waiting import Polling
    from airflow_training_provider.platforms import get_dialect
    from airflow_training_provider.platforms.base import Dialect
    from airflow_training_provider.triggers import training_job

    counter = _Counter(cancels)
    counter.install()
    training_job.LOG_DRAIN_SECONDS = 0.0  # the event leaves when the poll saw the end (see module doc)
    in_window = {"on": False}
    base = training_job._CursorSavingReport

    class _SeeingReport(base):  # type: ignore[misc, valid-type]
        """The trigger's report, noting each job-status read delivered and the first terminal one."""

        def __call__(self, step: Any) -> Any:
            if isinstance(step, Progress):
                if in_window["on"]:
                    result.polls += 1
                if step.job.is_terminal and step.job.id not in result.seen:
                    result.seen[step.job.id] = time.time()
            return super().__call__(step)

    training_job._CursorSavingReport = _SeeingReport  # type: ignore[misc]
    options: dict[str, Any] = {"poll_interval": args.interval, "resume_settle": 0.0}
    if "coalesce" in Polling.model_fields:
        options["coalesce"] = result.mode == "coalesced"
    every = getattr(Polling(**options), "events_interval", None)
    warm_up = 2 * args.interval + min(5.0, args.interval)  # two: a thousand triggers take a while to start
    dialect = get_dialect(result.platform)
    caps = dialect.capabilities
    # as the trigger decides (AsyncTrainingPlatformClient.can_coalesce): the dialect has a batch read
    batch = getattr(type(dialect), "status_batch_request", None) is not getattr(
        Dialect, "status_batch_request", None
    )
    if options.get("coalesce") and not batch:
        result.note = "no batch read: polled per job"
    if (
        options.get("coalesce")
        and batch
        and every
        and every > warm_up + args.window
        and not caps.events_in_job
    ):
        # Coalesced, a waiting job's events endpoint is read on a change and every events_interval
        # after its first poll: none of those periodic reads falls in a short window. Added as their
        # rate (one per events_interval per job), not measured.
        result.periodic = 3600.0 / every if caps.events else 0.0
    conn_id = f"bench_{result.platform}"
    waiting = {"n": len(jobs)}

    async def wait(job_id: str) -> None:
        trigger = training_job.TrainingJobTrigger(conn_id=conn_id, job_id=job_id, event_cursor=0, **options)
        try:
            async for event in trigger.run():
                result.events[job_id] = time.time()
                status = event.payload.get("status", "?")
                result.outcomes[status] = result.outcomes.get(status, 0) + 1
                return
        finally:
            waiting["n"] -= 1

    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(wait(job_id), name=f"bench-wait:{job_id}") for job_id in jobs]
    Path(args.started).write_text(json.dumps(time.time()))  # the parent times its cancels from here
    await asyncio.sleep(warm_up)  # every first poll done
    counter.counting, in_window["on"] = True, True
    cpu0, t0 = time.process_time(), time.monotonic()
    samples: list[int] = []
    while time.monotonic() - t0 < args.window:
        samples.append(
            sum(
                1
                for job_id, task in zip(jobs, tasks, strict=True)
                if job_id not in cancels and not task.done()
            )
        )
        await asyncio.sleep(min(1.0, args.window / 20))
    result.cpu = time.process_time() - cpu0
    result.window = time.monotonic() - t0
    counter.counting, in_window["on"] = False, False
    result.stretch = max((b.stretch() for b in _budgets()), default=1.0)
    result.waiting = sum(samples) / len(samples)
    # the tail: every cancelled job's end seen (within an interval), not counted
    tail_end = time.monotonic() + args.interval + 15.0
    while time.monotonic() < tail_end and not cancels <= set(result.events):
        await asyncio.sleep(0.2)
    for task in tasks:
        task.cancel()
    _, pending = await asyncio.wait(tasks, timeout=30.0)
    if pending:  # a wait that does not end when cancelled is a defect: show where it hangs
        print(f"{len(pending)} waits still running 30 s after their cancel; the first ones:", file=sys.stderr)
        for task in list(pending)[:3]:
            task.print_stack(limit=30, file=sys.stderr)
        others = [t for t in asyncio.all_tasks() if t not in pending and t is not asyncio.current_task()]
        print(f"{len(others)} other tasks:", file=sys.stderr)
        for task in others[:5]:
            task.print_stack(limit=30, file=sys.stderr)
        sys.stderr.flush()
    await asyncio.gather(*tasks, return_exceptions=True)
    result.calls, result.calls_by_kind = counter.calls, counter.by_kind
    result.calls_total, result.throttled = counter.total, counter.throttled
    result.ended_calls = counter.ended_calls


def _budgets() -> list[Any]:
    """This process's account budgets (none before the provider had them)."""
    try:
        from airflow_training_provider import budget
    except ImportError:
        return []
    return list(budget._BUDGETS.values())


async def _ideal(args: argparse.Namespace, result: RunResult, jobs: list[str], url: str) -> None:
    """The baseline: one shared session, a bare GET + JSON of one TensorOne job per poll."""
    import aiohttp

    from airflow_training_devel.local_fixtures import LOCAL_SECRET

    counting = {"on": False}
    headers = {"Authorization": f"Bearer {LOCAL_SECRET}"}

    async def poll(session: aiohttp.ClientSession, job_id: str) -> None:
        await asyncio.sleep(random.uniform(0, args.interval))
        while True:
            async with session.get(f"{url}/v2/training/jobs/{job_id}", headers=headers) as r:
                await r.json()
            if counting["on"]:
                result.polls += 1
                result.calls += 1
            await asyncio.sleep(args.interval)

    connector = aiohttp.TCPConnector(keepalive_timeout=max(60.0, 2 * args.interval))
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = [asyncio.ensure_future(poll(session, job_id)) for job_id in jobs]
        Path(args.started).write_text(json.dumps(time.time()))
        await asyncio.sleep(args.interval + min(5.0, args.interval))
        counting["on"] = True
        cpu0, t0 = time.process_time(), time.monotonic()
        await asyncio.sleep(args.window)
        result.cpu, result.window = time.process_time() - cpu0, time.monotonic() - t0
        counting["on"] = False
        result.waiting = len(jobs)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _child(args: argparse.Namespace) -> int:
    """One mode of one platform at one size, in this process (``--child``)."""
    spec = json.loads(Path(args.child).read_text())
    result = RunResult(spec["platform"], len(spec["jobs"]), spec["mode"], args.interval)
    os.environ[f"AIRFLOW_CONN_BENCH_{result.platform.upper()}"] = spec["connection"]
    # Airflow and the provider imported, as in a triggerer process (the ideal's too)
    from airflow_training_provider.lifecycle.waiting import Polling
    from airflow_training_provider.triggers import training_job  # noqa: F401

    logging.getLogger("airflow").setLevel(logging.WARNING)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if result.mode == "coalesced" and "coalesce" not in Polling.model_fields:
        result.unavailable = "the provider has no coalesce option"
        Path(args.started).write_text(json.dumps(time.time()))
    elif result.mode == "ideal":
        asyncio.run(_ideal(args, result, spec["jobs"], spec["url"]))
    else:
        asyncio.run(_triggers(args, result, spec["jobs"], set(spec["cancels"])))
    Path(args.child).with_suffix(".out").write_text(json.dumps(asdict(result)))
    return 0


# -- the orchestration ------------------------------------------------------------------------------
@dataclass
class Row:
    """One platform x N x mode, as printed."""

    result: RunResult
    latencies: list[float]  # state change to seen (first terminal report), s
    event_latencies: list[float]  # state change to the trigger event, s
    cancelled: int
    seen: int
    server: dict[str, Any] | None = None


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _start_child(
    workdir: Path, args: argparse.Namespace, name: str, spec: dict[str, Any]
) -> tuple[subprocess.Popen, Path, Path]:
    job_file = workdir / f"{name}.json"
    job_file.write_text(json.dumps(spec))
    started = workdir / f"{name}.started"
    cmd = [sys.executable, __file__, "--child", str(job_file), "--started", str(started)]
    cmd += ["--interval", str(args.interval), "--window", str(args.window)]
    log = open(workdir / f"{name}.log", "wb")  # noqa: SIM115 - the child's; closed with the run
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return proc, job_file, started


def _wait_started(proc: subprocess.Popen, started: Path, log: Path, timeout: float = 120.0) -> float:
    deadline = time.monotonic() + timeout
    while not started.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(
                f"bench process did not start (exit {proc.returncode}); its log:\n{_tail(log)}"
            )
        time.sleep(0.1)
    time.sleep(0.05)
    return float(json.loads(started.read_text()))


def run_size(
    url: str, workdir: Path, args: argparse.Namespace, conn_type: str, size: int, ideal: bool
) -> list[Row]:
    """Both modes of one platform at one size, side by side (and the ideal baseline if ``ideal``)."""
    from airflow_training_devel.local_fixtures import LOCAL_FIXTURES
    from airflow_training_platform.control import LocalPlatformControl

    control = LocalPlatformControl(url, timeout=30)
    budget = {"api_budget": json.loads(args.api_budget)} if args.api_budget else {}
    connection = LOCAL_FIXTURES[conn_type].connection_json(url, **budget)
    t = time.monotonic()
    modes = [m for m in MODES if m in args.modes.split(",")]
    jobs = create_jobs(conn_type, size * len(modes))
    print(
        f"  {PLATFORM_NAMES[conn_type]}: {len(jobs)} jobs created in {time.monotonic() - t:.0f} s", flush=True
    )
    k = max(1, round(size * args.cancel_fraction))
    # the ideal reads TensorOne jobs (this size's own, or made for it now: not while others are timed)
    ideal_jobs = (jobs[:size] if conn_type == "tensorone" else _tensorone_jobs(size)) if ideal else []
    reset_server_counts(url)
    entries: list[tuple[str, dict[str, Any]]] = []
    for m, mode in enumerate(modes):
        own = jobs[m * size : (m + 1) * size]
        cancels = own[:: max(1, size // k)][:k]
        spec = {
            "platform": conn_type,
            "mode": mode,
            "jobs": own,
            "cancels": cancels,
            "connection": connection,
        }
        entries.append((f"{conn_type}-{size}-{mode}", spec))
    if ideal:
        spec = {"platform": "tensorone", "mode": "ideal", "jobs": ideal_jobs, "cancels": [], "url": url,
                "connection": LOCAL_FIXTURES["tensorone"].connection_json(url)}  # fmt: skip
        entries.append((f"ideal-{size}", spec))
    # side by side; --sequential: one mode at a time (the ideal beside the first), so that the
    # platform serves one process's polls (two thousand-job processes saturate two cores)
    groups = [entries] if not args.sequential else [[e for e in entries if e[1]["mode"] != "coalesced"],
                                                     [e for e in entries if e[1]["mode"] == "coalesced"]]  # fmt: skip
    rows = []
    for group in groups:
        rows += _run_group(workdir, args, control, group)
    counts = server_counts(url)
    if counts is not None:
        for row in rows:
            if row.result.mode != "ideal":
                row.server = counts.get(_engine_platform(conn_type))
    return rows


def _run_group(
    workdir: Path, args: argparse.Namespace, control: Any, entries: list[tuple[str, dict[str, Any]]]
) -> list[Row]:
    """Run the bench processes of ``entries`` (name, spec) at once: cancel their jobs from the
    console over their windows, and read what each measured against the platform's records."""
    children = {}
    rows = []
    try:
        for name, spec in entries:
            children[spec["mode"]] = (*_start_child(workdir, args, name, spec), spec["cancels"])
        # cancels from the console, spread evenly over each process's window
        schedule: list[tuple[float, str]] = []
        for proc, job_file, started, cancels in children.values():
            t0 = _wait_started(proc, started, job_file.with_suffix(".log"))
            window_start = t0 + 2 * args.interval + min(5.0, args.interval)  # the child's warm-up
            # over the window's first part, so that each is seen within the window (one interval later)
            spread = args.window - args.interval if args.window >= 2 * args.interval else args.window / 2
            for i, job_id in enumerate(cancels):
                schedule.append((window_start + (i + 0.5) * spread / len(cancels), job_id))
        _cancel_at(control, schedule)
        for mode, (proc, job_file, _started, cancels) in children.items():
            _finish(proc, job_file, mode, args)
            result = RunResult(**json.loads(job_file.with_suffix(".out").read_text()))
            latencies, event_latencies = [], []
            for job_id in cancels:
                changed = terminal_at(control.job(job_id))
                # the first terminal report; where none was made (an outcome other than the end), the event
                seen = result.seen.get(job_id, result.events.get(job_id))
                if changed is not None and seen is not None:
                    latencies.append(seen - changed)
                if changed is not None and job_id in result.events:
                    event_latencies.append(result.events[job_id] - changed)
            rows.append(Row(result, latencies, event_latencies, len(cancels), len(latencies)))
    finally:  # a failed run leaves no process of its own behind
        for proc, *_rest in children.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return rows


def _cancel_at(control: Any, schedule: list[tuple[float, str]], threads: int = 8) -> None:
    """Cancel each job from the console at its time (UNIX), a few at once: a cancel answered slowly
    by a busy platform holds up none of the later ones."""

    def cancel(at: float, job_id: str) -> None:
        time.sleep(max(0.0, at - time.time()))
        control.console_cancel(job_id, reason="bench: a state change at a known time")

    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(cancel, at, job_id) for at, job_id in sorted(schedule)]:
            future.result()


def _finish(proc: subprocess.Popen, job_file: Path, mode: str, args: argparse.Namespace) -> None:
    """Wait for a bench process (its warm-up, window and tail, and a minute); one that wrote its
    figures but does not exit is killed (by its PID), one that wrote none is an error."""
    out, log = job_file.with_suffix(".out"), job_file.with_suffix(".log")
    try:
        code = proc.wait(timeout=2 * args.interval + args.window + 15.0 + 60.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        if not out.exists():
            raise RuntimeError(
                f"bench process {mode} did not finish; the end of its log:\n{_tail(log)}"
            ) from None
        print(f"    ({mode}: its process did not exit after writing its figures: killed)", flush=True)
        return
    if code != 0 or not out.exists():
        raise RuntimeError(f"bench process {mode} failed (exit {code}); the end of its log:\n{_tail(log)}")


def _tail(log: Path, chars: int = 6000) -> str:
    """The end of a bench process's log (its directory is removed when the bench ends)."""
    return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"


_TENSORONE_JOBS: dict[int, list[str]] = {}


def _tensorone_jobs(size: int) -> list[str]:
    if size not in _TENSORONE_JOBS:
        _TENSORONE_JOBS[size] = create_jobs("tensorone", size)
    return _TENSORONE_JOBS[size]


def _engine_platform(conn_type: str) -> str:
    return "sagemaker" if conn_type == "aws" else conn_type


def _print_row(row: Row, scale: float) -> None:
    r = row.result
    if r.unavailable:
        print(f"    {r.mode:9s}: n/a ({r.unavailable})", flush=True)
        return
    if r.mode == "ideal":
        print(f"    {'ideal':9s}: {r.cpu_per_poll_us:6.0f} µs CPU per GET ({r.polls} GETs)", flush=True)
        return
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(r.calls_by_kind.items(), key=lambda kv: -kv[1]))
    periodic = f"; + {r.periodic:.1f}/job-hour of periodic event reads" if r.periodic else ""
    server = ""
    if row.server:
        server = f"; server counted {row.server.get('total')} for the platform, both modes, whole run"
    note = f" [{r.note}]" if r.note else ""
    if r.stretch > 1:
        note += f" [budget: interval stretched x{r.stretch:.1f} to {r.interval * r.stretch:,.0f} s]"
    if row.cancelled:
        note += f" [{r.ended_calls / row.cancelled:.1f} calls per cancelled job's wait, not counted]"
    print(
        f"    {r.mode:9s}{note}: {r.per_job_hour(scale):7.1f} calls/job-hour ({r.calls} in {r.window:.0f} s, "
        f"{r.waiting:.0f} waiting: {kinds}{periodic}), throttled {r.throttled}, seen {row.seen}/{row.cancelled} "
        f"p50/p95 {pct(row.latencies, 0.5):.1f}/{pct(row.latencies, 0.95):.1f} s (event "
        f"{pct(row.event_latencies, 0.5):.1f}/{pct(row.event_latencies, 0.95):.1f} s), "
        f"{r.cpu_per_poll_us:.0f} µs CPU per job-poll ({r.polls} job-polls){server}",
        flush=True,
    )


def _mode_cell(r: RunResult) -> str:
    notes = [r.note] if r.note else []
    if r.stretch > 1:
        notes.append(f"budget: every {r.interval * r.stretch:,.0f} s")
    return r.mode + (f" ({'; '.join(notes)})" if notes else "")


def table(rows: list[Row], scale: float, interval: float) -> str:
    """The markdown table for ``docs/scale.md``."""
    ideal = {row.result.size: row.result.cpu_per_poll_us for row in rows if row.result.mode == "ideal"}
    per_hour = "API calls per waiting job-hour" + (
        f" (scaled to {REFERENCE_INTERVAL:.0f} s)" if scale != 1 else ""
    )
    lines = [
        f"| platform | jobs | polling | {per_hour} | throttled | changes seen | change→seen p50 / p95 (s) "
        "| CPU per job-poll (µs) | × bare GET |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        r = row.result
        if r.mode == "ideal":
            continue
        name = PLATFORM_NAMES[r.platform]
        if r.unavailable:
            lines.append(f"| {name} | {r.size:,} | {r.mode} | n/a | | | | | |")
            continue
        base = ideal.get(r.size)
        ratio = f"{r.cpu_per_poll_us / base:.2f}" if base else ""
        lines.append(
            f"| {name} | {r.size:,} | {_mode_cell(r)} | {r.per_job_hour(scale):.1f} | {r.throttled} | {row.seen}/{row.cancelled} "
            f"| {pct(row.latencies, 0.5):.1f} / {pct(row.latencies, 0.95):.1f} | {r.cpu_per_poll_us:.0f} | {ratio} |"
        )
    for size, us in sorted(ideal.items()):
        lines.append(f"| bare aiohttp GET + JSON | {size:,} | one job per GET | | | | | {us:.0f} | 1.00 |")
    return "\n".join(lines)


def _plot(rows: list[Row], scale: float, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot (devel's bench extra)")
        return
    runs = [row.result for row in rows if row.result.mode != "ideal" and not row.result.unavailable]
    platforms = list(dict.fromkeys(r.platform for r in runs))
    series = list(dict.fromkeys((r.size, r.mode) for r in runs))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / max(1, len(series))
    for s, (size, mode) in enumerate(series):
        values = {r.platform: r.per_job_hour(scale) for r in runs if (r.size, r.mode) == (size, mode)}
        xs = [p + (s - (len(series) - 1) / 2) * width for p in range(len(platforms))]
        ax.bar(xs, [values.get(p, 0) for p in platforms], width, label=f"{size:,} jobs, {mode}",
               hatch="" if mode == "coalesced" else "//")  # fmt: skip
    ax.set_xticks(range(len(platforms)), [PLATFORM_NAMES[p] for p in platforms])
    ax.set_yscale("log")
    ax.set_ylabel("API calls per waiting job-hour")
    interval = runs[0].interval if runs else REFERENCE_INTERVAL
    scaled = f" (run at {interval:g} s, scaled)" if scale != 1 else ""
    ax.set_title(f"Waiting jobs at a {REFERENCE_INTERVAL:.0f} s poll interval, events on{scaled}")
    ax.axhline(5, color="grey", linestyle=":", linewidth=1, label="issue 27's target: 5")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"plot saved to {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000", help="waiting jobs per platform and mode")
    parser.add_argument("--platforms", default=",".join(PLATFORMS), help="connection types")
    parser.add_argument("--interval", type=float, default=REFERENCE_INTERVAL, help="poll_interval (s)")
    parser.add_argument(
        "--window", type=float, default=None, help="counted seconds per run (default: 1.5 intervals)"
    )
    parser.add_argument("--cancel-fraction", type=float, default=0.1, help="jobs cancelled per run")
    parser.add_argument("--modes", default=",".join(MODES), help="per-job, coalesced or both")
    parser.add_argument(
        "--sequential", action="store_true", help="run the two modes one after the other, not side by side"
    )
    parser.add_argument(
        "--api-budget",
        default=None,
        help="the triggers' connections' api_budget extra as JSON (default: the platform's documented "
        "rates; '{\"read_per_hour\": null}' turns TensorOne's off)",
    )
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write every run's figures here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--started", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.window is None:
        args.window = 1.5 * args.interval
    if args.child:
        return _child(args)
    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="bench-quota-airflow-"))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    from airflow_training_devel.local_fixtures import LOCAL_FIXTURES, server_options
    from airflow_training_platform.server import LocalPlatformServer

    logging.getLogger("airflow").setLevel(logging.WARNING)
    scale = args.interval / REFERENCE_INTERVAL
    if scale != 1:
        print(
            f"SCALED: polled every {args.interval:g} s, not {REFERENCE_INTERVAL:.0f} s; per-hour figures x {scale:g} "
            f"(the calls of the same number of polls at {REFERENCE_INTERVAL:.0f} s)"
        )
    print(
        f"window {args.window:g} s counted per run after a {2 * args.interval + min(5.0, args.interval):g} s warm-up; "
        "per-hour figures extrapolated from it",
        flush=True,
    )
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-quota-") as tmp:
        workdir = Path(tmp)
        with LocalPlatformServer(str(workdir / "platform"), gpus=1, **server_options()) as server:
            # the jobs are made on connections without a budget (TensorOne documents 10 creates an
            # hour): setting up is not what is measured; the triggers' connections keep the
            # platform's documented budget unless --api-budget says otherwise
            unmetered = {"read_per_hour": None, "write_per_hour": None, "create_per_hour": None}
            for fixture in LOCAL_FIXTURES.values():
                key = f"AIRFLOW_CONN_{fixture.conn_id.upper()}"
                os.environ[key] = fixture.connection_json(server.url, api_budget=unmetered)
            for size in [int(s) for s in args.sizes.split(",")]:
                for p, conn_type in enumerate(args.platforms.split(",")):
                    print(f"{size:,} waiting jobs per mode, {PLATFORM_NAMES[conn_type]}:", flush=True)
                    for row in run_size(server.url, workdir, args, conn_type, size, ideal=p == 0):
                        _print_row(row, scale)
                        rows.append(row)
    print()
    print(table(rows, scale, args.interval))
    if args.plot:
        _plot(rows, scale, args.plot)
    if args.json:
        args.json.write_text(json.dumps([_figures(row, scale) for row in rows], indent=1))
    return 0


def _figures(row: Row, scale: float) -> dict[str, Any]:
    """One run's printed figures (``--json``)."""
    r = row.result
    return {
        "platform": r.platform,
        "size": r.size,
        "mode": r.mode,
        "unavailable": r.unavailable,
        "note": r.note,
        "stretch": r.stretch,
        "calls_per_job_hour": r.per_job_hour(scale),
        "periodic_events_per_job_hour": r.periodic,
        "calls_by_kind": r.calls_by_kind,
        "calls_per_cancelled_job": r.ended_calls / row.cancelled if row.cancelled else None,
        "throttled": r.throttled,
        "cancelled": row.cancelled,
        "seen": row.seen,
        "seen_p50": pct(row.latencies, 0.5),
        "seen_p95": pct(row.latencies, 0.95),
        "event_p95": pct(row.event_latencies, 0.95),
        "cpu_per_poll_us": r.cpu_per_poll_us,
        "polls": r.polls,
        "outcomes": r.outcomes,
        "server": row.server,
    }


if __name__ == "__main__":
    sys.exit(main())
