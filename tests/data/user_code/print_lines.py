"""A user's training program that only prints (the ``stream_logs`` tests): ``LINES`` numbered lines
on stdout in bursts of ten, ``BURST_SECONDS`` apart (so the job spans several polls), one line of
3,000 characters, the value of ``DB_PASSWORD`` (a secret the spec resolved), then a traceback on
stderr and exit 1 when ``FAIL`` is ``1`` (its last lines must still reach the task log). Stopped
(SIGTERM), it says it wrote its checkpoint and exits, as a training program does."""

from __future__ import annotations

import os
import signal
import sys
import time


def stop(signum, frame):
    print("SIGTERM: checkpoint ckpt-final written", flush=True)
    sys.exit(143)


signal.signal(signal.SIGTERM, stop)

lines = int(os.environ.get("LINES", "40"))
for i in range(lines):
    print(f"line {i:03d} of {lines}", flush=True)
    if i % 10 == 9:
        time.sleep(float(os.environ.get("BURST_SECONDS", "0.3")))
print("x" * 3000, flush=True)
print(f"connecting with password {os.environ.get('DB_PASSWORD', '-')}", flush=True)
if os.environ.get("FAIL") == "1":
    print("Traceback (most recent call last):", file=sys.stderr, flush=True)
    print("RuntimeError: the last words", file=sys.stderr, flush=True)
    sys.exit(1)
print("done", flush=True)
