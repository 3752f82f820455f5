"""The opt-in heap freezer for large triggerers (pure asyncio; no Airflow stack)."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from airflow_training_provider.triggers import heap


@pytest.fixture(autouse=True)
def _unfreeze():
    yield
    gc.unfreeze()


def test_off_by_default_and_for_zero(monkeypatch):
    monkeypatch.delenv("AIRFLOW__TRAINING_PROVIDER__TRIGGERER_GC_FREEZE_INTERVAL", raising=False)

    async def main():
        return heap.start_gc_freezer(), heap.start_gc_freezer(0)

    assert asyncio.run(main()) == (False, False)
    assert gc.get_freeze_count() == 0


def test_freezes_once_per_event_loop_and_keeps_freezing(monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING_PROVIDER__TRIGGERER_GC_FREEZE_INTERVAL", "0.05")

    async def main():
        started = heap.start_gc_freezer(), heap.start_gc_freezer()
        await asyncio.sleep(0.01)
        first = gc.get_freeze_count()
        kept = [object() for _ in range(3)], {"a": [1]}  # tracked objects born after the first freeze
        await asyncio.sleep(0.1)
        return started, first, gc.get_freeze_count(), kept

    started, first, later, _kept = asyncio.run(main())
    assert started == (True, False)
    assert first > 1000, "the import-time heap was frozen"
    assert later > first, "objects alive at a later tick were frozen too"


def test_a_bad_setting_is_logged_and_leaves_it_off(monkeypatch, caplog):
    monkeypatch.setenv("AIRFLOW__TRAINING_PROVIDER__TRIGGERER_GC_FREEZE_INTERVAL", "-5")

    async def main():
        return heap.start_gc_freezer()

    with caplog.at_level(logging.ERROR, logger=heap.__name__):
        assert asyncio.run(main()) is False
    assert "triggerer_gc_freeze_interval must be >= 0 seconds, got -5.0" in caplog.text
    assert gc.get_freeze_count() == 0
