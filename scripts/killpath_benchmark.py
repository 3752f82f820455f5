"""Kill-path benchmark: runs the K-scenarios on a real Airflow stack and prints one row per path.

    .venv/bin/python scripts/killpath_benchmark.py [--runs N] [--only k1,k10,...]

Columns: expected and actual cancels (accepted cancel requests the platform recorded), false
cancels, duplicate submits, and the latency from the Airflow action (or the deadline) to the cancel
request reaching the platform — median and max over the runs. Starts and stops its own stack.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.killpaths.conftest import start_kill_path_stack  # noqa: E402
from tests.killpaths.scenarios import SCENARIOS, Platform  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated scenario name prefixes, e.g. k1,k10")
    args = parser.parse_args()
    wanted = [w.strip() for w in args.only.split(",") if w.strip()]
    scenarios = [f for f in SCENARIOS if not wanted or any(f.__name__.startswith(w + "_") for w in wanted)]

    root = Path(tempfile.mkdtemp(prefix="killpath-bench-"))
    started = time.monotonic()
    server, stack = start_kill_path_stack(root)
    print(f"stack up in {time.monotonic() - started:.0f} s ({root})", flush=True)
    platform = Platform(server.url)
    rows = []
    try:
        for scenario in scenarios:
            outcomes = []
            for _ in range(args.runs):
                try:
                    outcomes.append(scenario(stack, platform))
                except Exception as exc:  # a failed run is reported, not hidden
                    print(f"{scenario.__name__}: run failed: {exc}", flush=True)
            if not outcomes:
                rows.append((scenario.__name__, "-", "-", "-", "-", "-", "-", "ERROR"))
                continue
            o = outcomes[0]
            expected = sum(1 if x.expect_cancel else 0 for x in outcomes)
            actual = sum(len(x.cancels) for x in outcomes)
            latencies = [x.latency for x in outcomes if x.latency is not None]
            rows.append(
                (
                    o.case,
                    f"{expected}/{len(outcomes)}",
                    str(actual),
                    str(sum(x.false_cancels for x in outcomes)),
                    str(sum(x.duplicate_submits for x in outcomes)),
                    f"{statistics.median(latencies):.2f}" if latencies else "-",
                    f"{max(latencies):.2f}" if latencies else "-",
                    f"{len(outcomes)}/{args.runs} ok",
                )
            )
            print(" | ".join(rows[-1]), flush=True)
    finally:
        stack.stop()
        server.stop()
    header = (
        "path",
        "expected cancels",
        "actual cancels",
        "false cancels",
        "duplicate submits",
        "latency median s",
        "latency max s",
        "runs",
    )
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
