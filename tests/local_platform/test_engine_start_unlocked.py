"""The engine starts a trainer without its lock, on its own spawner thread: while a trainer's start
takes seconds (here the engine's own ``spawn`` fault hook holds it for :data:`SLOW_START_SECONDS`,
as a cold fork server importing scikit-learn does), submits, reads, lists and cancels answer at
once, the launcher goes on giving GPUs to the next jobs, and a cancel that finds the job still
``starting`` without a process reaches the process once it exists. A real
engine in this process with its real fork server and trainers; no HTTP (the latency under HTTP:
``test_request_latency.py``)."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_training_platform.engine import EngineConfig, JobSpec, TrainingEngine

# latency bounds: measured with the machine to itself, after the parallel stage
pytestmark = pytest.mark.exclusive

SLOW_START_SECONDS = 2.0
PROMPT_SECONDS = 0.5  # an answer that waited for the start would take SLOW_START_SECONDS


@pytest.fixture
def engine(tmp_path):
    slow: set[str] = set()
    in_spawn = threading.Event()

    def hook(point: str, job_id: str) -> None:
        if point == "spawn" and job_id in slow:
            in_spawn.set()
            time.sleep(SLOW_START_SECONDS)

    engine = TrainingEngine(
        EngineConfig(data_dir=str(tmp_path), gpus=2, seconds_per_epoch=0.2, grace_seconds=5, fault_hook=hook)
    )
    engine.slow, engine.in_spawn = slow, in_spawn  # type: ignore[attr-defined]
    engine.start()
    try:
        yield engine
    finally:
        engine.shutdown()


def timed(call):
    started = time.perf_counter()
    result = call()
    return result, time.perf_counter() - started


def test_requests_do_not_wait_for_a_trainer_start_and_a_cancel_meanwhile_reaches_it(engine):
    slow_id = "job_train_slowstart"
    engine.slow.add(slow_id)
    engine.submit(JobSpec("slow-start", dataset="iris", hyperparameters={"epochs": 100}, job_id=slow_id))
    assert engine.in_spawn.wait(10), "the launcher never started the job"

    other, submit_s = timed(
        lambda: engine.submit(JobSpec("behind", dataset="iris", hyperparameters={"epochs": 2}))
    )
    starting, get_s = timed(lambda: engine.get(slow_id))
    listed, list_s = timed(engine.list)
    cancelled, cancel_s = timed(lambda: engine.cancel(slow_id, reason="stop", create_final_checkpoint=True))
    figures = {"submit": submit_s, "get": get_s, "list": list_s, "cancel": cancel_s}
    assert max(figures.values()) < PROMPT_SECONDS, figures
    # the job holds its GPU while its process is being started, and has none yet
    assert starting["state"] == "starting" and starting["pid"] is None, starting
    assert [j["job_id"] for j in listed] == [slow_id, other["job_id"]]
    assert cancelled["state"] == "stopping" and cancelled["pid"] is None
    # the launcher is not held either: the next job takes the free GPU now and waits to be spawned
    deadline = time.monotonic() + 1.0
    while engine.get(other["job_id"])["state"] == "queued" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert engine.get(other["job_id"])["state"] == "starting"
    assert engine.get(slow_id)["pid"] is None, "the slow start is not over yet"

    assert engine.wait_for_terminal(slow_id, 30)
    record = engine.get(slow_id)
    assert record["state"] == "cancelled" and record["pid"] is not None, record["state_history"]
    assert [h["state"] for h in record["state_history"]] == ["queued", "starting", "stopping", "cancelled"]
    types = [e["type"] for e in record["events"]]
    start, signal = types.index("job_start"), types.index("signal_sent")
    assert start < signal, types  # signalled once its process existed, as the cancel asked
    assert record["events"][signal]["signal"] == "SIGTERM"
    assert (
        record["events"][signal]["created_at"] - record["cancel"]["requested_at"] >= SLOW_START_SECONDS - 0.5
    )

    # the job behind it starts and trains as usual once the slow start is over
    assert engine.wait_for_terminal(other["job_id"], 60)
    assert engine.get(other["job_id"])["state"] == "succeeded"
