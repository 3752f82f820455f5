"""Opt-in for triggerers that run thousands of training triggers: keep the long-lived heap out of
Python's garbage collector, so a full collection does not pause the event loop for a second.

A full collection walks every live object of the process: Airflow's own (about 190,000 after its
imports) and each waiting trigger's coroutines and state. At 10,000 waiting jobs that is about a
second, during which no trigger of the process runs (``docs/scale.md``). With
``[training_provider] triggerer_gc_freeze_interval`` set to N seconds, the first training trigger
of a triggerer process starts a task that, every N seconds, collects the young generations and
then calls :func:`gc.freeze`: everything alive then (imports, the triggers waiting then) moves to
the permanent generation, which collections skip. Objects are still freed by reference counting;
only cyclic garbage among frozen objects is never collected (a training trigger leaves about 0.07
such objects when it ends, measured). Off by default: it is process-wide, and another provider's
triggers in the same process may leave more cyclic garbage.
"""

from __future__ import annotations

import asyncio
import gc
import logging

from airflow.sdk.configuration import conf

log = logging.getLogger(__name__)

CONFIG_SECTION = "training_provider"
CONFIG_KEY = "triggerer_gc_freeze_interval"

_FREEZERS: dict[int, asyncio.Task] = {}  # event loop id → its freezer (strong references)


def gc_freeze_interval() -> float:
    """``[training_provider] triggerer_gc_freeze_interval`` in seconds; 0 (the default) is off.

    :raises ValueError: the setting is not a number, or negative.
    """
    value = conf.getfloat(CONFIG_SECTION, CONFIG_KEY, fallback=0.0)
    if value < 0:
        raise ValueError(f"[{CONFIG_SECTION}] {CONFIG_KEY} must be >= 0 seconds, got {value}")
    return value


def start_gc_freezer(interval: float | None = None) -> bool:
    """Start the freezer in the running event loop, once per loop; ``interval`` seconds between
    freezes (``None``: :func:`gc_freeze_interval`; ``<= 0``: do nothing). Returns whether this
    call started it. A bad setting is logged and leaves the freezer off: it must not stop waiting."""
    loop = asyncio.get_running_loop()
    if id(loop) in _FREEZERS:
        return False
    if interval is None:
        try:
            interval = gc_freeze_interval()
        except ValueError as exc:
            log.error("Not freezing the heap: %s", exc)
            interval = 0.0
    if interval <= 0:
        return False
    key = id(loop)
    task = loop.create_task(_freeze_every(interval), name="training-provider-gc-freeze")
    _FREEZERS[key] = task
    task.add_done_callback(lambda _t: _FREEZERS.pop(key, None))
    log.info("Freezing the long-lived heap out of garbage collection every %.0f s", interval)
    return True


async def _freeze_every(interval: float) -> None:
    while True:
        gc.collect(1)  # young garbage first (cheap), so little garbage gets frozen
        gc.freeze()
        await asyncio.sleep(interval)
