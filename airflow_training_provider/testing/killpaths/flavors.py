"""The platforms the kill-path scenarios run on: one row per platform.

A flavor says how the scenarios' DAGs reach the platform (connection, DAG-id suffix), what a long
or failing job looks like there, how to fault its status polls and its cancels on the local
platform, and what its cancel can do. Adding a platform adds a row to :data:`FLAVORS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

API_KEY = "kill-path-key"
"""The API key of the kill-path stack's local platform."""


def tensorone_spec(epochs: int, seconds_per_epoch: float, fail: bool = False, **extra: Any) -> dict:
    training = {"epochs": epochs, "seconds_per_epoch": seconds_per_epoch}
    if fail:  # the trainer refuses it after start: the job fails on the platform
        training["learning_rate"] = -0.5
    return {"name": "kp-{{ dag.dag_id }}", "datasetId": "digits", "config": {"training": training}, **extra}


def together_spec(epochs: int, seconds_per_epoch: float, fail: bool = False, **extra: Any) -> dict:
    local: dict = {"seconds_per_epoch": seconds_per_epoch}
    if fail:  # Together refuses a bad learning rate before submit: have the trainer fail instead
        local["fail_with"] = "CUDA error: an illegal memory access was encountered (learning_rate diverged)"
    return {
        "model": "local/digits-mlp-4b",
        "training_file": "file-digits",
        "n_epochs": epochs,
        "n_checkpoints": epochs,
        "learning_rate": 0.001,
        "suffix": "kp",
        "x_local": local,
        **extra,
    }


@dataclass(frozen=True)
class Flavor:
    """A platform the kill-path scenarios run on.

    :ivar name: the platform's connection type; the DAGs use connection ``<name>_local``.
    :ivar suffix: DAG-id suffix of its DAGs (``kp_deferred`` + suffix).
    :ivar jobs_path: REST collection of its jobs (fault rules match its polls and cancels under it).
    :ivar final_checkpoint: its cancel can ask for a final checkpoint.
    :ivar cancel_reason: its cancel carries the reason Airflow gives (recorded by the platform).
    :ivar spec: ``spec(epochs, seconds_per_epoch, fail=False, **extra)``: a create body for a job
        paced at ``seconds_per_epoch`` (``fail``: one that fails on the platform soon after start).
    :ivar auto_cancel_spec: a job the platform cancels by itself, explaining why in its events
        (K19); ``None`` if the platform has no such thing.
    :ivar events: the platform streams events into the task log (K20).
    """

    name: str
    suffix: str
    jobs_path: str
    final_checkpoint: bool
    spec: Callable[..., dict]
    cancel_reason: bool = True
    auto_cancel_spec: dict | None = None
    events: bool = False

    @property
    def conn_id(self) -> str:
        return f"{self.name}_local"

    def dag(self, base: str) -> str:
        return base + self.suffix

    def poll_rule(self, job_id: str | None = None) -> dict:
        """Fault-rule matchers for the status polls of ``job_id`` (of any job if ``None``)."""
        return {"method": "GET", "path_prefix": f"{self.jobs_path}/{job_id or ''}"}

    def cancel_rule(self, job_id: str) -> dict:
        """Fault-rule matchers for cancels of ``job_id``."""
        return {"method": "POST", "path_prefix": f"{self.jobs_path}/{job_id}/cancel"}


TENSORONE = Flavor("tensorone", "", "/v2/training/jobs", final_checkpoint=True, spec=tensorone_spec)
TOGETHER = Flavor(
    "together",
    "_together",
    "/v1/fine-tunes",
    final_checkpoint=False,
    spec=together_spec,
    cancel_reason=False,
    auto_cancel_spec=together_spec(epochs=20, seconds_per_epoch=0.5, wandb_key="not-forty-characters"),
    events=True,
)
FLAVORS: dict[str, Flavor] = {f.name: f for f in (TENSORONE, TOGETHER)}
