"""Together's official Python client (``together``, a test-only dependency) against the local platform.

If the vendor's own client works end to end, the local platform's wire format is right: create (the
client asks for the model's limits and a price estimate first), retrieve, list, events, checkpoints,
metrics, resume from a checkpoint, cancel. Values are checked against the local platform's own record
of the job (``/_local/jobs/{id}``).
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
import together

from airflow_training_platform.server import LocalPlatformServer

API_KEY = "together-sdk-key"
TERMINAL = {"completed", "cancelled", "error"}
EPOCHS = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    srv = LocalPlatformServer(
        str(tmp_path_factory.mktemp("together-sdk")),
        gpus=2,
        seconds_per_epoch=0.3,
        api_key=API_KEY,
        log_level="warning",
    ).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def client(server: LocalPlatformServer) -> together.Together:
    return together.Together(api_key=API_KEY, base_url=server.url, max_retries=0, timeout=30)


def record(server: LocalPlatformServer, job_id: str) -> dict[str, Any]:
    resp = httpx.get(f"{server.url}/_local/jobs/{job_id}", timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


def wait(client: together.Together, job_id: str, statuses: set[str], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        job = client.fine_tuning.retrieve(job_id)
        if job.status in statuses:
            return job
        assert time.monotonic() < deadline, f"{job_id} still {job.status}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def finished(client: together.Together) -> Any:
    job = client.fine_tuning.create(
        training_file="file-digits",
        model="org/base-8b",
        n_epochs=EPOCHS,
        n_checkpoints=EPOCHS,
        learning_rate=0.01,
        suffix="sdk",
    )
    assert job.status == "pending"
    return wait(client, job.id, TERMINAL)


def test_limits_and_price_estimate_answer_in_the_clients_models(client, server):
    limits = client.fine_tuning.model_limits(model_name="org/base-8b")
    assert limits.api_model_name == "org/base-8b"
    assert limits.lora_training.max_batch_size == 128 and limits.max_num_epochs == 1000
    estimate = client.fine_tuning.estimate_price(training_file="file-digits", model="org/base-8b", n_epochs=4)
    settings = httpx.get(f"{server.url}/_local/settings", timeout=10).json()
    # start-up estimate + 4 epochs x 0.3 s at the local GPU-hour price
    expected = settings["usd_per_gpu_hour"] * (5.0 + 4 * 0.3) / 3600
    assert estimate.estimation_available is True and estimate.allowed_to_proceed is True
    assert estimate.estimated_total_price == pytest.approx(expected, rel=1e-3)


def test_create_retrieve_and_list_through_the_client(client, server, finished):
    assert finished.status == "completed"
    assert finished.n_epochs == EPOCHS and finished.suffix == "sdk"
    rec = record(server, finished.id)
    assert rec["state"] == "succeeded" and rec["hyperparameters"]["learning_rate"] == 0.01
    # what the client sent at create, as the platform received it
    assert rec["request"]["training_method"] == {"method": "sft", "train_on_inputs": "auto"}
    assert rec["request"]["batch_size"] == "max" and rec["hyperparameters"]["batch_size"] == 128
    assert finished.id in [j.id for j in client.fine_tuning.list().data]


def test_events_and_checkpoints_through_the_client(client, server, finished):
    rec = record(server, finished.id)
    types = [e.type for e in client.fine_tuning.list_events(finished.id).data]
    assert types[0] == "job_pending" and types[-1] == "job_complete"
    assert types.count("epoch_complete") == EPOCHS == types.count("checkpoint_save")
    checkpoints = client.fine_tuning.list_checkpoints(finished.id).data
    assert [c.step for c in checkpoints] == sorted(c["step"] for c in rec["checkpoints"])
    assert [c.path for c in checkpoints] == [
        c["path"] for c in sorted(rec["checkpoints"], key=lambda c: c["step"])
    ]
    assert checkpoints[-1].checkpoint_type == "Final"


def test_metrics_through_the_client_are_the_jobs_own(client, server, finished):
    rec = record(server, finished.id)
    rows = client.fine_tuning.list_metrics(finished.id).metrics
    train = [r for r in rows if "train/loss" in r]
    evals = [r for r in rows if "eval/loss" in r]
    steps = [r["train/global_step"] for r in train]
    assert steps == sorted(steps) and steps[-1] == rec["progress"]["total_steps"]
    assert [r["train/epoch"] for r in evals] == [1.0, 2.0, 3.0]
    assert evals[-1]["eval/accuracy"] == pytest.approx(rec["metrics"]["val_accuracy"])
    assert evals[-1]["eval/loss"] == pytest.approx(rec["metrics"]["val_loss"])
    assert all(r["train/learning_rate"] == 0.01 for r in train)
    # resolution samples the training rows (first and last kept); every evaluation row stays
    sampled = client.fine_tuning.list_metrics(finished.id, resolution=2).metrics
    assert [r["train/global_step"] for r in sampled if "train/loss" in r] == [steps[0], steps[-1]]
    assert len([r for r in sampled if "eval/loss" in r]) == EPOCHS
    # a step window
    window = client.fine_tuning.list_metrics(finished.id, global_step_from=int(steps[-1])).metrics
    assert {r["train/global_step"] for r in window} == {steps[-1]}


def test_resume_from_a_checkpoint_through_the_client(client, server, finished):
    first_step = client.fine_tuning.list_checkpoints(finished.id).data[0].step
    job = client.fine_tuning.create(
        training_file="file-digits", from_checkpoint=f"{finished.id}:{first_step}", n_epochs=1
    )
    done = wait(client, job.id, TERMINAL)
    assert done.status == "completed"
    rec = record(server, job.id)
    assert rec["resume_from"].startswith(f"{finished.id}/") and rec["progress"]["start_epoch"] == 2


def test_cancel_through_the_client(client, server):
    job = client.fine_tuning.create(training_file="file-digits", model="org/base-8b", n_epochs=200)
    wait(client, job.id, {"running"})
    answer = client.fine_tuning.cancel(job.id)
    assert answer.status in {"cancel_requested", "cancelled"}
    assert wait(client, job.id, TERMINAL).status == "cancelled"
    rec = record(server, job.id)
    assert rec["state"] == "cancelled" and rec["cancel_requests"], rec["cancel_requests"]
    assert rec["finished_at"] is not None and rec["pid"] is not None
    with pytest.raises(together.BadRequestError, match="already cancelled"):
        client.fine_tuning.cancel(job.id)


def test_a_compiled_portable_fine_tune_is_a_create_the_client_sends(client, server):
    """The body the provider compiles from a portable fine-tune spec, passed to the client's own
    ``fine_tuning.create`` as its keyword arguments: every field is one the client takes."""
    from airflow_training_provider.platforms.together import TogetherDialect
    from airflow_training_provider.portable import Placement, parse_portable

    portable = {
        "base_model": "org/base-8b",
        "training_file": "file-digits",
        "validation_file": "file-digits",
        "epochs": 2,
        "learning_rate": 0.02,
        "batch_size": 16,
        "checkpoints": 2,
        "suffix": "portable",
    }
    body = TogetherDialect().compile_portable(parse_portable(portable), Placement("", "Together AI", None))
    job = client.fine_tuning.create(**body)
    rec = record(server, job.id)
    sent = {k: rec["request"][k] for k in body}
    assert sent == body and job.suffix == "portable" and job.n_epochs == 2
    client.fine_tuning.cancel(job.id)
