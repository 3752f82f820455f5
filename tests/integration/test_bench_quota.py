"""`make bench`'s quota part (``scripts/bench_quota.py``) runs end to end at a tiny scale, so it does
not rot between the benchmark's runs: its own local platform, jobs created through the sync hook,
triggers in one event loop per mode, console cancels seen, the table and the JSON (the plot needs
matplotlib, which `make bench` installs and `make test` does not)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_quota.py"


@pytest.mark.exclusive  # three processes and a platform of its own, timed polls: stage 2, alone
def test_quota_bench_smoke(tmp_path):
    figures = tmp_path / "figures.json"
    cmd = [sys.executable, str(SCRIPT), "--sizes", "4", "--platforms", "aws,pai", "--interval", "1"]
    cmd += ["--window", "3", "--cancel-fraction", "0.5", "--json", str(figures)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "SCALED: polled every 1 s, not 30 s" in done.stdout
    assert "| platform | jobs | polling |" in done.stdout and "| bare aiohttp GET + JSON | 4 |" in done.stdout
    runs = {(f["platform"], f["mode"]): f for f in json.loads(figures.read_text())}
    assert set(runs) == {("aws", "per-job"), ("aws", "coalesced"), ("pai", "per-job"), ("pai", "coalesced"),
                         ("tensorone", "ideal")}  # fmt: skip
    describe, search = runs["aws", "per-job"], runs["aws", "coalesced"]
    # per-job polling at (scaled) 30 s: one DescribeTrainingJob a poll is 120 an hour
    assert 80 <= describe["calls_per_job_hour"] <= 180, describe
    assert set(describe["calls_by_kind"]) == {"DescribeTrainingJob"}, describe
    # coalesced: one Search a round for all four; a job's own Describe only for its end (the cancels)
    assert 2 <= search["calls_by_kind"]["Search"] <= 5, search  # a round a second in the 3 s window
    assert search["calls_by_kind"].get("DescribeTrainingJob", 0) <= 1, search  # the ends: counted apart
    assert search["calls_per_cancelled_job"] >= 1, search  # its first read and its end's own read
    assert search["calls_per_job_hour"] < describe["calls_per_job_hour"], search
    # PAI, polled per job, reads its events at each poll too
    get_and_events = runs["pai", "per-job"]
    assert 160 <= get_and_events["calls_per_job_hour"] <= 360, get_and_events
    assert get_and_events["calls_by_kind"]["GET events"] >= get_and_events["calls_by_kind"]["GET {job}"] - 2
    for run in runs.values():
        if run["mode"] == "ideal":
            assert run["polls"] > 0 and run["cpu_per_poll_us"] > 0, run
            continue
        # both console cancels seen, each within about one (1 s) interval of the state change
        assert run["cancelled"] == 2 and run["seen"] == 2, run
        assert 0 <= run["seen_p95"] <= 2.5, run
        assert run["outcomes"].get("terminal", 0) >= 2 and run["throttled"] == 0, run
        assert run["polls"] > 0 and run["cpu_per_poll_us"] > 0, run
