"""`make bench`: what a waiting training job costs the triggerer, against baselines, in one run.

N pollers run in ONE event loop, as the triggerer runs triggers, in a fresh process per variant and
size with Airflow and the provider imported (as in a triggerer), against a minimal loopback HTTP
stub in another process that answers a documented TensorOne job body (a running job)
and counts requests and new TCP connections. Variants:

* ``product``   — the real ``TrainingJobTrigger.run()`` (TensorOne connection to the stub);
* ``ideal``     — one shared aiohttp session, a bare GET + JSON per poll;
* ``session``   — a new aiohttp session per poll (what a trigger that opens one per poll costs);
* ``lookup``    — the same plus an Airflow connection lookup per poll.

Each poller starts at a random point of the interval. Per variant and size: CPU per poll (this
process's CPU / polls served), polls served vs due, new connections per poll, event-loop lag
p50/p99/max (a 50 ms ticker's overshoot), poll-to-poll interval p95/max (from the stub), memory
per poller (RSS growth / N), worst GC pause. Prints a table and the ratios; ``--plot`` saves CPU per
poll against pollers as a PNG (matplotlib, if installed).

    python scripts/bench_triggers.py [--sizes 1000,5000,10000] [--interval 1,1,30] [--window 20]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import random
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JOB_BODY = {
    "jobId": "job_bench",
    "name": "bench-run",
    "status": "running",
    "progress": {
        "currentEpoch": 1,
        "totalEpochs": 2,
        "currentStep": 300,
        "totalSteps": 800,
        "percentComplete": 37.5,
        "estimatedTimeRemaining": "40m",
    },
    "metrics": {
        "loss": 1.02,
        "validationLoss": 1.10,
        "learningRate": 0.0002,
        "throughput": {"samplesPerSecond": 30.1, "tokensPerSecond": 1500, "stepTime": 1.1},
    },
    "checkpoints": [
        {
            "checkpointId": "ckpt_epoch_1",
            "epoch": 1,
            "step": 400,
            "metrics": {"loss": 1.0},
            "size": "1.1GB",
            "createdAt": "2025-03-01T10:40:00Z",
        }
    ],
    "costs": {
        "currentCost": 3.2,
        "estimatedTotalCost": 9.9,
        "costBreakdown": {"gpuCost": 3.0, "storageCost": 0.2},
    },
    "timestamps": {
        "createdAt": "2025-03-01T10:00:00Z",
        "startedAt": "2025-03-01T10:06:00Z",
        "lastUpdated": "2025-03-01T10:45:00Z",
    },
}
API_KEY = "bench-key"


# -- the stub (its own process: its CPU is not counted) -------------------------------------------
def serve(port: int) -> None:
    from aiohttp import web

    stats: dict[str, Any] = {"requests": 0, "connections": set(), "times": {}}

    async def job(request: web.Request) -> web.Response:
        stats["requests"] += 1
        peer = request.transport.get_extra_info("peername") if request.transport else None
        stats["connections"].add(peer)
        stats["times"].setdefault(request.match_info["job_id"], []).append(time.monotonic())
        body = dict(JOB_BODY, jobId=request.match_info["job_id"])
        return web.json_response(body)

    async def read_stats(request: web.Request) -> web.Response:
        gaps = [b - a for ts in stats["times"].values() for a, b in zip(ts, ts[1:], strict=False)]
        out = {"requests": stats["requests"], "connections": len(stats["connections"]), "gaps": gaps}
        return web.json_response(out)

    async def reset(request: web.Request) -> web.Response:
        stats.update(requests=0, connections=set(), times={})
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/v2/training/jobs/{job_id}", job)
    app.router.add_get("/_stats", read_stats)
    app.router.add_post("/_reset", reset)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, keepalive_timeout=300)


# -- the pollers ------------------------------------------------------------------------------------
@dataclass
class Result:
    variant: str
    pollers: int
    interval: float
    polls: int = 0
    due: float = 0.0
    cpu: float = 0.0
    connections: int = 0
    lag: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    rss_per_poller: float = 0.0
    gc_max: float = 0.0
    gc_full: list[float] = field(default_factory=list)  # each full (generation 2) collection, s
    slow_callbacks: list[str] = field(default_factory=list)  # asyncio debug: callbacks over 100 ms

    @property
    def cpu_per_poll_us(self) -> float:
        return self.cpu / self.polls * 1e6 if self.polls else float("inf")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def _product(i: int, interval: float, url: str) -> None:
    from airflow_training_provider.triggers.training_job import TrainingJobTrigger

    trigger = TrainingJobTrigger(conn_id="bench", job_id=f"job_{i}", poll_interval=interval, resume_settle=0)
    async for _ in trigger.run():
        return


async def _ideal(i: int, interval: float, url: str, session) -> None:
    while True:
        async with session.get(
            f"{url}/v2/training/jobs/job_{i}", headers={"Authorization": f"Bearer {API_KEY}"}
        ) as r:
            await r.json()
        await asyncio.sleep(interval)


async def _new_session(i: int, interval: float, url: str, lookup: bool) -> None:
    import aiohttp

    while True:
        if lookup:
            from airflow.providers.common.compat.connection import get_async_connection

            await get_async_connection("bench")
        async with aiohttp.ClientSession() as session:
            async with session.get(
                f"{url}/v2/training/jobs/job_{i}", headers={"Authorization": f"Bearer {API_KEY}"}
            ) as r:
                await r.json()
        await asyncio.sleep(interval)


class _SlowCallbacks(logging.Handler):
    """asyncio debug mode's "Executing <callback> took N seconds" warnings, collected."""

    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Executing"):
            self.into.append(message)


async def _warm_up(variant: str, url: str, shared) -> None:
    """A few pollers of ``variant`` for a couple of polls, then gone."""
    runs = {
        "product": lambda i: _product(i, 0.2, url),
        "ideal": lambda i: _ideal(i, 0.2, url, shared),
    }
    make = runs.get(variant, lambda i: _new_session(i, 0.2, url, lookup=variant == "lookup"))
    tasks = [asyncio.ensure_future(make(-1 - i)) for i in range(3)]
    await asyncio.sleep(1.0)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def run_variant(variant: str, pollers: int, interval: float, window: float, url: str) -> Result:
    import aiohttp
    import requests

    requests.post(f"{url}/_reset", timeout=10)
    result = Result(variant, pollers, interval)
    if variant != "product":  # the product's first trigger starts it (when the setting is on)
        from airflow_training_provider.triggers.heap import start_gc_freezer

        start_gc_freezer()
    shared = aiohttp.ClientSession() if variant == "ideal" else None
    await _warm_up(variant, url, shared)  # imports and first-use caches are not per-poller memory
    gc.collect()
    rss0 = _rss()

    async def start(i: int) -> None:
        await asyncio.sleep(random.uniform(0, interval))  # spread over the interval
        if variant == "product":
            await _product(i, interval, url)
        elif variant == "ideal":
            await _ideal(i, interval, url, shared)
        else:
            await _new_session(i, interval, url, lookup=variant == "lookup")

    tasks = [asyncio.ensure_future(start(i)) for i in range(pollers)]
    # every poller started (within one interval) and polled once (the product first waits for its
    # job's phase in the interval: within one more)
    await asyncio.sleep(2 * interval + min(5.0, interval))
    rss1 = _rss()
    requests.post(f"{url}/_reset", timeout=10)
    gc_pauses: list[float] = []
    gc_started: list[float] = []

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_started.append(time.perf_counter())
        elif gc_started:
            gc_pauses.append(time.perf_counter() - gc_started.pop())
            if info["generation"] == 2:
                result.gc_full.append(gc_pauses[-1])

    gc.callbacks.append(on_gc)
    debug = asyncio.get_running_loop().get_debug()
    if debug:  # a slow callback is then the code's own, not a collection that happened to run in it
        gc.disable()
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.05)
            result.lag.append(time.perf_counter() - t - 0.05)

    slow = _SlowCallbacks(result.slow_callbacks)
    logging.getLogger("asyncio").addHandler(slow)
    tick = asyncio.ensure_future(ticker())
    cpu0, t0 = time.process_time(), time.monotonic()
    await asyncio.sleep(window)
    result.cpu = time.process_time() - cpu0
    elapsed = time.monotonic() - t0
    gc.callbacks.remove(on_gc)
    if debug:
        gc.enable()
    logging.getLogger("asyncio").removeHandler(slow)
    stop.set()
    await tick
    stats = await asyncio.to_thread(lambda: requests.get(f"{url}/_stats", timeout=60).json())
    result.polls, result.connections, result.gaps = stats["requests"], stats["connections"], stats["gaps"]
    result.due = pollers * elapsed / interval
    result.rss_per_poller = (rss1 - rss0) / pollers
    result.gc_max = max(gc_pauses, default=0.0)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if shared is not None:
        await shared.close()
    await asyncio.sleep(0.5)  # let closed sessions release their connections
    return result


def _run_in_fresh_process(
    variant: str, size: int, interval: float, window: float, url: str, debug: bool, gc_freeze: float
) -> Result:
    """One variant at one size in a process of its own: its heap, memory and GC are its own."""
    cmd = [sys.executable, __file__, "--one", variant, str(size), str(interval), str(window), url]
    env = dict(os.environ)
    if gc_freeze:  # the product reads it as a triggerer would; the baselines get the same freezer
        env["AIRFLOW__TRAINING_PROVIDER__TRIGGERER_GC_FREEZE_INTERVAL"] = str(gc_freeze)
    out = subprocess.run(
        cmd + (["--asyncio-debug"] if debug else []), capture_output=True, text=True, check=True, env=env
    )
    return Result(**json.loads(out.stdout.strip().splitlines()[-1]))


def _one(variant: str, size: int, interval: float, window: float, url: str, debug: bool) -> int:
    import dataclasses

    # Every variant runs beside Airflow and the provider, imported as in a triggerer process.
    import airflow_training_provider.triggers.training_job  # noqa: F401

    logging.getLogger("airflow").setLevel(logging.WARNING)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # a new session per poll: many sockets
    result = asyncio.run(run_variant(variant, size, interval, window, url), debug=debug)
    print(json.dumps(dataclasses.asdict(result)))
    return 0


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--interval", default="1,1,30", help="poll interval (s) per size")
    parser.add_argument("--window", type=float, default=20.0, help="measured seconds per run")
    parser.add_argument("--variants", default="product,ideal,session,lookup")
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument(
        "--asyncio-debug",
        action="store_true",
        help="run the loop in asyncio debug mode (GC off while measuring) and report callbacks that "
        "held it over 100 ms",
    )
    parser.add_argument(
        "--gc-freeze",
        type=float,
        default=0.0,
        help="[training_provider] triggerer_gc_freeze_interval = this (seconds) for the product, and "
        "the same freezer in the baselines' processes",
    )
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--one", nargs=5, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return 0
    if args.one is not None:
        variant, size, interval, window, url = args.one
        return _one(variant, int(size), float(interval), float(window), url, args.asyncio_debug)
    from airflow_training_platform.server import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    os.environ["AIRFLOW_CONN_BENCH"] = json.dumps(
        {"conn_type": "tensorone", "host": url, "password": API_KEY}
    )
    stub = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    results: list[Result] = []
    try:
        import requests

        for _ in range(100):
            try:
                requests.get(f"{url}/_stats", timeout=1)
                break
            except requests.RequestException:
                time.sleep(0.1)
        sizes = [int(s) for s in args.sizes.split(",")]
        intervals = [float(s) for s in args.interval.split(",")]
        for size, interval in zip(sizes, intervals, strict=True):
            window = max(args.window, 2 * interval)
            for variant in args.variants.split(","):
                if variant == "lookup" and size > 1000:
                    continue  # the slowest baseline saturates the loop long before
                r = _run_in_fresh_process(
                    variant, size, interval, window, url, args.asyncio_debug, args.gc_freeze
                )
                results.append(r)
                print(
                    f"{variant:8s} n={size:6d} every {interval:4.0f} s: {r.cpu_per_poll_us:7.0f} µs/poll, "
                    f"served {r.polls}/{r.due:.0f}, new conns/poll {r.connections / max(r.polls, 1):.2f}, "
                    f"lag p50/p99/max {pct(r.lag, 0.5) * 1e3:.0f}/{pct(r.lag, 0.99) * 1e3:.0f}/{max(r.lag, default=0) * 1e3:.0f} ms, "
                    f"gap p95/max {pct(r.gaps, 0.95):.2f}/{max(r.gaps, default=0):.2f} s, "
                    f"{r.rss_per_poller / 1024:.1f} KB/poller, worst GC {r.gc_max * 1e3:.0f} ms "
                    f"(full collections: {len(r.gc_full)}, {', '.join(f'{t * 1e3:.0f}' for t in r.gc_full)} ms)"
                    + (f", slow callbacks {len(r.slow_callbacks)}" if args.asyncio_debug else ""),
                    flush=True,
                )
                for message in r.slow_callbacks[:5]:
                    print(f"    {message[:120]} ... {message[-60:]}")
    finally:
        stub.terminate()
        stub.wait(10)
    print("\nratios (CPU per poll):")
    by = {(r.variant, r.pollers): r for r in results}
    for size in sorted({r.pollers for r in results}):
        product = by.get(("product", size))
        if product is None:
            continue
        for other in ("ideal", "session", "lookup"):
            if (other, size) in by:
                o = by[(other, size)]
                print(
                    f"  n={size}: product/{other} = {product.cpu_per_poll_us / o.cpu_per_poll_us:.2f}"
                    f"   {other}/product = {o.cpu_per_poll_us / product.cpu_per_poll_us:.2f}"
                )
    if args.plot:
        _plot(results, args.plot)
    return 0


def _plot(results: list[Result], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for variant in dict.fromkeys(r.variant for r in results):
        points = sorted((r.pollers, r.cpu_per_poll_us) for r in results if r.variant == variant)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=variant)
    ax.set_xlabel("concurrent pollers in one event loop")
    ax.set_ylabel("CPU per poll (µs)")
    ax.set_xscale("log")
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"plot saved to {path}")


if __name__ == "__main__":
    sys.exit(main())
