"""TensorOne v2 wire protocol of the local platform, against real trainer processes (server ``main``)."""

from __future__ import annotations

import os

import httpx
import pytest

from tests.local_platform.helpers import API_KEY, JOBS, checkpoint_files, pid_alive, wait_dead

# timing checks on one shared pair of servers (slots, queueing, stop timings): the machine to themselves
pytestmark = pytest.mark.exclusive

ENVELOPE_KEYS = {"error", "message", "code", "details", "request_id", "timestamp"}


def _error(resp: httpx.Response, status: int, code: str) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == ENVELOPE_KEYS
    assert body["error"] == code and body["code"] == status
    assert body["request_id"].startswith("req_")
    return body


def _running_with_checkpoint(job: dict) -> bool:
    return job["status"] == "running" and len(job["checkpoints"]) >= 1


# ----------------------------------------------------------------------------- auth, 404, validation
def test_auth_requires_a_key_and_accepts_bearer_or_bare(main):
    url = f"{main.server.url}{JOBS}"
    _error(httpx.get(url), 401, "UNAUTHORIZED")
    _error(httpx.get(url, headers={"Authorization": "Bearer wrong"}), 401, "UNAUTHORIZED")
    assert httpx.get(url, headers={"Authorization": API_KEY}).status_code == 200
    assert httpx.get(url, headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 200
    assert httpx.get(f"{main.server.url}/_local/health").json() == {"status": "ok"}


def test_unknown_job_is_404(main):
    _error(main.client.get(f"{JOBS}/job_train_000000000000"), 404, "RESOURCE_NOT_FOUND")
    _error(main.client.post(f"{JOBS}/job_train_000000000000/cancel", json={}), 404, "RESOURCE_NOT_FOUND")
    _error(main.client.get(f"{JOBS}/job_train_000000000000/checkpoints"), 404, "RESOURCE_NOT_FOUND")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "datasetId": "imagenet"}, "datasetId"),
        ({"name": "x", "datasetConfig": {"datasetId": "mnist"}}, "datasetConfig.datasetId"),
        ({"datasetId": "digits"}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "x", "config": {"training": {"epochs": "ten"}}}, "config.training.epochs"),
        ({"name": "x", "hyperparameters": {"batchSize": 0}}, "hyperparameters.batchSize"),
        ({"name": "x", "maxWorkers": 99}, "maxWorkers"),
        ({"name": "x", "infrastructure": {"gpuCount": 6}}, "infrastructure.gpuCount"),
        ({"name": "x", "tags": "not-a-list"}, "tags"),
        (
            {"name": "x", "config": {"resumeFromCheckpoint": "job_train_nope/ckpt_epoch_1"}},
            "config.resumeFromCheckpoint",
        ),
    ],
)
def test_create_validation_errors_name_the_field(main, body, field):
    err = _error(main.client.post(JOBS, json=body), 400, "VALIDATION_ERROR")
    assert err["details"]["field"] == field


def test_request_validation_errors_use_the_envelope(main):
    err = _error(main.client.get(JOBS, params={"limit": 0}), 400, "VALIDATION_ERROR")
    assert err["details"]["field"] == "limit"
    err = _error(
        main.client.post(JOBS, content=b"{not json", headers={"Content-Type": "application/json"}),
        400,
        "VALIDATION_ERROR",
    )
    assert err["details"]["field"] == "body"
    err = _error(
        main.client.post(f"{JOBS}/{main.jobs['complete']}/cancel", json={"force": "yes"}),
        400,
        "VALIDATION_ERROR",
    )
    assert err["details"]["field"] == "force"


# ----------------------------------------------------------------------------- lifecycle
def test_job_trains_to_completion_with_a_checkpoint_per_epoch(main):
    job_id = main.jobs["complete"]
    job = main.wait_terminal(job_id)
    assert job["status"] == "completed", job
    assert job["metrics"]["validationAccuracy"] >= 0.93  # digits with the default hyperparameters
    assert job["progress"] == {
        "currentEpoch": 10,
        "totalEpochs": 10,
        "currentStep": 450,
        "totalSteps": 450,
        "percentComplete": 100.0,
        "estimatedTimeRemaining": "0s",
    }
    assert [c["checkpointId"] for c in job["checkpoints"]] == [f"ckpt_epoch_{n}" for n in range(1, 11)]
    assert all(os.path.isfile(c["path"]) and c["type"] == "automatic" for c in job["checkpoints"])
    assert job["timestamps"]["startedAt"] and job["timestamps"]["finishedAt"]
    assert job["tags"] == ["suite", "complete"]

    rec = main.record(job_id)
    assert [h["state"] for h in rec["state_history"]] == ["queued", "starting", "running", "succeeded"]
    assert checkpoint_files(rec) == sorted(f"ckpt_epoch_{n}.joblib" for n in range(1, 11))
    wall = rec["finished_at"] - rec["started_at"]
    assert rec["cost"]["wall_seconds"] == pytest.approx(wall)
    assert job["costs"]["currentCost"] == pytest.approx(2.5 * 1 * wall / 3600, abs=1e-5)
    types = [e["type"] for e in rec["events"]]
    assert types[:3] == ["job_pending", "job_start", "training_start"]
    assert types[-2:] == ["training_complete", "job_complete"]
    assert types.count("epoch_complete") == 10 and types.count("checkpoint_save") == 10
    assert rec["returncode"] == 0


def test_negative_learning_rate_fails_with_sklearns_message(main):
    job = main.wait_terminal(main.jobs["bad_lr"])
    assert job["status"] == "failed"
    assert job["error"] == "TRAINING_FAILED"
    assert "learning_rate_init" in job["message"] and "Got -0.1" in job["message"]
    assert job["configuration"]["datasetId"] == "iris"
    rec = main.record(main.jobs["bad_lr"])
    assert rec["error"] == job["message"] and rec["returncode"] == 1
    assert rec["events"][-1]["type"] == "job_error" and rec["events"][-1]["level"] == "error"


# ----------------------------------------------------------------------------- cancel
def test_cancel_with_final_checkpoint(main):
    job_id = main.jobs["cancel_final"]
    main.wait(job_id, _running_with_checkpoint)
    resp = main.client.post(
        f"{JOBS}/{job_id}/cancel", json={"reason": "airflow task killed", "createFinalCheckpoint": True}
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "cancelled"
    details = body["cancellationDetails"]
    assert details["finalCheckpointCreated"] is True and details["finalCheckpointId"] == "ckpt_final"
    assert details["reason"] == "airflow task killed" and details["resourcesReleased"] is True
    assert set(body["finalMetrics"]) == {
        "finalEpoch",
        "finalStep",
        "finalLoss",
        "finalAccuracy",
        "trainingDuration",
    }
    assert body["finalMetrics"]["finalStep"] > 0
    assert body["costSummary"]["totalCost"] > 0 and body["costSummary"]["estimatedSavings"] > 0

    job = main.get(job_id)
    assert job["status"] == "cancelled" and job["message"] == "airflow task killed"
    final = [c for c in job["checkpoints"] if c["checkpointId"] == "ckpt_final"]
    assert final and final[0]["type"] == "final" and os.path.isfile(final[0]["path"])
    rec = main.record(job_id)
    assert [h["state"] for h in rec["state_history"]][-2:] == ["stopping", "cancelled"]
    (request,) = rec["cancel_requests"]
    assert request["create_final_checkpoint"] is True and request["received_at"] <= rec["finished_at"]
    assert "ckpt_final.joblib" in checkpoint_files(rec)


def test_cancel_without_preserving_checkpoints_deletes_them(main):
    job_id = main.jobs["cancel_nopreserve"]
    main.wait(job_id, _running_with_checkpoint)
    resp = main.client.post(
        f"{JOBS}/{job_id}/cancel", json={"reason": "cleanup", "preserveCheckpoints": False}
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "cancelled"
    assert resp.json()["cancellationDetails"]["finalCheckpointId"] is None
    rec = main.record(job_id)
    assert checkpoint_files(rec) == [] and rec["checkpoints"] == [] and rec["deleted_checkpoints"]
    listing = main.client.get(f"{JOBS}/{job_id}/checkpoints").json()
    assert listing["checkpoints"] == [] and listing["totalCount"] == 0


def test_force_cancel_kills_at_once(main):
    job_id = main.jobs["cancel_force"]
    main.wait(job_id, _running_with_checkpoint)
    resp = main.client.post(f"{JOBS}/{job_id}/cancel", json={"force": True})
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "cancelled"
    rec = main.record(job_id)
    assert rec["returncode"] == -9 and rec["final_checkpoint_id"] is None
    assert [e["signal"] for e in rec["events"] if e["type"] == "signal_sent"] == ["SIGKILL"]
    assert checkpoint_files(rec)  # force still preserves the automatic checkpoints by default


def test_cancel_during_start_up_is_prompt_and_writes_no_checkpoint(main):
    job_id = main.create({"name": "early-cancel", "tags": ["early"]})["jobId"]
    main.wait(job_id, lambda j: j["status"] == "initializing", timeout=10)
    resp = main.client.post(f"{JOBS}/{job_id}/cancel", json={"createFinalCheckpoint": True})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "cancelled"
    assert body["cancellationDetails"]["finalCheckpointCreated"] is False
    rec = main.record(job_id)
    assert rec["cancel_requests"][0]["state_at_request"] == "starting"
    assert rec["finished_at"] - rec["cancel_requests"][0]["received_at"] < 3
    assert checkpoint_files(rec) == [] and rec["running_at"] is None


def test_cancelling_a_finished_job_is_a_state_conflict(main):
    job_id = main.jobs["complete"]
    main.wait_terminal(job_id)
    err = _error(main.client.post(f"{JOBS}/{job_id}/cancel", json={"reason": "late"}), 409, "STATE_CONFLICT")
    assert err["details"]["status"] == "completed"
    assert main.record(job_id)["cancel_requests"][-1]["outcome"] == "rejected"


# ----------------------------------------------------------------------------- list, checkpoints, resume
def test_list_filters_by_tags_and_status(main):
    both = main.client.get(JOBS, params=[("tag", "suite"), ("tag", "complete")]).json()
    assert [j["jobId"] for j in both["jobs"]] == [main.jobs["complete"]] and both["totalCount"] == 1
    cancel_ids = {main.jobs[n] for n in ("cancel_final", "cancel_nopreserve", "cancel_force")}
    assert {j["jobId"] for j in main.client.get(JOBS, params={"tag": "cancel"}).json()["jobs"]} == cancel_ids
    main.wait_terminal(main.jobs["bad_lr"])
    failed = main.client.get(JOBS, params={"status": "failed", "tag": "suite"}).json()
    assert [j["jobId"] for j in failed["jobs"]] == [main.jobs["bad_lr"]]
    page = main.client.get(JOBS, params={"tag": "suite", "limit": 2, "offset": 1}).json()
    assert len(page["jobs"]) == 2 and page["totalCount"] == 5
    _error(main.client.get(JOBS, params={"status": "exploded"}), 400, "VALIDATION_ERROR")


def test_checkpoint_listing_sorts_limits_and_summarises(main):
    job_id = main.jobs["complete"]
    main.wait_terminal(job_id)
    body = main.client.get(
        f"{JOBS}/{job_id}/checkpoints", params={"sortBy": "epoch", "sortOrder": "desc", "limit": 3}
    ).json()
    assert [c["epoch"] for c in body["checkpoints"]] == [10, 9, 8]
    assert body["totalCount"] == 10
    assert body["summary"]["latestCheckpoint"] == "ckpt_epoch_10"
    assert body["summary"]["bestCheckpoint"].startswith("ckpt_epoch_")
    assert body["summary"]["totalSizeBytes"] == sum(
        c["sizeBytes"] for c in main.client.get(f"{JOBS}/{job_id}/checkpoints").json()["checkpoints"]
    )
    _error(
        main.client.get(f"{JOBS}/{job_id}/checkpoints", params={"sortBy": "color"}), 400, "VALIDATION_ERROR"
    )


def test_resume_from_checkpoint_starts_at_the_next_epoch(main):
    source = main.jobs["complete"]
    main.wait_terminal(source)
    job_id = main.create(
        {
            "name": "resumed",
            "datasetId": "digits",
            "config": {"training": {"epochs": 5}, "resumeFromCheckpoint": f"{source}/ckpt_epoch_3"},
        }
    )["jobId"]
    job = main.wait_terminal(job_id)
    assert job["status"] == "completed", job
    assert [c["checkpointId"] for c in job["checkpoints"]] == ["ckpt_epoch_4", "ckpt_epoch_5"]
    assert [c["step"] for c in job["checkpoints"]] == [180, 225]
    assert job["configuration"]["resumeFromCheckpoint"] == f"{source}/ckpt_epoch_3"
    rec = main.record(job_id)
    assert rec["resume_path"].endswith("ckpt_epoch_3.joblib")
    assert [e["epoch"] for e in rec["events"] if e["type"] == "epoch_complete"] == [4, 5]
    logs = main.get(job_id, includeLogs="true", logLines=1000)["logs"]
    assert '"start_epoch":4' in logs[0] and '"start_step":135' in logs[0]


def test_fault_injection_returns_the_configured_error_once(main):
    rule = {"method": "GET", "path_prefix": JOBS, "status": 503, "count": 1, "retry_after": 2}
    assert main.client.post("/_local/faults", json=rule).status_code == 201
    resp = main.client.get(JOBS)
    _error(resp, 503, "SERVICE_UNAVAILABLE")
    assert resp.headers["Retry-After"] == "2"
    assert main.client.get(JOBS).status_code == 200
    main.client.delete("/_local/faults")


def test_a_fault_rule_with_a_path_matches_that_path_and_not_the_jobs_under_it(main):
    rule = {"method": "GET", "path": JOBS, "status": 503, "count": -1}
    assert main.client.post("/_local/faults", json=rule).status_code == 201
    try:
        # a job under the list's path: not faulted
        _error(main.client.get(f"{JOBS}/job_train_000000000000"), 404, "RESOURCE_NOT_FOUND")
        _error(main.client.get(JOBS), 503, "SERVICE_UNAVAILABLE")  # the list
        assert main.client.get("/_local/faults").json()["faults"][0]["fired"] == 1
    finally:
        main.client.delete("/_local/faults")


# ----------------------------------------------------------------------------- shutdown (keep last)
def test_no_trainer_survives_a_server_stop(main):
    job_id = main.create(
        {"name": "outlived?", "config": {"training": {"epochs": 200, "seconds_per_epoch": 2.0}}}
    )["jobId"]
    main.wait(job_id, lambda j: j["status"] == "running")  # initializing: its process may be coming up
    pids = [r["pid"] for r in main.client.get("/_local/jobs").json()["jobs"] if r["pid"]]
    assert pid_alive(main.record(job_id)["pid"])
    assert main.server.stop() == 0
    assert wait_dead(pids) == []
