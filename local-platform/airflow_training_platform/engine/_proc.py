"""Child-process helpers: make children die with their parent (Linux ``PR_SET_PDEATHSIG``)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1

_libc = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:  # pragma: no cover - exotic libc
        _libc = None


def pdeathsig_preexec(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """Return a ``preexec_fn`` for :class:`subprocess.Popen` that asks Linux to send ``sig`` to the child
    when its parent dies, or None on other systems.

    Caveat (Linux semantics): the signal fires when the *thread* that forked the child exits, so spawn
    from a thread that lives as long as the children should. If the parent already died before the
    child's ``prctl`` call, the child exits at once (status 1).
    """
    if _libc is None:
        return None
    parent = os.getpid()
    prctl = _libc.prctl

    def _preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return _preexec


def set_pdeathsig(parent: int, sig: int = signal.SIGKILL) -> None:
    """In a forked child of ``parent`` (its pid): ask Linux to send ``sig`` when the parent dies
    (no-op elsewhere); exit at once if the parent is already gone."""
    if _libc is None:
        return
    _libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
