"""A container's init for a user program whose command is a shell (``sh -c "python train.py"``).

Run as a script (``python container_init.py -- ARGV...``, see :func:`wrapped`): it starts ``ARGV``
as its child, in its own (the program's) process group, and exits with the child's status. It is
what keeps the stop contract of :mod:`.programs` (SIGTERM to the group, SIGKILL after the grace)
meaningful when the command is a shell: the shell dies of the SIGTERM at once, while the program
it started saves its checkpoint; without an init the group leader (the shell) would be gone at once
and the runner would SIGKILL the rest of the group before the save. So, like a container's PID 1:

* the init itself survives SIGTERM/SIGINT (a handler that does nothing; the signal still reaches
  every member of the group, and the child gets the default disposition back at ``exec``);
* it is the *child subreaper* of its descendants (``PR_SET_CHILD_SUBREAPER``): the program a shell
  started is reparented to it when the shell dies;
* when the main child exits without a stop, it exits at once (a container ends with its main
  process; the runner SIGKILLs what is left); after a SIGTERM it waits until every descendant has
  exited (the runner's SIGKILL after the grace bounds that wait).

The exit status is the main child's (a child killed by signal N: the init kills itself with N, so
the runner sees the same ``-N``). Standard library only, nothing imported from this package: it
runs with the program's clean environment.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36
"""``prctl`` option (``<linux/prctl.h>``)."""


def wrapped(argv: list[str], python: str = sys.executable) -> list[str]:
    """``argv`` run under this init with ``python`` (the server's interpreter, ``-I``: no site or
    environment)."""
    return [python, "-I", os.path.abspath(__file__), "--", *argv]


def main(argv: list[str]) -> int:
    stopping = {"signal": False}

    def on_stop(_signum: int, _frame: object) -> None:
        stopping["signal"] = True

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: orphans go to PID 1, the stop is a plain one
        pass
    try:
        child = subprocess.Popen(argv)
    except OSError as exc:
        print(f"cannot run {argv[0]!r}: {exc}", file=sys.stderr, flush=True)
        return 127
    status: int | None = None
    while True:
        try:
            pid, raw = os.wait()
        except ChildProcessError:  # no descendant left
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
            continue
        if pid == child.pid:
            status = os.waitstatus_to_exitcode(raw)
            if not stopping["signal"]:
                break
    assert status is not None
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(main(args[1:] if args[:1] == ["--"] else args))
