"""Kill-path benchmark: runs the K-scenarios on a real Airflow stack and prints one row per path.

    .venv/bin/python scripts/killpath_benchmark.py [--runs N] [--only k1,k10,...]

Columns: expected and actual cancels (accepted cancel requests the platform recorded), false
cancels, duplicate submits, and the latency from the Airflow action (or the deadline) to the cancel
request reaching the platform — median and max over the runs; then one row per path over all
platforms' runs: median, p95 and max. Starts and stops its own stack.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from airflow_training_devel.killpaths import KillPathEnv, pairs, run_scenarios
from airflow_training_devel.killpaths.flavors import ALL_FLAVORS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated scenario prefixes, e.g. k1,k10")
    parser.add_argument(
        "--platforms", default=",".join(ALL_FLAVORS), help=f"comma-separated, of {','.join(ALL_FLAVORS)}"
    )
    args = parser.parse_args()
    prefixes = tuple(w.strip() + "_" for w in args.only.split(",") if w.strip())
    flavors = [f.strip() for f in args.platforms.split(",") if f.strip()]
    wanted = {
        (key, flavor) for key, flavor in pairs(flavors=flavors) if not prefixes or key.startswith(prefixes)
    }

    root = Path(tempfile.mkdtemp(prefix="killpath-bench-"))
    started = time.monotonic()
    env = KillPathEnv(root)
    print(f"stack up in {time.monotonic() - started:.0f} s ({root})", flush=True)
    runs: dict[tuple[str, str], list] = {pair: [] for pair in wanted}
    try:
        for i in range(args.runs):
            t0 = time.monotonic()
            for pair, result in run_scenarios(env.stack, env.platform, wanted).items():
                runs[pair].append(result)
                if isinstance(result, BaseException):
                    print(f"run {i + 1} {pair}: FAILED {result}", flush=True)
            print(f"run {i + 1}/{args.runs} done in {time.monotonic() - t0:.0f} s", flush=True)
    finally:
        env.stop()

    header = ("path", "platform", "expected cancels", "actual cancels", "false cancels", "duplicate submits",
              "latency median s", "latency max s", "ok runs")  # fmt: skip
    print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for (name, flavor), results in sorted(
        runs.items(), key=lambda kv: (int(re.match(r"k(\d+)", kv[0][0]).group(1)), kv[0])
    ):
        ok = [r for r in results if not isinstance(r, BaseException)]
        if not ok:
            print(f"| {name} | {flavor} | - | - | - | - | - | - | 0/{len(results)} |")
            continue
        latencies = [o.latency for o in ok if o.latency is not None]
        print(
            f"| {ok[0].case} | {flavor} | {sum(o.expect_cancel for o in ok)} | {sum(len(o.cancels) for o in ok)} "
            f"| {sum(o.false_cancels for o in ok)} | {sum(o.duplicate_submits for o in ok)} "
            f"| {statistics.median(latencies):.2f} | {max(latencies):.2f} | {len(ok)}/{len(results)} |"
            if latencies
            else f"| {ok[0].case} | {flavor} | {sum(o.expect_cancel for o in ok)} | {sum(len(o.cancels) for o in ok)} "
            f"| {sum(o.false_cancels for o in ok)} | {sum(o.duplicate_submits for o in ok)} | - | - "
            f"| {len(ok)}/{len(results)} |"
        )
    print_pooled(runs)
    return 0


def print_pooled(runs: dict[tuple[str, str], list]) -> None:
    """One row per path over every platform's runs: the figures the README's goal is stated in."""
    by_path: dict[str, list[float]] = {}
    for (name, _), results in runs.items():
        by_path.setdefault(name, []).extend(
            r.latency for r in results if not isinstance(r, BaseException) and r.latency is not None
        )
    print("\n| path | runs | median s | p95 s | max s |\n|---|---|---|---|---|")
    for name, latencies in sorted(
        by_path.items(), key=lambda kv: (int(re.match(r"k(\d+)", kv[0]).group(1)), kv[0])
    ):
        if len(latencies) < 2:
            continue
        p95 = statistics.quantiles(latencies, n=20, method="inclusive")[18]
        print(
            f"| {name} | {len(latencies)} | {statistics.median(latencies):.2f} | {p95:.2f} | {max(latencies):.2f} |"
        )


if __name__ == "__main__":
    sys.exit(main())
