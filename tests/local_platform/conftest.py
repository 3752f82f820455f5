"""Fixtures for the local training platform tests: real servers over HTTP, real trainer processes.

Trainer start-up (importing scikit-learn) takes seconds, so one session fixture starts both servers and
submits the long-lived jobs up front; the tests then wait for the states they assert on, in parallel.

* server ``main``: 5 GPUs, api key, jobs: ``complete`` (digits, defaults), ``bad_lr`` (OpenAPI shape,
  negative learning rate), ``cancel_final`` / ``cancel_nopreserve`` / ``cancel_force`` (long runs).
* server ``single``: 1 GPU, any key, ``tensorone_cancel_wait_seconds=0``; jobs ``q1``, ``q2`` (queued behind q1),
  ``slow_stop`` (long, slow final checkpoint) and ``q3`` (queued behind slow_stop until it is cancelled).
"""

from __future__ import annotations

import httpx
import pytest

from airflow_training_platform.server import LocalPlatformServer
from tests.local_platform.helpers import API_KEY, Platform

LONG = {"epochs": 200, "seconds_per_epoch": 2.0}  # slow pacing: little CPU while waiting


@pytest.fixture(scope="session")
def platforms(tmp_path_factory: pytest.TempPathFactory):
    """Start both servers, submit the up-front jobs, yield ``{"main": Platform, "single": Platform}``."""
    main_srv = LocalPlatformServer(
        str(tmp_path_factory.mktemp("main")),
        gpus=5,
        seconds_per_epoch=0.2,
        grace_seconds=10,
        tensorone_cancel_wait_seconds=8,
        api_key=API_KEY,
        log_level="warning",
    ).start()
    single_srv = LocalPlatformServer(
        str(tmp_path_factory.mktemp("single")),
        gpus=1,
        seconds_per_epoch=0.2,
        tensorone_cancel_wait_seconds=0,
        log_level="warning",
    )
    try:
        single_srv.start()
        main = Platform(
            main_srv,
            httpx.Client(base_url=main_srv.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30),
        )
        single = Platform(
            single_srv,
            httpx.Client(base_url=single_srv.url, headers={"Authorization": "anything"}, timeout=30),
        )
        main.jobs["complete"] = main.create(
            {"name": "complete", "modelType": "custom", "datasetId": "digits", "tags": ["suite", "complete"]}
        )["jobId"]
        main.jobs["bad_lr"] = main.create(
            {
                "name": "bad-lr",
                "framework": "sklearn",
                "datasetConfig": {"datasetId": "iris"},
                "hyperparameters": {"learningRate": -0.1, "epochs": 2, "batchSize": 16},
                "infrastructure": {"gpuType": "a100", "gpuCount": 1},
                "tags": ["suite"],
            }
        )["jobId"]
        for name in ("cancel_final", "cancel_nopreserve", "cancel_force"):
            main.jobs[name] = main.create(
                {
                    "name": name,
                    "datasetId": "digits",
                    "config": {"training": LONG},
                    "tags": ["suite", "cancel"],
                }
            )["jobId"]
        single.jobs["q1"] = single.create({"name": "q1", "config": {"training": {"epochs": 1}}})["jobId"]
        single.jobs["q2"] = single.create({"name": "q2", "config": {"training": {"epochs": 1}}})["jobId"]
        # its final checkpoint takes >= 1.5 s, so a cancel answered at once says "cancelling"
        slow = {**LONG, "checkpoint_seconds": 1.5}
        single.jobs["slow_stop"] = single.create({"name": "slow-stop", "config": {"training": slow}})["jobId"]
        single.jobs["q3"] = single.create({"name": "q3"})["jobId"]  # queued until slow_stop is cancelled
        single.observed = {name: single.get(job_id)["status"] for name, job_id in single.jobs.items()}
        yield {"main": main, "single": single}
    finally:
        main_srv.stop()
        single_srv.stop()


@pytest.fixture(scope="session")
def main(platforms) -> Platform:
    return platforms["main"]


@pytest.fixture(scope="session")
def single(platforms) -> Platform:
    return platforms["single"]
