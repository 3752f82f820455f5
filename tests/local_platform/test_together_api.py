"""Together AI wire protocol of the local platform, over HTTP against real trainer processes.

Two servers: ``together`` (4 GPUs, unlimited balance) and ``broke`` (a balance of $0.002, used up
about 3 s into a job). The long jobs are submitted up front so they run while the tests run. The
provider's Together dialect parses the real answers (pure logic on real bodies).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import httpx
import pytest

from airflow_training_platform.server import LocalPlatformServer
from airflow_training_provider.errors import JobStateConflictError
from airflow_training_provider.models import JobState
from airflow_training_provider.platforms.together import TogetherDialect

D = TogetherDialect()
API_KEY = "together-test-key"
FT = "/v1/fine-tunes"
TERMINAL = {"completed", "cancelled", "error"}
WANDB_OK = "k" * 40
STATUS_ORDER = ["pending", "queued", "running", "compressing", "uploading", "completed"]
SUCCESS_EVENTS = [
    "job_pending",
    "job_start",
    "model_download_complete",
    "training_data_download_complete",
    "wandb_init",
    "training_start",
    "training_complete",
    "model_compressing",
    "model_uploading",
    "job_complete",
]
ENGINE_TO_STATUS = {
    "starting": "running",
    "stopping": "cancel_requested",
    "failed": "error",
    "succeeded": "completed",
}


class Together:
    def __init__(self, server: LocalPlatformServer):
        self.server = server
        self.client = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30
        )
        self.jobs: dict[str, str] = {}
        self.seen: dict[str, list[str]] = {}
        self.watchers: dict[str, threading.Thread] = {}

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        resp = self.client.post(FT, json=body)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def get(self, job_id: str) -> dict[str, Any]:
        resp = self.client.get(f"{FT}/{job_id}")
        assert resp.status_code == 200, resp.text
        return resp.json()

    def events(self, job_id: str) -> list[dict[str, Any]]:
        resp = self.client.get(f"{FT}/{job_id}/events")
        assert resp.status_code == 200, resp.text
        return resp.json()["data"]

    def record(self, job_id: str) -> dict[str, Any]:
        return self.client.get(f"/_local/jobs/{job_id}").json()

    def wait(self, job_id: str, until, timeout: float = 45.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if until(job):
                return job
            assert time.monotonic() < deadline, f"timed out on {job_id}: {job['status']}"
            time.sleep(0.1)

    def wait_terminal(self, job_id: str) -> dict[str, Any]:
        return self.wait(job_id, lambda j: j["status"] in TERMINAL)

    def watch(self, name: str) -> None:
        """Record every status of job ``name`` seen by polling every 40 ms (background thread)."""
        seen = self.seen.setdefault(name, [])
        client = httpx.Client(base_url=self.server.url, headers={"Authorization": API_KEY}, timeout=10)

        def poll() -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    status = client.get(f"{FT}/{self.jobs[name]}").json()["status"]
                except httpx.HTTPError:  # the server was stopped
                    return
                if not seen or seen[-1] != status:
                    seen.append(status)
                if status in TERMINAL:
                    return
                time.sleep(0.04)

        self.watchers[name] = threading.Thread(target=poll, daemon=True)
        self.watchers[name].start()


def _body(**extra: Any) -> dict[str, Any]:
    return {"training_file": "file-digits", "model": "org/base-8b", **extra}


def _types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory):
    main = LocalPlatformServer(
        str(tmp_path_factory.mktemp("together")),
        gpus=4,
        seconds_per_epoch=0.2,
        api_key=API_KEY,
        log_level="warning",
    )
    broke = LocalPlatformServer(
        str(tmp_path_factory.mktemp("broke")),
        gpus=1,
        seconds_per_epoch=0.2,
        api_key=API_KEY,
        together_balance_usd=0.002,
        log_level="warning",
    )
    try:
        main.start()
        broke.start()
        t, b = Together(main), Together(broke)
        t.jobs["success"] = t.create(
            _body(
                n_epochs=3,
                n_checkpoints=2,
                wandb_key=WANDB_OK,
                suffix="demo",
                x_airflow_tags=["airflow-dag:ok"],
            )
        )["id"]
        t.watch("success")
        t.jobs["cancel"] = t.create(_body(n_epochs=200, x_airflow_tags=["airflow-dag:cancel"]))["id"]
        t.jobs["bad_wandb"] = t.create(_body(n_epochs=50, wandb_key="not-a-wandb-key"))["id"]
        b.jobs["spender"] = b.create(_body(n_epochs=200))["id"]
        yield {"main": t, "broke": b}
    finally:
        main.stop()
        broke.stop()


@pytest.fixture(scope="module")
def together(servers) -> Together:
    return servers["main"]


@pytest.fixture(scope="module")
def broke(servers) -> Together:
    return servers["broke"]


# ----------------------------------------------------------------------------- success path
def test_success_path_statuses_and_event_sequence(together):
    job_id = together.jobs["success"]
    job = together.wait_terminal(job_id)
    assert job["status"] == "completed"
    assert job["id"].startswith("ft-") and len(job["id"]) == 3 + 36

    # polled statuses appear in lifecycle order; the engine's history has every one of them
    together.watchers["success"].join(10)
    seen = together.seen["success"]
    assert seen == [s for s in STATUS_ORDER if s in seen]
    assert {"pending", "running", "completed"} <= set(seen)
    history = [
        h.get("stage") or ENGINE_TO_STATUS.get(h["state"], h["state"])
        for h in together.record(job_id)["state_history"]
    ]
    assert [s for i, s in enumerate(history) if i == 0 or history[i - 1] != s] == STATUS_ORDER

    events = together.events(job_id)
    types = _types(events)
    assert [t for t in types if t not in ("epoch_complete", "checkpoint_save")] == SUCCESS_EVENTS
    assert types.count("epoch_complete") == 3 and types.count("checkpoint_save") == 2
    body = types[types.index("training_start") + 1 : types.index("training_complete")]
    assert set(body) == {"epoch_complete", "checkpoint_save"}
    assert all(t == t.lower() for t in types)
    assert all(e["object"] == "fine-tune-event" and e["level"] == "info" for e in events)
    saves = [e for e in events if e["type"] == "checkpoint_save"]
    assert all(isinstance(e["step"], int) and e["checkpoint_path"].endswith(".joblib") for e in saves)
    assert job["events"] == events  # embedded in the job object too

    assert job["epochs_completed"] == 3 and job["n_epochs"] == 3 and job["n_checkpoints"] == 2
    assert job["total_price"] > 0 and job["progress"] == {"estimate_available": False, "seconds_remaining": 0}
    assert job["model_output_name"].startswith("local-user/org/base-8b-demo-")
    assert os.path.isfile(job["model_output_path"])
    assert job["x_airflow_tags"] == ["airflow-dag:ok"]

    parsed = D.parse_job(job)
    assert (parsed.state, parsed.tags, parsed.progress.percent, parsed.message) == (
        JobState.SUCCEEDED,
        ["airflow-dag:ok"],
        100.0,
        None,
    )
    assert [e.type for e in D.parse_events({"data": events})] == types
    assert D.decisive_event(D.parse_events({"data": events})) is None


def test_checkpoints_endpoint_lists_saved_checkpoints(together):
    job_id = together.jobs["success"]
    together.wait_terminal(job_id)
    resp = together.client.get(f"{FT}/{job_id}/checkpoints")
    assert resp.status_code == 200
    data = resp.json()["data"]
    save_steps = [e["step"] for e in together.events(job_id) if e["type"] == "checkpoint_save"]
    assert [c["step"] for c in data] == save_steps
    assert [c["checkpoint_type"] for c in data] == [f"Intermediate (step {save_steps[0]})", "Final"]
    assert all(os.path.isfile(c["path"]) and c["created_at"].endswith("Z") for c in data)
    ckpts = D.parse_checkpoints(resp.json())
    assert [(c.step, c.kind) for c in ckpts] == [(save_steps[0], "intermediate"), (save_steps[1], "final")]


def test_from_checkpoint_resumes_from_that_step(together):
    source = together.jobs["success"]
    together.wait_terminal(source)
    first = D.parse_checkpoints(together.client.get(f"{FT}/{source}/checkpoints").json())[0]
    ref = D.checkpoint_ref(source, first)
    job_id = together.create({"training_file": "file-digits", "from_checkpoint": ref, "n_epochs": 1})["id"]
    job = together.wait_terminal(job_id)
    assert job["status"] == "completed", job["events"]
    assert job["from_checkpoint"] == ref and job["model"] == "org/base-8b"
    assert job["epochs_completed"] == 1
    rec = together.record(job_id)
    source_ckpt = next(c for c in together.record(source)["checkpoints"] if c["step"] == first.step)
    assert rec["resume_path"] == source_ckpt["path"]
    assert rec["progress"]["start_epoch"] == source_ckpt["epoch"] + 1
    assert rec["progress"]["start_step"] == first.step

    resp = together.client.post(
        FT, json={"training_file": "file-digits", "from_checkpoint": f"{source}:99999"}
    )
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "from_checkpoint"


# ----------------------------------------------------------------------------- cancel
def test_cancel_goes_through_cancel_requested_to_cancelled(together):
    job_id = together.jobs["cancel"]
    together.wait(job_id, lambda j: j["status"] == "running" and "training_start" in _types(j["events"]))
    resp = together.client.post(f"{FT}/{job_id}/cancel")
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "cancel_requested" and "events" not in resp.json()
    result = D.parse_cancel(job_id, resp.json())
    assert (result.state, result.already_terminal) == (JobState.STOPPING, False)

    job = together.wait_terminal(job_id)
    assert job["status"] == "cancelled"
    types = _types(job["events"])
    # lines the trainer wrote before the signal may still land after cancel_requested (Together documents it too)
    cancel = types.index("cancel_requested")
    assert types[-1] == "job_stopped" and types.count("cancel_requested") == 1
    assert set(types[cancel + 1 : -1]) <= {"epoch_complete", "checkpoint_save", "training_start"}
    assert job["events"][cancel]["message"] == "Cancel requested by user"
    rec = together.record(job_id)
    assert "stopping" in [h["state"] for h in rec["state_history"]]
    assert rec["cancel"]["initiator"] == "user"
    parsed = D.parse_job(job)
    assert parsed.state is JobState.CANCELLED and parsed.message == "Cancel requested by user"

    # cancelling an ended job: 400 job_not_cancellable, which the dialect reads as a state conflict
    again = together.client.post(f"{FT}/{job_id}/cancel")
    assert again.status_code == 400
    assert again.json()["error"]["code"] == "job_not_cancellable"
    assert "already cancelled" in again.json()["error"]["message"]
    assert isinstance(D.classify_error(400, {}, again.json()), JobStateConflictError)


def test_cancel_before_start_is_immediate(together):
    job_id = together.create(_body(n_epochs=5))["id"]
    resp = together.client.post(f"{FT}/{job_id}/cancel")
    assert resp.status_code == 200 and resp.json()["status"] == "cancelled"
    assert _types(together.events(job_id)) == ["job_pending", "cancel_requested", "job_stopped"]
    assert together.record(job_id)["pid"] is None


# ----------------------------------------------------------------------------- platform-initiated cancels
def test_bad_wandb_key_cancels_the_job(together):
    job_id = together.jobs["bad_wandb"]
    job = together.wait_terminal(job_id)
    assert job["status"] == "cancelled"
    events = job["events"]
    types = _types(events)
    wandb = types.index("wandb_init")
    assert types[:wandb] == [
        "job_pending",
        "job_start",
        "model_download_complete",
        "training_data_download_complete",
    ]
    assert events[wandb]["level"] == "error" and "W&B login" in events[wandb]["message"]
    cancel = types.index("cancel_requested")
    assert cancel > wandb and events[cancel]["message"] == "Job cancelled due to error in W&B login/init"
    assert types[-1] == "job_stopped"
    rec = together.record(job_id)
    assert rec["cancel"]["initiator"] == "platform"
    assert [r["initiator"] for r in rec["cancel_requests"]] == ["platform"]
    assert "stopping" in [h["state"] for h in rec["state_history"]]

    parsed = D.parse_job(job)
    assert parsed.state is JobState.CANCELLED and "W&B login" in parsed.message
    assert D.decisive_event(D.parse_events({"data": events})).type == "wandb_init"


def test_balance_running_out_cancels_with_billing_limit(broke):
    job_id = broke.jobs["spender"]
    job = broke.wait_terminal(job_id)
    assert job["status"] == "cancelled"
    types = _types(job["events"])
    billing, cancel = types.index("billing_limit"), types.index("cancel_requested")
    assert billing < cancel and types[-1] == "job_stopped"
    assert types.count("billing_limit") == types.count("cancel_requested") == 1
    assert job["events"][billing]["level"] == "error"
    assert job["events"][cancel]["message"] == "Job cancelled due to insufficient balance"
    assert job["total_price"] >= 0.002
    rec = broke.record(job_id)
    assert rec["cancel"]["initiator"] == "platform"
    assert rec["cancel"]["reason"] == "Job cancelled due to insufficient balance"
    assert D.decisive_event(D.parse_events({"data": job["events"]})).type == "billing_limit"

    refused = broke.client.post(FT, json=_body())
    assert refused.status_code == 402
    assert refused.json()["error"]["code"] == "insufficient_balance"


# ----------------------------------------------------------------------------- list, auth, errors
def test_list_filters_by_tag_and_the_dialect_keeps_tagged_jobs(together):
    everything = together.client.get(FT).json()["data"]
    assert {together.jobs["success"], together.jobs["cancel"], together.jobs["bad_wandb"]} <= {
        j["id"] for j in everything
    }
    assert all("events" not in j for j in everything)
    tagged = together.client.get(FT, params={"x_airflow_tag": "airflow-dag:ok"}).json()["data"]
    assert [j["id"] for j in tagged] == [together.jobs["success"]]
    parsed = D.parse_list({"data": everything})
    assert [j.id for j in parsed] == [together.jobs["success"], together.jobs["cancel"]]


def test_auth_and_unknown_jobs_use_the_error_body(together):
    url = f"{together.server.url}{FT}"
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        resp = httpx.get(url, headers=headers)
        assert resp.status_code == 401
        assert resp.json()["error"]["type"] == "authentication_error"
    assert httpx.get(url, headers={"Authorization": API_KEY}).status_code == 200
    missing = "ft-00000000-0000-4000-8000-000000000000"
    for method, path in (
        ("GET", missing),
        ("POST", f"{missing}/cancel"),
        ("GET", f"{missing}/events"),
        ("GET", f"{missing}/checkpoints"),
    ):
        resp = together.client.request(method, f"{FT}/{path}")
        assert resp.status_code == 404
        assert set(resp.json()["error"]) == {"message", "type", "code", "param"}
        assert resp.json()["error"]["type"] == "not_found_error"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "training_file"),
        ({"training_file": "file-imagenet", "model": "m"}, "training_file"),
        ({"training_file": "file-digits"}, "model"),
        (_body(n_epochs=0), "n_epochs"),
        (_body(n_checkpoints="two"), "n_checkpoints"),
        (_body(batch_size="huge"), "batch_size"),
        (_body(learning_rate=-1), "learning_rate"),
        (_body(from_checkpoint="ft-nope:10"), "from_checkpoint"),
        (_body(x_airflow_tags="airflow-dag:x"), "x_airflow_tags"),
        (_body(x_local={"gpu_count": 9}), "x_local.gpu_count"),
    ],
)
def test_create_validation_errors_name_the_param(together, body, param):
    resp = together.client.post(FT, json=body)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert D.error_fields(resp.json())[1] == error["message"]
