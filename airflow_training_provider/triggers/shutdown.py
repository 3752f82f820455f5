"""Knowing that the triggerer process is being told to stop, so a trigger writes no events its
cursor can no longer be saved for.

A trigger writes platform events to the task log, then saves how many it wrote (the event cursor,
an XCom that goes through the triggerer's supervisor). When a triggerer is stopped (a deploy, a
restart: SIGTERM to ``airflow triggerer``, which sends SIGINT to its trigger runner), the runner
closes its channel to the supervisor within milliseconds and then cancels every trigger: events
written in that window are never counted, and the restarted trigger writes them again. The
runner's own stop flag is not reachable from a trigger, so :func:`watch_stop_signals` chains a
handler in front of the runner's SIGINT/SIGTERM handlers that records the signal (and calls the
runner's handler, unchanged); a trigger asks :func:`stopping` before writing.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

log = logging.getLogger(__name__)

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_state = {"installed": False, "stopping": False}


def stopping() -> bool:
    """Whether this process received SIGINT/SIGTERM since :func:`watch_stop_signals` ran."""
    return _state["stopping"]


def watch_stop_signals() -> bool:
    """Chain the stop-signal recorder in front of the trigger runner's SIGINT/SIGTERM handlers,
    once per process. Only in a triggerer's trigger runner (its handlers are the runner's own) and
    from the main thread (where it runs its event loop); anywhere else (a test, ``dag.test``) it does
    nothing. Returns whether this call installed it."""
    if _state["installed"] or threading.current_thread() is not threading.main_thread():
        return False
    if not all(_is_trigger_runners(signal.getsignal(sig)) for sig in _SIGNALS):
        return False
    for sig in _SIGNALS:
        signal.signal(sig, _chained(sig, signal.getsignal(sig)))
    _state["installed"] = True
    log.debug("Training triggers write no more events once this trigger runner is told to stop")
    return True


def _is_trigger_runners(handler: Any) -> bool:
    """Whether ``handler`` is a method of Airflow's ``TriggerRunner`` (``_handle_signal``)."""
    return type(getattr(handler, "__self__", None)).__name__ == "TriggerRunner"


def _chained(sig: signal.Signals, previous: Any):
    def record_then_forward(signum: int, frame: Any) -> None:
        _state["stopping"] = True
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:  # what the process would have done without us
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)

    return record_then_forward
