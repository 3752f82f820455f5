"""Together AI fine-tuning wire format ⇄ engine records (pure functions, no I/O).

Wire contract: ``docs/platforms/together.md``. Choices where the public docs are silent:

* ``training_file`` names a bundled dataset: ``digits`` or ``file-digits`` (also ``iris``, ``wine``,
  ``breast_cancer``; ``-`` and ``_`` interchangeable). Any other file id is a 400, as an unknown
  uploaded file would be on the real service.
* ``model`` picks the network width from its size: ``<N>b`` → ``16 x N`` hidden units, ``<N>m`` →
  ``16 x N / 1000`` (clamped to 8..512), else a ``tiny``/``small``/``medium``/``large``/``xl`` word,
  else 64. ``org/base-8b`` → 128.
* ``n_epochs`` (default 1, as on Together) epochs; ``n_checkpoints`` (default 1) checkpoints spread
  evenly over the epochs, the last one at the final epoch (clamped to ``n_epochs``: the trainer
  checkpoints at epoch ends). ``batch_size`` ``"max"`` = 128. ``random_seed`` seeds the trainer.
* ``from_checkpoint`` ``"{job_id}[:{step}]"`` (or ``{model_output_name}[:{step}]``) continues from that
  job's checkpoint at ``step`` (its latest without a step) for ``n_epochs`` *more* epochs; the
  ``training_file`` must be the same dataset. ``epochs_completed`` counts this job's epochs only.
* ``wandb_key``: a key whose length is not 40 fails W&B login at start-up: a ``wandb_init`` event with
  level ``error``, then the platform cancels the job (``cancel_requested`` "Job cancelled due to error
  in W&B login/init", ``job_stopped``, status ``cancelled``), as Together does.
* Extension keys (not Together fields): ``x_airflow_tags`` (identity tags, echoed on the job object,
  filterable with ``?x_airflow_tag=``) and ``x_local`` ``{seconds_per_epoch, checkpoint_seconds, fail_with, diverge_at_epoch,
  gpu_count}`` (trainer pacing and GPUs on this platform).
* ``total_price`` is the engine's cost in USD (GPU time). ``started_at`` is the start of the current
  status ("start of the current stage").
* Errors: ``{"error": {"message", "type", "code", "param"}}`` (OpenAI style; Together does not document it);
  ``type`` by HTTP status (see :data:`ERROR_TYPES`), ``code`` a lower-case reason
  (``validation_error``, ``not_found``, ``job_not_cancellable``, ``insufficient_balance``...),
  ``param`` the offending request field or null.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from fastapi import Request

from airflow_training_platform.engine import JobSpec
from airflow_training_platform.errors import ApiError
from airflow_training_platform.formatting import iso
from airflow_training_platform.json_answers import JSONResponse
from airflow_training_platform.trainer import DATASETS

PLATFORM = "together"
ID_PREFIX = "ft-"
USER_ID = "local-user"
TAGS_KEY = "x_airflow_tags"
LOCAL_KEY = "x_local"
WANDB_KEY_LENGTH = 40
MAX_BATCH_SIZE = 128
MAX_EPOCHS = 1000
MAX_CHECKPOINTS = 1000
MAX_EVALS = 100
PENDING_SECONDS = 0.3
FINALIZE_STAGES = [
    {
        "name": "compressing",
        "seconds": 0.3,
        "event_type": "model_compressing",
        "message": "Compressing output model",
    },
    {
        "name": "uploading",
        "seconds": 0.3,
        "event_type": "model_uploading",
        "message": "Uploading output model",
    },
]
"""Post-training stages: engine ``finalizing`` stage name = Together status."""

WANDB_CANCEL_MESSAGE = "Job cancelled due to error in W&B login/init"
BILLING_CANCEL_MESSAGE = "Job cancelled due to insufficient balance"

EVENT_TYPES = frozenset(
    {
        "job_pending",
        "job_start",
        "job_stopped",
        "model_downloading",
        "model_download_complete",
        "training_data_downloading",
        "training_data_download_complete",
        "validation_data_downloading",
        "validation_data_download_complete",
        "wandb_init",
        "training_start",
        "checkpoint_save",
        "billing_limit",
        "epoch_complete",
        "training_complete",
        "model_compressing",
        "model_compression_complete",
        "model_uploading",
        "model_upload_complete",
        "job_complete",
        "job_error",
        "cancel_requested",
        "job_restarted",
        "refund",
        "warning",
        "early_stopped",
        "tokenized_dataset_upload_complete",
    }
)
"""Event types of Together's OpenAPI spec; engine events of other types are not shown."""

_STATUS = {
    "pending": "pending",
    "queued": "queued",
    "starting": "running",
    "running": "running",
    "stopping": "cancel_requested",
    "succeeded": "completed",
    "failed": "error",
    "cancelled": "cancelled",
}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "insufficient_balance_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}
_ECHO = (
    "validation_file",
    "n_evals",
    "packing",
    "lr_scheduler",
    "warmup_ratio",
    "max_grad_norm",
    "weight_decay",
    "max_seq_length",
    "training_type",
    "training_method",
    "wandb_project_name",
    "wandb_name",
    "early_stopping_enabled",
)
_DIMENSIONS = {"digits": (64, 10), "iris": (4, 3), "wine": (13, 3), "breast_cancer": (30, 2)}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([bm])(?![a-z])", re.IGNORECASE)
_SIZE_WORDS = {"tiny": 16, "small": 32, "medium": 64, "base": 64, "large": 128, "xl": 256}


# ----------------------------------------------------------------------------- errors
def bad(param: str, message: str, code: str = "VALIDATION_ERROR") -> ApiError:
    """A 400 naming the offending request field ``param``."""
    return ApiError(400, code, f"Invalid value for '{param}': {message}", {"field": param})


RATE_LIMITED = "DYNAMIC_REQUEST_LIMITED"
"""The code of Together's 429 above the account's rate; its ``type`` says the same
(``dynamic_request_limited``, docs.together.ai/docs/rate-limits)."""


def render_error(request: Request, err: ApiError) -> JSONResponse:
    """Renderer for the Together routes: ``{"error": {"message", "type", "code", "param"}}``."""
    kind = ERROR_TYPES.get(err.status, "server_error" if err.status >= 500 else "invalid_request_error")
    if err.code == RATE_LIMITED:
        kind = RATE_LIMITED.lower()
    body = {
        "error": {
            "message": err.message,
            "type": kind,
            "code": err.code.lower(),
            "param": err.details.get("field"),
        }
    }
    return JSONResponse(body, status_code=err.status, headers=err.headers)


# ----------------------------------------------------------------------------- create
def dataset_of(training_file: str) -> str | None:
    """Bundled dataset named by a training file id (``digits``, ``file-digits``...), else None."""
    name = training_file.strip().lower()
    name = name.removeprefix("file-").replace("-", "_")
    return name if name in DATASETS else None


def hidden_units_for(model: str) -> int:
    """Network width for a model name (see the module doc)."""
    sizes = _SIZE.findall(model)
    if sizes:
        number, unit = sizes[-1]
        billions = float(number) / (1000.0 if unit.lower() == "m" else 1.0)
        return max(8, min(512, round(16 * billions)))
    for word in reversed(re.split(r"[-_/.:\s]+", model.lower())):
        if word in _SIZE_WORDS:
            return _SIZE_WORDS[word]
    return 64


def checkpoint_epochs(first: int, n_epochs: int, n_checkpoints: int) -> list[int]:
    """Epochs (after ``first - 1`` already done) at whose end to checkpoint: ``n_checkpoints`` spread
    evenly over ``n_epochs``, the last at the final epoch."""
    n = max(1, min(n_checkpoints, n_epochs))
    return sorted({first - 1 + math.ceil(n_epochs * i / n) for i in range(1, n + 1)})


def _int(body: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise bad(key, "must be an integer")
    if not low <= value <= high:
        raise bad(key, f"must be between {low} and {high}")
    return int(value)


def _float(
    body: dict[str, Any], key: str, path: str, low: float, high: float, open_low: bool = False
) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise bad(path, "must be a finite number")
    if value > high or value < low or (open_low and value == low):
        raise bad(path, f"must be {'>' if open_low else '>='} {low} and <= {high}")
    return float(value)


def _str(body: dict[str, Any], key: str, required: bool = False, max_len: int = 10_000) -> str | None:
    value = body.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > max_len:
        raise bad(key, f"{'required ' if required else ''}non-empty string of at most {max_len} characters")
    return value


def split_checkpoint_ref(ref: str) -> tuple[str, int | None]:
    """``"ft-x:200"`` → ``("ft-x", 200)``; ``"ft-x"`` → ``("ft-x", None)``."""
    head, sep, tail = ref.rpartition(":")
    if sep and tail.isdigit():
        return head, int(tail)
    return ref, None


def parse_create(body: Any, lookup: Callable[[str], dict[str, Any] | None]) -> tuple[JobSpec, dict[str, str]]:
    """Create body → (JobSpec, engine field → wire field map). ``lookup(job_id_or_output_name)`` returns
    the engine record of a Together job (for ``from_checkpoint``) or None."""
    if not isinstance(body, dict):
        raise bad("body", "request body must be a JSON object")
    training_file = _str(body, "training_file", required=True)
    dataset = dataset_of(training_file)
    if dataset is None:
        raise ApiError(
            400,
            "FILE_NOT_FOUND",
            f"Invalid value for 'training_file': file {training_file!r} not found "
            f"(this platform serves {', '.join('file-' + d for d in DATASETS)})",
            {"field": "training_file"},
        )
    ref = _str(body, "from_checkpoint")
    model = _str(body, "model", required=ref is None)
    n_epochs = _int(body, "n_epochs", 1, 1, MAX_EPOCHS)
    n_checkpoints = _int(body, "n_checkpoints", 1, 1, MAX_CHECKPOINTS)
    learning_rate = _float(body, "learning_rate", "learning_rate", 0.0, 10.0, open_low=True)
    batch_size = body.get("batch_size")
    if batch_size is None or batch_size == "max":
        batch_size = MAX_BATCH_SIZE
    else:
        batch_size = _int(body, "batch_size", MAX_BATCH_SIZE, 1, 100_000)
    suffix = _str(body, "suffix", max_len=64)
    wandb_key = body.get("wandb_key")
    if wandb_key is not None and not isinstance(wandb_key, str):
        raise bad("wandb_key", "must be a string")
    tags = body.get(TAGS_KEY) or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise bad(TAGS_KEY, "must be an array of strings")
    local = body.get(LOCAL_KEY) or {}
    if not isinstance(local, dict):
        raise bad(LOCAL_KEY, "must be an object")
    seed = body.get("random_seed")
    if seed is not None:
        seed = _int(body, "random_seed", 0, 0, 2**32 - 1)

    resume_from, first_epoch = None, 1
    if ref is not None:
        source_id, step = split_checkpoint_ref(ref)
        source = lookup(source_id)
        ckpts = sorted((source or {}).get("checkpoints") or [], key=lambda c: c["step"])
        if step is not None:
            ckpts = [c for c in ckpts if c["step"] == step]
        if not ckpts:
            raise bad("from_checkpoint", f"checkpoint {ref!r} not found")
        if source["dataset"] != dataset:
            raise bad(
                "from_checkpoint",
                f"checkpoint was trained on file-{source['dataset']}, not {training_file!r}",
            )
        resume_from = f"{source['job_id']}/{ckpts[-1]['checkpoint_id']}"
        first_epoch = int(ckpts[-1]["epoch"]) + 1
        model = model or (source.get("labels") or {}).get("model")

    hyper: dict[str, Any] = {
        "epochs": first_epoch - 1 + n_epochs,
        "batch_size": batch_size,
        "hidden_units": hidden_units_for(model or ""),
        "checkpoint_epochs": checkpoint_epochs(first_epoch, n_epochs, n_checkpoints),
    }
    if learning_rate is not None:
        hyper["learning_rate"] = learning_rate
    if seed is not None:
        hyper["seed"] = seed
    for key, high in (("seconds_per_epoch", 3600.0), ("checkpoint_seconds", 600.0)):
        value = _float(local, key, f"{LOCAL_KEY}.{key}", 0.0, high)
        if value is not None:
            hyper[key] = value
    if "diverge_at_epoch" in local:  # fault injection: from this epoch on the losses are NaN/Infinity
        hyper["diverge_at_epoch"] = _int(local, "diverge_at_epoch", 1, 1, 1000)
    if local.get("fail_with"):  # fault injection: the trainer fails at start with this message
        hyper["fail_with"] = str(local["fail_with"])
    gpu_count = _int(local, "gpu_count", 1, 1, 32) if "gpu_count" in local else 1

    started_events: list[dict[str, Any]] = [
        {"type": "model_download_complete", "message": f"Model data downloaded for {model}"},
        {
            "type": "training_data_download_complete",
            "message": f"Data downloaded for {model}: {training_file}",
        },
    ]
    cancel_on_start = None
    if wandb_key is not None:
        if len(wandb_key) == WANDB_KEY_LENGTH:
            started_events.append({"type": "wandb_init", "message": "WandB run initialized."})
        else:
            started_events.append(
                {
                    "type": "wandb_init",
                    "level": "error",
                    "message": "W&B login failed: API key must be 40 characters long, "
                    f"yours was {len(wandb_key)}",
                }
            )
            cancel_on_start = {"reason": WANDB_CANCEL_MESSAGE, "message": WANDB_CANCEL_MESSAGE}

    spec = JobSpec(
        name=f"{model}-{suffix}" if suffix else str(model),
        platform=PLATFORM,
        dataset=dataset,
        hyperparameters=hyper,
        gpu_count=gpu_count,
        tags=list(tags),
        labels={"model": str(model)},
        resume_from=resume_from,
        request=body,
        id_prefix=ID_PREFIX,
        id_style="uuid4",
        pending_seconds=PENDING_SECONDS,
        finalize_stages=[dict(s) for s in FINALIZE_STAGES],
        started_events=started_events,
        cancel_on_start=cancel_on_start,
    )
    return spec, {
        "dataset": "training_file",
        "gpu_count": f"{LOCAL_KEY}.gpu_count",
        "resume_from": "from_checkpoint",
    }


def billing_events(balance_usd: float) -> list[dict[str, Any]]:
    """Events recorded on each job cancelled because the account balance ran out."""
    return [
        {
            "type": "billing_limit",
            "level": "error",
            "message": f"Insufficient balance: spending reached the account balance of ${balance_usd:.4f}",
        }
    ]


# ----------------------------------------------------------------------------- render
def status_of(rec: dict[str, Any]) -> str:
    """Together status of an engine record (``finalizing`` → its stage, ``compressing``/``uploading``)."""
    if rec["state"] == "finalizing":
        return rec.get("stage") or "uploading"
    return _STATUS.get(rec["state"], rec["state"])


def model_output_name(rec: dict[str, Any]) -> str:
    """``local-user/<model>[-<suffix>]-<6 id chars>`` (like ``acct/org/base-8b-demo-1a2b3c``)."""
    req = rec.get("request") or {}
    suffix = req.get("suffix")
    model = (rec.get("labels") or {}).get("model") or "model"
    return f"{USER_ID}/{model}{'-' + suffix if suffix else ''}-{rec['job_id'][len(ID_PREFIX) : len(ID_PREFIX) + 6]}"


def _n_epochs(rec: dict[str, Any]) -> int:
    value = (rec.get("request") or {}).get("n_epochs")
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 1


def epochs_completed(rec: dict[str, Any]) -> int:
    """Epochs this job trained (a ``from_checkpoint`` job does not count the epochs before it)."""
    n = _n_epochs(rec)
    if rec["state"] == "succeeded":
        return n
    base = int(rec["hyperparameters"].get("epochs", n)) - n
    return max(0, min(n, int(rec["progress"].get("completed_epochs") or 0) - base))


def _param_count(rec: dict[str, Any]) -> int:
    features, classes = _DIMENSIONS.get(rec["dataset"], (64, 10))
    outputs = classes if classes > 2 else 1
    hidden = int(rec["hyperparameters"].get("hidden_units", 64))
    return features * hidden + hidden + hidden * outputs + outputs


def event_to_wire(event: dict[str, Any]) -> dict[str, Any]:
    out = {
        "object": "fine-tune-event",
        "created_at": iso(event["created_at"]),
        "level": event.get("level") or "info",
        "message": event.get("message") or "",
        "type": event["type"],
    }
    for key in ("step", "total_steps", "checkpoint_path"):
        if event.get(key) is not None:
            out[key] = event[key]
    return out


def events_to_wire(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's events of Together types, oldest first."""
    return [event_to_wire(e) for e in rec["events"] if e["type"] in EVENT_TYPES]


def job_to_wire(rec: dict[str, Any], embed_events: bool = True) -> dict[str, Any]:
    """Engine record → job object; without ``embed_events`` the truncated job (create, cancel, list)."""
    req = rec.get("request") or {}
    hp = rec["hyperparameters"]
    status = status_of(rec)
    terminal = rec["state"] in ("succeeded", "failed", "cancelled")
    ckpts = sorted(rec["checkpoints"], key=lambda c: c["step"])
    out: dict[str, Any] = {
        "id": rec["job_id"],
        "object": "fine-tune",
        "status": status,
        "user_id": USER_ID,
        "created_at": iso(rec["created_at"]),
        "updated_at": iso(rec["updated_at"]),
        "started_at": iso(rec["state_history"][-1]["at"]) if rec["state_history"] else None,
        "model": (rec.get("labels") or {}).get("model"),
        "model_output_name": model_output_name(rec),
        "model_output_path": ckpts[-1]["path"] if rec["state"] == "succeeded" and ckpts else None,
        "training_file": req.get("training_file"),
        "suffix": req.get("suffix"),
        "n_epochs": _n_epochs(rec),
        "n_checkpoints": req.get("n_checkpoints", 1),
        "batch_size": req.get("batch_size", "max"),
        "learning_rate": hp.get("learning_rate", 0.001),
        "from_checkpoint": req.get("from_checkpoint"),
        "epochs_completed": epochs_completed(rec),
        "queue_depth": rec.get("queue_position") or 0,
        "progress": {
            "estimate_available": not terminal,
            "seconds_remaining": 0 if terminal else int(round(rec["estimated_remaining_seconds"])),
        },
        "total_price": round(rec["cost"]["current_usd"], 6),
        "param_count": _param_count(rec),
        TAGS_KEY: rec["tags"],
    }
    for key in _ECHO:
        if key in req:
            out[key] = req[key]
    if embed_events:
        out["events"] = events_to_wire(rec)
    return out


def checkpoints_to_wire(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """Saved checkpoints, lowest step first; a completed job's last one is ``Final``."""
    ckpts = sorted(rec["checkpoints"], key=lambda c: c["step"])
    out = []
    for i, c in enumerate(ckpts):
        final = c.get("kind") == "final" or (rec["state"] == "succeeded" and i == len(ckpts) - 1)
        out.append(
            {
                "step": c["step"],
                "created_at": iso(c["created_at"]),
                "path": c["path"],
                "checkpoint_type": "Final" if final else f"Intermediate (step {c['step']})",
                "checkpoint": "merged",
            }
        )
    return out


# ----------------------------------------------------------------------------- metrics
TRAIN_KEYS = {"loss": "train/loss", "learning_rate": "train/learning_rate"}
EVAL_KEYS = {"loss": "eval/loss", "accuracy": "eval/accuracy"}


def _sample(rows: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """``count`` rows spread evenly over ``rows``, first and last included (all when fewer)."""
    if count >= len(rows):
        return rows
    if count == 1:
        return rows[-1:]
    picks = sorted({round(i * (len(rows) - 1) / (count - 1)) for i in range(count)})
    return [rows[i] for i in picks]


def metrics_to_wire(
    rec: dict[str, Any],
    step_from: int | None = None,
    step_to: int | None = None,
    at_from: float | None = None,
    at_to: float | None = None,
    resolution: int | None = None,
) -> list[dict[str, float]]:
    """The job's metric history as ``GET /v1/fine-tunes/{id}/metrics`` rows, oldest first.

    A training row is ``{"train/loss", "train/learning_rate", "train/global_step", "train/epoch"}``;
    an evaluation row (one per epoch, on the validation split) is ``{"eval/loss", "eval/accuracy",
    "train/global_step", "train/epoch"}``: every row carries ``train/global_step``, the x axis the
    official CLI plots against. All values are numbers. Filters: global step and log time (Unix
    seconds) bounds, inclusive; ``resolution`` samples the training rows evenly down to that many
    (evaluation rows are all kept).
    """
    rows = [
        r
        for r in rec.get("metric_history") or []
        if (step_from is None or r["step"] >= step_from)
        and (step_to is None or r["step"] <= step_to)
        and (at_from is None or r["at"] >= at_from)
        and (at_to is None or r["at"] <= at_to)
    ]
    train = [r for r in rows if r["kind"] == "train"]
    if resolution is not None:
        keep = {id(r) for r in _sample(train, resolution)}
        rows = [r for r in rows if r["kind"] != "train" or id(r) in keep]
    out = []
    for r in rows:
        keys = TRAIN_KEYS if r["kind"] == "train" else EVAL_KEYS
        row = {wire: float(r[key]) for key, wire in keys.items() if r.get(key) is not None}
        row["train/global_step"] = float(r["step"])
        row["train/epoch"] = float(r["epoch"])
        out.append(row)
    return out


# ----------------------------------------------------------------------------- before create
def model_limits(model_name: str) -> dict[str, Any]:
    """``GET /v1/fine-tunes/models/limits`` for any model name: the bounds this platform enforces at
    create (the official client checks batch size and LoRA rank against them before it creates)."""
    return {
        "model_name": model_name,
        "default_gradient_accumulation_steps": 1,
        "max_learning_rate": 10.0,
        "min_learning_rate": 0.0,
        "max_num_epochs": MAX_EPOCHS,
        "max_num_checkpoints": MAX_CHECKPOINTS,
        "max_num_evals": MAX_EVALS,
        "max_seq_length_sft": 8192,
        "max_seq_length_dpo": 8192,
        "min_max_seq_length": 1,
        "merge_output_lora": True,
        "supports_full_training": True,
        "supports_reasoning": False,
        "supports_tools": False,
        "supports_vision": False,
        "lora_training": {
            "default_rank": 8,
            "max_rank": 64,
            "min_batch_size": 1,
            "max_batch_size": MAX_BATCH_SIZE,
            "max_batch_size_dpo": MAX_BATCH_SIZE,
            "target_modules": ["all-linear"],
        },
        "full_training": {
            "min_batch_size": 1,
            "max_batch_size": MAX_BATCH_SIZE,
            "max_batch_size_dpo": MAX_BATCH_SIZE,
        },
    }


def parse_estimate(body: Any) -> tuple[str, int]:
    """``POST /v1/fine-tunes/estimate-price`` body → ``(dataset, n_epochs)``; 400 naming the field."""
    if not isinstance(body, dict):
        raise bad("body", "request body must be a JSON object")
    training_file = _str(body, "training_file", required=True)
    dataset = dataset_of(training_file)
    if dataset is None:
        raise bad("training_file", f"file {training_file!r} not found", code="FILE_NOT_FOUND")
    return dataset, _int(body, "n_epochs", 1, 1, MAX_EPOCHS)


def estimate_to_wire(estimate: dict[str, float | None]) -> dict[str, Any]:
    """Engine price estimate → ``AvailableEstimate``: ``allowed_to_proceed`` is false once the estimate
    exceeds what is left of the account balance (``user_limit``, USD; absent without a balance)."""
    left = estimate["balance_left_usd"]
    out: dict[str, Any] = {
        "estimation_available": True,
        "estimated_total_price": round(float(estimate["estimated_usd"] or 0.0), 6),
        "allowed_to_proceed": left is None or (estimate["estimated_usd"] or 0.0) <= left,
    }
    if left is not None:
        out["user_limit"] = round(left, 6)
    return out
