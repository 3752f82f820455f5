"""The container init a shell command runs under (``engine/container_init.py``), as real processes:
the job ends with its main process, unless a SIGTERM came — then the program the shell started
gets to save and exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from airflow_training_platform.engine.container_init import wrapped

SAVER = (
    "import signal, sys, time\n"
    "def stop(*_):\n"
    "    time.sleep(0.5)\n"
    "    open(sys.argv[1], 'w').write('saved')\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "print('ready', flush=True)\n"
    "time.sleep(30)\n"
)


def test_without_a_stop_the_init_ends_with_its_main_process_and_keeps_its_status():
    started = time.monotonic()
    init = subprocess.Popen(wrapped(["sh", "-c", "sleep 30 & exit 3"]), start_new_session=True)
    try:
        assert init.wait(timeout=20) == 3 and time.monotonic() - started < 10
    finally:
        os.killpg(init.pid, signal.SIGKILL)  # the runner's part: what is left of the group
    assert subprocess.run(wrapped(["no-such-program-here"]), timeout=20).returncode == 127


def test_after_a_sigterm_to_the_group_the_shells_program_saves_before_the_init_exits(tmp_path):
    saved = tmp_path / "saved"
    init = subprocess.Popen(
        wrapped(["sh", "-c", f'{sys.executable} -c "$0" {saved}', SAVER]),
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert init.stdout is not None and init.stdout.readline() == b"ready\n"
    os.killpg(init.pid, signal.SIGTERM)  # the stop contract: the whole group
    returncode = init.wait(timeout=20)
    assert saved.read_text() == "saved", "the init waited for the program the shell started"
    assert returncode == -signal.SIGTERM  # the main process (the shell) died of the SIGTERM
