"""The Together AI dialect against the documented payloads (docs/platforms/together.md). Pure logic, no I/O."""

from __future__ import annotations

import logging

import pytest

from airflow_training_provider.errors import (
    InvalidJobSpecError,
    JobNotFoundError,
    JobStateConflictError,
    PlatformAuthError,
    TrainingPlatformError,
)
from airflow_training_provider.hooks.transport import prepare_request
from airflow_training_provider.models import CancelRequest, Checkpoint, JobEvent, JobState
from airflow_training_provider.platforms import PLATFORMS, Credentials, get_dialect
from airflow_training_provider.platforms.together import TAGS_KEY, TogetherDialect

D = TogetherDialect()
JOB_ID = "ft-0f3c9a2e-0000-4b1d-9c1a-7e2f5b6a9d10"

# Create body, job object, events and checkpoints as documented (docs/platforms/together.md).
CREATE_BODY = {
    "training_file": "file-abc",
    "validation_file": "",
    "packing": True,
    "model": "org/base-8b",
    "n_epochs": 2,
    "learning_rate": 1e-05,
    "lr_scheduler": {
        "lr_scheduler_type": "cosine",
        "lr_scheduler_args": {"min_lr_ratio": 0.0, "num_cycles": 0.5},
    },
    "warmup_ratio": 0.0,
    "max_grad_norm": 1.0,
    "weight_decay": 0.0,
    "n_checkpoints": 2,
    "n_evals": 0,
    "batch_size": "max",
    "suffix": "demo",
    "early_stopping_enabled": False,
    "training_type": {
        "type": "Lora",
        "lora_r": 8,
        "lora_alpha": 16,
        "lora_dropout": 0.0,
        "lora_trainable_modules": "all-linear",
    },
    "training_method": {"method": "sft", "train_on_inputs": "auto"},
}
JOB = {
    "id": JOB_ID,
    "status": "running",
    "user_id": "user_demo",
    "created_at": "2025-03-01T10:00:00Z",
    "updated_at": "2025-03-01T10:20:00Z",
    "started_at": "2025-03-01T10:05:00Z",
    "model": "org/base-8b",
    "model_output_name": "acct/org/base-8b-demo-1a2b3c",
    "training_file": "file-abc",
    "n_epochs": 2,
    "n_checkpoints": 2,
    "epochs_completed": 1,
    "token_count": 1200000,
    "queue_depth": 0,
    "progress": {"estimate_available": True, "seconds_remaining": 900},
    "training_type": {"type": "Lora", "lora_r": 8, "lora_alpha": 16},
    "training_method": {"method": "sft", "train_on_inputs": "auto"},
}
EVENTS = {
    "data": [
        {
            "object": "fine-tune-event",
            "created_at": "2025-03-01T10:00:01Z",
            "level": "info",
            "message": "Fine tune request created",
            "type": "job_pending",
        },
        {
            "object": "fine-tune-event",
            "created_at": "2025-03-01T10:05:00Z",
            "level": "info",
            "message": "Job started",
            "type": "job_start",
        },
        {
            "object": "fine-tune-event",
            "created_at": "2025-03-01T10:30:00Z",
            "level": "info",
            "message": "Checkpoint saved",
            "type": "checkpoint_save",
            "step": 200,
            "checkpoint_path": "s3://.../ckpt-200",
        },
        {
            "object": "fine-tune-event",
            "created_at": "2025-03-01T10:31:00Z",
            "level": "info",
            "message": "Cancel requested by user",
            "type": "cancel_requested",
        },
        {
            "object": "fine-tune-event",
            "created_at": "2025-03-01T10:31:40Z",
            "level": "info",
            "message": "Job stopped due to cancel request",
            "type": "job_stopped",
        },
    ]
}
CHECKPOINTS = {
    "data": [
        {
            "step": 200,
            "created_at": "2025-03-01T10:30:00Z",
            "path": "s3://.../ft-0f3c/ckpt-200",
            "checkpoint_type": "Intermediate (step 200)",
            "checkpoint": "adapter",
        }
    ]
}
# The documented auto-cancel sequence, legacy upper-case types.
WANDB_SEQUENCE = [
    ("JOB_PENDING", "Info", "Fine tune request created"),
    ("JOB_START", "Info", "Job started"),
    ("MODEL_DOWNLOAD_COMPLETE", "Info", "Model downloaded"),
    ("TRAINING_DATA_DOWNLOAD_COMPLETE", "Info", "Data downloaded"),
    ("WANDB_INIT", "Error", "wandb.errors.AuthenticationError: API key must be 40 characters long"),
    ("CANCEL_REQUESTED", "Info", "Job cancelled due to error in WandB login/init"),
    ("TRAINING_START", "Info", "Training started"),
    ("JOB_STOPPED", "Info", "Job stopped due to cancel request"),
]


def _events(rows: list[tuple[str, str, str]]) -> list[JobEvent]:
    return D.parse_events({"data": [{"type": t, "level": lv, "message": m} for t, lv, m in rows]})


# ----------------------------------------------------------------------------- documented shapes
def test_documented_job_object_parses():
    job = D.parse_job(JOB)
    assert (job.id, job.platform, job.state, job.raw_status) == (
        JOB_ID,
        "together",
        JobState.RUNNING,
        "running",
    )
    assert job.name == "acct/org/base-8b-demo-1a2b3c"
    assert (job.progress.epoch, job.progress.total_epochs, job.progress.percent) == (1, 2, 50.0)
    assert job.progress.eta_seconds == 900
    assert job.created_at.year == 2025 and job.started_at.minute == 5 and job.updated_at.minute == 20
    assert job.tags == [] and job.message is None


def test_create_response_is_pending_and_truncated_fields_suffice():
    job = D.parse_created({"id": JOB_ID, "status": "pending", "created_at": "2025-03-01T10:00:00Z"})
    assert job.state is JobState.PENDING and job.progress.epoch is None


def test_estimate_not_available_means_no_eta():
    job = D.parse_job({**JOB, "progress": {"estimate_available": False, "seconds_remaining": 0}})
    assert job.progress.eta_seconds is None


def test_price_is_the_cost():
    assert D.parse_job({**JOB, "total_price": 12.5}).cost.total_usd == 12.5


def test_documented_events_parse_in_order():
    events = D.parse_events(EVENTS)
    assert [e.type for e in events] == [
        "job_pending",
        "job_start",
        "checkpoint_save",
        "cancel_requested",
        "job_stopped",
    ]
    assert events[0].message == "Fine tune request created" and events[0].created_at.second == 1
    assert all(e.level == "info" for e in events)


def test_documented_checkpoints_parse():
    [ckpt] = D.parse_checkpoints(CHECKPOINTS)
    assert (ckpt.id, ckpt.step, ckpt.kind, ckpt.path) == (
        "200",
        200,
        "intermediate",
        "s3://.../ft-0f3c/ckpt-200",
    )
    assert ckpt.created_at.minute == 30


def test_checkpoints_sorted_by_step_and_final_recognized():
    ckpts = D.parse_checkpoints(
        {
            "data": [
                {"step": 400, "checkpoint_type": "Final", "path": "p400"},
                {"step": 200, "checkpoint_type": "Intermediate (step 200)", "path": "p200"},
            ]
        }
    )
    assert [(c.step, c.kind) for c in ckpts] == [(200, "intermediate"), (400, "final")]


def test_documented_create_body_validates():
    assert D.validate_spec(CREATE_BODY) == CREATE_BODY
    D.validate_spec({"training_file": "file-abc", "from_checkpoint": f"{JOB_ID}:200"})  # model optional then
    future = {**CREATE_BODY, "batch_size": 8, "wandb_key": "k" * 40, "a_future_field": 1}
    assert D.validate_spec(future, allow_unknown_fields=True)["a_future_field"] == 1
    with pytest.raises(InvalidJobSpecError, match="a_future_field.*allow_unknown_fields=True"):
        D.validate_spec(future)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"model": "m"}, "training_file"),
        ({"training_file": "", "model": "m"}, "training_file"),
        ({"training_file": 7, "model": "m"}, "training_file"),
        ({"training_file": "f"}, "spec"),  # neither model nor from_checkpoint
        ({"training_file": "f", "model": "m", "n_epochs": 0}, "n_epochs"),
        ({"training_file": "f", "model": "m", "n_checkpoints": 0}, "n_checkpoints"),
        ({"training_file": "f", "model": "m", "learning_rate": "fast"}, "learning_rate"),
        ({"training_file": "f", "model": "m", "learning_rate": 0}, "learning_rate"),
        ({"training_file": "f", "model": "m", "batch_size": "huge"}, "batch_size"),
        ({"training_file": "f", "model": "m", "batch_size": 0}, "batch_size"),
        ({"training_file": "f", "model": "m", "wandb_key": 123}, "wandb_key"),
        ({"training_file": "f", "model": "m", "warmup_ratio": 2}, "warmup_ratio"),
        ("not a dict", "spec"),
    ],
)
def test_bad_spec_rejected_naming_the_field(spec, field):
    with pytest.raises(InvalidJobSpecError) as err:
        D.validate_spec(spec)
    assert err.value.field == field
    assert f"'{field}'" in str(err.value)


def test_missing_model_message_says_what_is_needed():
    with pytest.raises(InvalidJobSpecError, match="model is required"):
        D.validate_spec({"training_file": "f"})


# ----------------------------------------------------------------------------- status map
@pytest.mark.parametrize(
    ("raw", "state"),
    [
        ("pending", JobState.PENDING),
        ("queued", JobState.QUEUED),
        ("running", JobState.RUNNING),
        ("compressing", JobState.RUNNING),
        ("uploading", JobState.RUNNING),
        ("cancel_requested", JobState.STOPPING),
        ("cancelled", JobState.CANCELLED),
        ("error", JobState.FAILED),
        ("user_error", JobState.FAILED),
        ("completed", JobState.SUCCEEDED),
    ],
)
def test_every_documented_status_maps(raw, state):
    assert D.map_status(raw) is state


def test_status_map_is_total_and_terminal_set_matches_the_sdk():
    documented = {
        "pending",
        "queued",
        "running",
        "compressing",
        "uploading",
        "cancel_requested",
        "cancelled",
        "error",
        "completed",
        "user_error",
    }
    assert set(D.status_map) == documented
    terminal = {raw for raw, s in D.status_map.items() if s.is_terminal}
    assert terminal == {"error", "user_error", "completed", "cancelled"}  # SDK COMPLETED_STATUSES


def test_unknown_status_is_running_and_logged(caplog):
    with caplog.at_level(logging.WARNING):
        job = D.parse_job({"id": JOB_ID, "status": "defragmenting"})
    assert job.state is JobState.RUNNING and not job.is_terminal
    assert "defragmenting" in caplog.text


# ----------------------------------------------------------------------------- events, decisive event
@pytest.mark.parametrize("raw", ["WANDB_INIT", "wandb_init", "Wandb_Init"])
def test_event_types_normalize_to_lowercase(raw):
    [event] = D.parse_events({"data": [{"type": raw, "level": "info", "message": "m"}]})
    assert event.type == "wandb_init"


@pytest.mark.parametrize(
    ("raw", "level"),
    [
        ("info", "info"),
        ("warning", "warning"),
        ("error", "error"),
        ("Error", "error"),
        ("Warning", "warning"),
        ("Info", "info"),
        ("", "info"),
        (None, "info"),
        ("legacy_info", "info"),
        ("legacy_iwarning", "warning"),
        ("legacy_ierror", "error"),
    ],
)
def test_event_levels_normalize(raw, level):
    [event] = D.parse_events({"data": [{"type": "job_start", "level": raw, "message": "m"}]})
    assert event.level == level


def test_bare_list_and_missing_fields_are_tolerated():
    events = D.parse_events([{"type": "JOB_START"}, {"message": "no type"}])
    assert [(e.type, e.message) for e in events] == [("job_start", "JOB_START"), ("unknown", "no type")]


def test_decisive_event_picks_the_wandb_error_in_the_documented_sequence():
    events = _events(WANDB_SEQUENCE)
    picked = D.decisive_event(events)
    assert picked.type == "wandb_init" and "40 characters" in picked.message


def test_decisive_event_falls_back_to_a_platform_cancel_request():
    rows = [(t, "Info" if t == "WANDB_INIT" else lv, m) for t, lv, m in WANDB_SEQUENCE]
    picked = D.decisive_event(_events(rows))
    assert picked.type == "cancel_requested" and "WandB" in picked.message


def test_decisive_event_picks_billing_limit():
    events = _events(
        [
            ("job_start", "info", "Job started"),
            ("epoch_complete", "info", "Epoch completed, at step 24"),
            ("billing_limit", "info", "Insufficient balance"),
            ("cancel_requested", "info", "Job cancelled due to insufficient balance"),
            ("job_stopped", "info", "Job stopped due to cancel request"),
        ]
    )
    assert D.decisive_event(events).type == "billing_limit"


@pytest.mark.parametrize("kind", ["job_error", "JOB_USER_ERROR"])
def test_decisive_event_picks_job_errors(kind):
    events = _events(
        [("job_start", "info", "s"), (kind, "", "CUDA out of memory"), ("warning", "warning", "w")]
    )
    assert D.decisive_event(events).message == "CUDA out of memory"


def test_user_cancel_and_success_have_no_decisive_event():
    assert D.decisive_event(D.parse_events(EVENTS)) is None
    assert D.decisive_event(_events([("job_start", "info", "s"), ("job_complete", "info", "done")])) is None
    assert D.decisive_event(_events([("warning", "warning", "slow data loader")])) is None


def test_cancelled_job_with_embedded_events_explains_itself():
    rows = [{"type": t, "level": lv, "message": m} for t, lv, m in WANDB_SEQUENCE]
    job = D.parse_job({**JOB, "status": "cancelled", "events": rows})
    assert job.state is JobState.CANCELLED and "40 characters" in job.message
    job = D.parse_job({**JOB, "status": "cancelled", "events": EVENTS["data"]})
    assert job.message == "Cancel requested by user"
    assert D.parse_job({**JOB, "status": "running", "events": rows}).message is None


# ----------------------------------------------------------------------------- requests
def test_requests_use_the_documented_endpoints():
    create = D.create_request(CREATE_BODY)
    assert (create.method, create.path, create.body, create.idempotent) == (
        "POST",
        "/v1/fine-tunes",
        CREATE_BODY,
        False,
    )
    assert (D.get_request(JOB_ID).method, D.get_request(JOB_ID).path) == ("GET", f"/v1/fine-tunes/{JOB_ID}")
    cancel = D.cancel_request(JOB_ID, CancelRequest(reason="r", create_final_checkpoint=True, force=True))
    assert (cancel.method, cancel.path, cancel.body) == ("POST", f"/v1/fine-tunes/{JOB_ID}/cancel", None)
    assert D.events_request(JOB_ID).path == f"/v1/fine-tunes/{JOB_ID}/events"
    assert D.checkpoints_request(JOB_ID).path == f"/v1/fine-tunes/{JOB_ID}/checkpoints"
    listing = D.list_request(["airflow-dag:d"])
    assert (listing.method, listing.path, listing.params) == (
        "GET",
        "/v1/fine-tunes",
        [("x_airflow_tag", "airflow-dag:d")],
    )
    signed = prepare_request(D, "https://api.together.ai", create, Credentials(api_key="k"))
    assert signed.headers["Authorization"] == "Bearer k"


def test_capabilities_and_cancel_flags():
    caps = D.capabilities
    assert (caps.final_checkpoint_on_cancel, caps.preserve_checkpoints_flag, caps.events, caps.list_jobs) == (
        False,
        False,
        True,
        True,
    )
    effective = D.effective_cancel(CancelRequest(create_final_checkpoint=True, preserve_checkpoints=False))
    assert effective.create_final_checkpoint is False and effective.preserve_checkpoints is True


def test_tags_go_in_the_extension_key_and_come_back():
    spec = D.with_tags(
        {**CREATE_BODY, TAGS_KEY: ["team:ml", "airflow-dag:d"]}, ["airflow-dag:d", "airflow-try:1"]
    )
    assert spec[TAGS_KEY] == ["team:ml", "airflow-dag:d", "airflow-try:1"]
    assert TAGS_KEY not in CREATE_BODY and D.validate_spec(spec) == spec
    assert D.parse_job({**JOB, TAGS_KEY: ["airflow-dag:d"]}).tags == ["airflow-dag:d"]


def test_list_keeps_tagged_jobs_oldest_first():
    body = {
        "data": [
            {
                "id": "ft-b",
                "status": "running",
                "created_at": "2025-03-02T00:00:00Z",
                TAGS_KEY: ["airflow-dag:d"],
            },
            {"id": "ft-untagged", "status": "running", "created_at": "2025-03-01T12:00:00Z"},
            {
                "id": "ft-a",
                "status": "completed",
                "created_at": "2025-03-01T00:00:00Z",
                TAGS_KEY: ["airflow-dag:d"],
            },
        ]
    }
    assert [j.id for j in D.parse_list(body)] == ["ft-a", "ft-b"]


def test_cancel_response_is_the_truncated_job():
    result = D.parse_cancel(JOB_ID, {"id": JOB_ID, "status": "cancel_requested", "total_price": 1.5})
    assert (result.state, result.already_terminal, result.cost.total_usd) == (JobState.STOPPING, False, 1.5)
    assert D.parse_cancel(JOB_ID, {"id": JOB_ID, "status": "cancelled"}).already_terminal is False
    # the doc example literally answers "completed": a job that had already ended
    assert D.parse_cancel(JOB_ID, {"id": JOB_ID, "status": "completed"}).already_terminal is True


def test_resume_spec_sets_from_checkpoint():
    spec = D.resume_spec(CREATE_BODY, JOB_ID, Checkpoint(id="200", step=200))
    assert spec == {**CREATE_BODY, "from_checkpoint": f"{JOB_ID}:200"}
    assert "from_checkpoint" not in CREATE_BODY and D.validate_spec(spec) == spec
    assert D.capabilities.checkpoints_in_job is False


def test_checkpoint_ref_is_job_colon_step():
    assert D.checkpoint_ref(JOB_ID, Checkpoint(id="200", step=200)) == f"{JOB_ID}:200"
    assert D.checkpoint_ref(JOB_ID, 400) == f"{JOB_ID}:400"
    assert D.checkpoint_ref(JOB_ID, Checkpoint(id="x")) == JOB_ID


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        (
            {"error": {"message": "bad file", "type": "invalid_request_error", "code": "file_not_found"}},
            "file_not_found",
            "bad file",
        ),
        (
            {"error": {"message": "bad file", "type": "invalid_request_error"}},
            "invalid_request_error",
            "bad file",
        ),
        ({"message": "plain"}, None, "plain"),
        ({"error": "STATE_CONFLICT", "message": "tensorone-style"}, "STATE_CONFLICT", "tensorone-style"),
        ({"detail": "Not Found"}, None, "Not Found"),
        ([1, 2], None, None),
    ],
)
def test_error_bodies_are_read_tolerantly(body, code, message):
    got_code, got_message, _ = D.error_fields(body)
    assert (got_code, got_message) == (code, message)


def test_errors_map_to_provider_types():
    assert isinstance(D.classify_error(401, {}, {"error": {"message": "Invalid API key"}}), PlatformAuthError)
    assert isinstance(D.classify_error(404, {}, {"error": {"message": "no such job"}}), JobNotFoundError)
    assert isinstance(D.classify_error(409, {}, {"message": "conflict"}), JobStateConflictError)
    err = D.classify_error(
        402, {}, {"error": {"message": "Insufficient balance", "code": "insufficient_balance"}}
    )
    assert type(err) is TrainingPlatformError and err.status == 402 and err.code == "insufficient_balance"
    plain_400 = D.classify_error(400, {}, {"error": {"message": "n_epochs must be >= 1"}})
    assert type(plain_400) is TrainingPlatformError


@pytest.mark.parametrize(
    "body",
    [
        {
            "error": {
                "message": "Fine-tune job ft-1 cannot be cancelled: it is already completed",
                "code": "job_not_cancellable",
            }
        },
        {"error": {"message": "whatever", "code": "job_not_cancellable"}},
        {"message": "Job is already cancelled"},
        {"message": "Job is not cancellable"},
    ],
)
def test_a_400_refusing_to_cancel_an_ended_job_is_a_state_conflict(body):
    assert isinstance(D.classify_error(400, {}, body), JobStateConflictError)


def test_dialect_registry():
    assert isinstance(get_dialect("together"), TogetherDialect)
    assert PLATFORMS["together"].dialect is TogetherDialect
    assert PLATFORMS["together"].default_base_url == "https://api.together.ai"


def test_the_batch_status_read_is_the_list_of_every_job_in_one_page():
    request = D.status_batch_request(["a", "b"], "ignored")
    assert (request.method, request.path, request.params, request.body) == (
        "GET",
        "/v1/fine-tunes",
        None,
        None,
    )
    assert D.batch_size >= 10_000 and D.batch_rows_complete is False
    truncated = {k: v for k, v in JOB.items() if k not in ("events", "progress")}
    untagged = {**truncated, "id": "ft-other", TAGS_KEY: []}
    page = D.parse_status_batch({"data": [truncated, untagged]})
    assert [j.id for j in page.jobs] == [JOB_ID, "ft-other"], "tagged or not: the poller picks its jobs"
    assert page.jobs[0].state is D.parse_job(JOB).state and page.next_page is None


def test_a_batch_row_that_does_not_read_is_left_out_without_a_warning_every_round(caplog):
    """The list holds every job of the account and is read every round: another job's bad row
    must not warn each time (a waiting job's own bad row sends it to its own read)."""
    bad = {**JOB, "id": "ft-bad", "created_at": "yesterday"}
    with caplog.at_level(logging.DEBUG):
        page = D.parse_status_batch({"data": [bad, JOB]})
    assert [j.id for j in page.jobs] == [JOB_ID]
    left_out = [r for r in caplog.records if "ft-bad" in r.getMessage()]
    assert [r.levelno for r in left_out] == [logging.DEBUG]
    D.parse_list({"data": [bad, JOB]})  # a list call (re-attach, the reaper) still warns
    assert caplog.records[-1].levelno == logging.WARNING and "ft-bad" in caplog.records[-1].getMessage()
