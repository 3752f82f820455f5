"""The platforms the kill-path scenarios run on: one row per platform.

A flavor says how the scenarios' DAGs reach the platform (connection, DAG-id suffix), what a long
or failing job looks like there, how to fault its status polls and its cancels on the local
platform, and what its cancel can do. Adding a platform adds a row to :data:`FLAVORS`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_training_devel.killpaths.user_code import sagemaker_script_spec
from airflow_training_devel.local_fixtures import LOCAL_FIXTURES, LOCAL_SECRET, MODELARTS_PROJECT_ID

API_KEY = LOCAL_SECRET
"""The secret of every connection of the kill-path stack (no log line may show it)."""


BATCH_SIZE = 128
"""Mini-batch size of every kill-path job (Together's ``"max"``): a digits epoch is 12 optimizer
steps, not 45, so two dozen trainers at once leave the machine's two cores to Airflow."""

FAILURE = "CUDA error: an illegal memory access was encountered (learning_rate diverged)"
"""What a failing job's trainer dies with (``fail=True``), soon after it starts."""


def hyperparameters(
    epochs: int,
    seconds_per_epoch: float,
    fail: bool = False,
    learning_rate: float | None = None,
    checkpoint_seconds: float = 0.0,
    diverge_at_epoch: int | None = None,
) -> dict[str, str]:
    """The trainer's hyperparameters of a kill-path job, as the strings a cloud's API carries
    (SageMaker's map, PAI's and ModelArts' name/value lists). ``checkpoint_seconds``: every
    checkpoint write, the final one too, takes this long; ``diverge_at_epoch``: from that epoch on
    the run's losses are NaN/Infinity (the local platform's fault injection)."""
    hyper = {
        "epochs": str(epochs),
        "seconds_per_epoch": str(seconds_per_epoch),
        "batch_size": str(BATCH_SIZE),
    }
    if checkpoint_seconds:
        hyper["checkpoint_seconds"] = str(checkpoint_seconds)
    if learning_rate is not None:
        hyper["learning_rate"] = str(learning_rate)
    if fail:
        hyper["fail_with"] = FAILURE
    if diverge_at_epoch is not None:
        hyper["diverge_at_epoch"] = str(diverge_at_epoch)
    return hyper


def tensorone_spec(
    epochs: int,
    seconds_per_epoch: float,
    fail: bool = False,
    learning_rate: float | None = None,
    checkpoint_seconds: float = 0.0,
    diverge_at_epoch: int | None = None,
    **extra: Any,
) -> dict:
    training: dict[str, Any] = {
        "epochs": epochs,
        "seconds_per_epoch": seconds_per_epoch,
        "batch_size": BATCH_SIZE,
    }
    if checkpoint_seconds:
        training["checkpoint_seconds"] = checkpoint_seconds
    if learning_rate is not None:
        training["learning_rate"] = learning_rate
    if fail:  # the trainer refuses it after start: the job fails on the platform
        training["learning_rate"] = -0.5
    if diverge_at_epoch is not None:
        training["diverge_at_epoch"] = diverge_at_epoch
    return {"name": "kp-{{ dag.dag_id }}", "datasetId": "digits", "config": {"training": training}, **extra}


def together_spec(
    epochs: int,
    seconds_per_epoch: float,
    fail: bool = False,
    learning_rate: float = 0.001,
    checkpoint_seconds: float = 0.0,
    diverge_at_epoch: int | None = None,
    **extra: Any,
) -> dict:
    local: dict = {"seconds_per_epoch": seconds_per_epoch}
    if diverge_at_epoch is not None:
        local["diverge_at_epoch"] = diverge_at_epoch
    if checkpoint_seconds:
        local["checkpoint_seconds"] = checkpoint_seconds
    if fail:  # Together refuses a bad learning rate before submit: have the trainer fail instead
        local["fail_with"] = FAILURE
    return {
        "model": "local/digits-mlp-4b",
        "training_file": "file-digits",
        "n_epochs": epochs,
        "n_checkpoints": epochs,
        "learning_rate": learning_rate,
        "batch_size": BATCH_SIZE,
        "suffix": "kp",
        "x_local": local,
        **extra,
    }


def sagemaker_spec(epochs: int, seconds_per_epoch: float, fail: bool = False, learning_rate: float | None = None,
                   checkpoint_seconds: float = 0.0, diverge_at_epoch: int | None = None,
                   **extra: Any) -> dict:  # fmt: skip
    return {
        "RoleArn": "arn:aws:iam::123456789012:role/KillPaths",
        "AlgorithmSpecification": {"TrainingImage": "local/digits-mlp:1", "TrainingInputMode": "File"},
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://kp/digits/"}},
            }
        ],
        "OutputDataConfig": {"S3OutputPath": "s3://kp/output"},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "CheckpointConfig": {
            "S3Uri": "s3://kp/checkpoints/{{ dag.dag_id }}/{{ run_id | replace(':', '-') }}"
        },
        "HyperParameters": hyperparameters(
            epochs, seconds_per_epoch, fail, learning_rate, checkpoint_seconds, diverge_at_epoch
        ),
        **extra,
    }


def pai_spec(epochs: int, seconds_per_epoch: float, fail: bool = False, learning_rate: float | None = None,
             checkpoint_seconds: float = 0.0, diverge_at_epoch: int | None = None,
             **extra: Any) -> dict:  # fmt: skip
    hyper = hyperparameters(
        epochs, seconds_per_epoch, fail, learning_rate, checkpoint_seconds, diverge_at_epoch
    )
    return {
        "AlgorithmSpec": {"Image": "local/digits-mlp:1", "Command": ["python", "train.py"]},
        "ComputeResource": {"EcsSpec": "ecs.gn7i-c8g1.2xlarge", "EcsCount": 1},
        "InputChannels": [{"Name": "train", "InputUri": "oss://kp/digits/"}],
        "OutputChannels": [
            {
                "Name": "checkpoints",
                "OutputUri": "oss://kp/checkpoints/{{ dag.dag_id }}/{{ run_id | replace(':', '-') }}",
            }
        ],
        "HyperParameters": [{"Name": name, "Value": value} for name, value in hyper.items()],
        **extra,
    }


def modelarts_spec(epochs: int, seconds_per_epoch: float, fail: bool = False, learning_rate: float | None = None,
                   checkpoint_seconds: float = 0.0, diverge_at_epoch: int | None = None,
                   **extra: Any) -> dict:  # fmt: skip
    hyper = hyperparameters(
        epochs, seconds_per_epoch, fail, learning_rate, checkpoint_seconds, diverge_at_epoch
    )
    return {
        "kind": "job",
        "algorithm": {
            "engine": {"image_url": "swr.example/kp/digits-mlp:1"},
            "command": "python train.py",
            "parameters": [{"name": name, "value": value} for name, value in hyper.items()],
            "inputs": [{"name": "data_url", "remote": {"obs": {"obs_url": "/kp/digits/"}}}],
            "outputs": [
                {
                    "name": "checkpoints",
                    "remote": {
                        "obs": {
                            "obs_url": "/kp/checkpoints/{{ dag.dag_id }}/{{ run_id | replace(':', '-') }}/"
                        }
                    },
                }
            ],
        },
        "spec": {"resource": {"flavor_id": "modelarts.vm.gpu.example", "node_count": 1}},
        **extra,
    }


@dataclass(frozen=True)
class Flavor:
    """A platform the kill-path scenarios run on.

    :ivar name: the platform's connection type; the DAGs use connection ``<name>_local``
        (:meth:`connection` says what it holds).
    :ivar suffix: DAG-id suffix of its DAGs (``kp_deferred`` + suffix).
    :ivar jobs_path: REST collection of its jobs (fault rules match its polls and cancels under it).
    :ivar final_checkpoint: its cancel can ask for a final checkpoint.
    :ivar cancel_reason: its cancel carries the reason Airflow gives (recorded by the platform).
    :ivar spec: ``spec(epochs, seconds_per_epoch, fail=False, learning_rate=None,
        checkpoint_seconds=0, diverge_at_epoch=None, **extra)``: a create body for a job paced at ``seconds_per_epoch``
        (``fail``: one that fails on the platform soon after start; ``checkpoint_seconds``: every
        checkpoint write takes this long, so a stop with a final checkpoint does too).
    :ivar auto_cancel_spec: a job the platform cancels by itself, explaining why in its events
        (K19); ``None`` if the platform has no such thing.
    :ivar events: the platform streams events into the task log (K20).
    :ivar guard_spec: a long job whose per-epoch validation loss the platform reports while it
        runs, for early stopping across a triggerer restart (K7b); ``None`` where the platform
        reports no per-epoch metrics.
    :ivar engine_platform: the local platform's name for its jobs, when not ``name``.
    :ivar executor: the Airflow executor its DAGs' tasks run on (``LocalExecutor`` or
        ``CeleryExecutor``; the stack runs both).
    :ivar name_key: where a create body names its job (dotted path): the stem the provider makes
        each try's job name from, where the platform names jobs by the client.
    :ivar auxiliary: the path suffixes of the job's auxiliary endpoints (events, checkpoints,
        metrics: what a wait reads besides the job's status), if it has any.
    :ivar variant: a second flavor of the same platform (``code``: the user's own training code
        instead of the built-in trainer); its :attr:`key` is ``<name>-<variant>``.
    :ivar user_code: its jobs run the user's own program (:mod:`.user_code`), not the built-in trainer.
    :ivar reports_metrics: its API reports the built-in trainer's metrics (loss...), so a diverged
        run's NaN reaches the provider (ModelArts reports none: its metrics come from the program's log).
    :ivar shapes: the DAG shapes it has (``None``: every one its executor runs, :meth:`runs`).
    :ivar scenarios: the scenario keys it runs (``None``: every one that applies).
    """

    name: str
    suffix: str
    jobs_path: str
    final_checkpoint: bool
    spec: Callable[..., dict]
    cancel_reason: bool = True
    auto_cancel_spec: dict | None = None
    events: bool = False
    guard_spec: dict | None = None
    engine_platform: str | None = None
    executor: str = "LocalExecutor"
    name_key: str = "name"
    auxiliary: tuple[str, ...] = ()
    variant: str = ""
    user_code: bool = False
    reports_metrics: bool = True
    shapes: frozenset[str] | None = None
    scenarios: frozenset[str] | None = None

    @property
    def key(self) -> str:
        """Its name among the flavors a scenario runs on: the platform (``-<variant>`` appended for a
        variant), ``-celery`` appended when its tasks run on the CeleryExecutor."""
        name = f"{self.name}-{self.variant}" if self.variant else self.name
        return name if self.executor == "LocalExecutor" else f"{name}-celery"

    @property
    def on_celery(self) -> bool:
        return self.executor == "CeleryExecutor"

    def celery(self) -> Flavor:
        """The same platform with its tasks on the CeleryExecutor (DAG ids end in ``_celery``)."""
        return dataclasses.replace(self, suffix=self.suffix + "_celery", executor="CeleryExecutor")

    def runs(self, shape: str) -> bool:
        """Whether this flavor has a DAG of ``shape`` (``kp_deferred``...): all of them on the
        LocalExecutor; on Celery those of the cases proven there (:data:`CELERY_SHAPES`); a flavor
        with :attr:`shapes` only those."""
        if self.shapes is not None:
            return shape in self.shapes
        return not self.on_celery or shape in CELERY_SHAPES

    def runs_scenario(self, key: str) -> bool:
        """Whether the scenario ``key`` (``k1_mark_failed``...) may run on this flavor (:attr:`scenarios`)."""
        return self.scenarios is None or key in self.scenarios

    @property
    def conn_id(self) -> str:
        return f"{self.name}_local"

    @property
    def platform(self) -> str:
        """The local platform's name for its jobs (``platform`` of their records)."""
        return self.engine_platform or self.name

    def dag(self, base: str) -> str:
        return base + self.suffix

    def connection(self, url: str) -> dict:
        """The Airflow connection to the local platform at ``url`` (its local fixture's)."""
        return LOCAL_FIXTURES[self.name].connection(url)

    def with_name_stem(self, spec: dict, stem: str) -> dict:
        """``spec`` naming its job ``stem`` (at :attr:`name_key`)."""
        *parents, leaf = self.name_key.split(".")
        named = dict(spec)
        node = named
        for key in parents:
            node[key] = dict(node.get(key) or {})
            node = node[key]
        node[leaf] = stem
        return named

    def poll_rule(self, job_id: str | None = None) -> dict:
        """Fault-rule matchers for the status polls of ``job_id`` (of any job if ``None``)."""
        return {"method": "GET", "path_prefix": f"{self.jobs_path}/{job_id or ''}"}

    def cancel_rule(self, job_id: str) -> dict:
        """Fault-rule matchers for cancels of ``job_id``."""
        return {"method": "POST", "path_prefix": f"{self.jobs_path}/{job_id}/cancel"}

    def batch_rule(self, job_id: str) -> dict:
        """Fault-rule matchers for the platform's batch status reads that may read ``job_id``: the
        rounds of a coalesced wait's shared poller. Here its list of jobs, whose request names no
        job: every call of it."""
        return {"method": "GET", "path": self.jobs_path}


class AwsJsonFlavor(Flavor):
    """An awsJson platform: one ``POST /``; polls and cancels told apart by ``X-Amz-Target`` and
    the job name in the body."""

    def _rule(self, operation: str, job_id: str | None) -> dict:
        rule = {
            "method": "POST",
            "path_prefix": "/",
            "header": "X-Amz-Target",
            "header_value": f"SageMaker.{operation}",
        }
        return rule | ({"body_contains": f'"{job_id}"'} if job_id else {})

    def poll_rule(self, job_id: str | None = None) -> dict:
        return self._rule("DescribeTrainingJob", job_id)

    def cancel_rule(self, job_id: str) -> dict:
        return self._rule("StopTrainingJob", job_id)

    def batch_rule(self, job_id: str) -> dict:
        """``Search`` by names: only the calls naming ``job_id`` (in an ``In`` filter's
        comma-separated value, so not quoted)."""
        return self._rule("Search", None) | {"body_contains": job_id}


class PaiFlavor(Flavor):
    """PaiStudio: ACS3-signed ROA calls; a stop is ``PUT …/{id}/stop``."""

    def cancel_rule(self, job_id: str) -> dict:
        return {"method": "PUT", "path_prefix": f"{self.jobs_path}/{job_id}/stop"}


class ModelArtsFlavor(Flavor):
    """ModelArts: SDK-HMAC-SHA256-signed calls under ``/v2/{project_id}``; a terminate is
    ``POST …/{id}/actions``."""

    def cancel_rule(self, job_id: str) -> dict:
        return {"method": "POST", "path_prefix": f"{self.jobs_path}/{job_id}/actions"}

    def batch_rule(self, job_id: str) -> dict:
        """Its job search (``POST …/training-job-searches``), which names no job: every call of it."""
        return {
            "method": "POST",
            "path": self.jobs_path.removesuffix("/training-jobs") + "/training-job-searches",
        }


GUARD_PACE = {"epochs": 200, "seconds_per_epoch": 0.6, "learning_rate": 0.01}
GUARD_RULE = {"metric": "validation_loss", "mode": "min", "patience": 60, "min_delta": 0.05}
"""K7b's early stopping. At a learning rate of 0.01 the digits MLP's validation loss bottoms out
within ~5 epochs (about 0.12 at batch size 128) and never improves by 0.05 again, so the best epoch comes before the
triggerer restart. A patience of 60 epochs (36 s) leaves room for the restart (~20 epochs down)
after the last platform's job has passed its best: their jobs start at different times (Together's
queue holds its job longer), so the first is ~20 epochs ahead when the triggerers go down."""
TENSORONE = Flavor(
    "tensorone",
    "",
    "/v2/training/jobs",
    final_checkpoint=True,
    spec=tensorone_spec,
    guard_spec=tensorone_spec(**GUARD_PACE),
    # none a wait reads: its checkpoints endpoint is asked only for a job whose object lists none
)
TOGETHER = Flavor(
    "together",
    "_together",
    "/v1/fine-tunes",
    final_checkpoint=False,
    spec=together_spec,
    cancel_reason=False,
    name_key="suffix",
    auxiliary=("/events", "/checkpoints", "/metrics"),
    auto_cancel_spec=together_spec(epochs=20, seconds_per_epoch=0.5, wandb_key="not-forty-characters"),
    events=True,
    guard_spec=together_spec(**GUARD_PACE, n_evals=GUARD_PACE["epochs"]),  # an evaluation per epoch
)
SAGEMAKER = AwsJsonFlavor(
    "aws",
    "_sagemaker",
    "/",
    final_checkpoint=True,  # StopTrainingJob always sends SIGTERM and waits for the algorithm to save
    spec=sagemaker_spec,
    cancel_reason=False,
    events=True,
    engine_platform="sagemaker",
    name_key="TrainingJobName",
)
PAI = PaiFlavor(
    "pai",
    "_pai",
    "/api/v1/trainingjobs",
    final_checkpoint=True,  # a stop sends SIGTERM; the trainer saves into its checkpoints channel
    spec=pai_spec,
    cancel_reason=False,
    events=True,
    name_key="TrainingJobName",
    guard_spec=pai_spec(**GUARD_PACE),
    auxiliary=("/events", "/metrics"),
)
MODELARTS = ModelArtsFlavor(
    "modelarts",
    "_modelarts",
    f"/v2/{MODELARTS_PROJECT_ID}/training-jobs",
    final_checkpoint=True,  # a terminate sends SIGTERM; the trainer saves into its checkpoints channel
    spec=modelarts_spec,
    cancel_reason=False,
    events=True,
    name_key="metadata.name",
    auxiliary=("/events",),
    reports_metrics=False,
)
FLAVORS: dict[str, Flavor] = {f.name: f for f in (TENSORONE, TOGETHER, SAGEMAKER, PAI, MODELARTS)}
"""One flavor per platform, its tasks on the LocalExecutor; keyed by platform (connection type)."""
SAGEMAKER_USER_CODE = dataclasses.replace(
    SAGEMAKER,
    variant="code",
    suffix="_sagemaker_code",
    spec=sagemaker_script_spec,
    user_code=True,
    events=False,
    shapes=frozenset({"kp_deferred", "kp_exec_timeout_deferred", "kp_exec_timeout_resume", "kp_program_log"}),
    scenarios=frozenset(
        {
            "k1_mark_failed",
            "k5_execution_timeout_deferred",
            "k5b_timeout_retry_resumes",
            "k20_events_across_triggerer_restart",
        }
    ),
)
"""SageMaker script mode running the user's own script (:mod:`.user_code`): K1 and K5, K5b (the
retry resumes from the checkpoint the script wrote on SIGTERM) and K20 (``stream_logs``: the
script's lines in the task log, each once, across a triggerer restart). The local platform of the stack
runs user code (``--allow-user-code``) and has the script in its S3 before the DAGs run."""
CELERY_SHAPES = frozenset({
    "kp_deferred", "kp_exec_timeout_deferred", "kp_medium_deferred", "kp_medium_sensor", "kp_running",
    "kp_running_exec_timeout", "kp_worker_crash_reattach", "kp_worker_shutdown",
})  # fmt: skip
"""The DAG shapes the Celery variants have: K1, K2, K4, K5, K8, K10–K13 and K22."""
ALL_FLAVORS: dict[str, Flavor] = {
    **{f.key: f for f in FLAVORS.values()},
    **{f.celery().key: f.celery() for f in FLAVORS.values()},
    SAGEMAKER_USER_CODE.key: SAGEMAKER_USER_CODE,
}
"""Every flavor a scenario can run on, by :attr:`Flavor.key` (``tensorone``, ``tensorone-celery``...,
``aws-code``: SageMaker with the user's own code)."""


def flavor_of(job: dict) -> Flavor:
    """The flavor whose platform ran ``job`` (a local-platform record)."""
    return next(f for f in FLAVORS.values() if f.platform == job["platform"])


# -- secrets inside a job spec (tests/killpaths/test_spec_secrets.py) --------------------------------
SECRET_CONN_ID = "kp_spec_secret"
SECRET_VARIABLE = "kp_spec_secret_var"
TEMPLATED_VARIABLE = "kp_spec_templated"
WANDB_CONN_ID = "kp_wandb"
SPEC_SECRETS = {
    "connection": "kpConnSecret-5b8e0f3a9d2c4e71",
    "variable": "kpVarSecret-c7a14e9b2f6d3085",
    "templated": "kptemplated0a4f9e2c7b1d5368e0c9a7f2b4d6e",  # 40 characters: Together's W&B login
    "wandb": "kpwandb0f3e9a1c7d5b2046e8a9c1f3b7d5e2a04",  # 40 characters, like a real W&B key
}
"""Distinctive values the secret DAGs pass through each path, searched for everywhere Airflow keeps
anything; held by a connection (``SECRET_CONN_ID``: password), a Variable (``SECRET_VARIABLE``), a
Variable rendered by a template (``TEMPLATED_VARIABLE``) and a W&B connection (``WANDB_CONN_ID``),
all in environment variables (Airflow's environment secrets backend)."""


def secret_env() -> dict[str, str]:
    """``AIRFLOW_CONN_*`` / ``AIRFLOW_VAR_*`` holding :data:`SPEC_SECRETS` for the stack."""
    return {
        f"AIRFLOW_CONN_{SECRET_CONN_ID.upper()}": json.dumps(
            {"conn_type": "generic", "password": SPEC_SECRETS["connection"]}
        ),
        f"AIRFLOW_VAR_{SECRET_VARIABLE.upper()}": SPEC_SECRETS["variable"],
        f"AIRFLOW_VAR_{TEMPLATED_VARIABLE.upper()}": SPEC_SECRETS["templated"],
        f"AIRFLOW_CONN_{WANDB_CONN_ID.upper()}": json.dumps(
            {"conn_type": "generic", "password": SPEC_SECRETS["wandb"]}
        ),
    }


def secret_cases() -> dict[str, tuple[Flavor, dict, dict]]:
    """DAG id → (flavor, spec, extra operator kwargs) of the secret DAGs: every path a secret can
    take into each platform's spec. Environment variables on SageMaker, PAI and ModelArts (a
    connection, a Variable under a name that does not look secret, a template under one that does,
    W&B through ``wandb_conn_id``); Together's ``wandb_key`` and ``hf_api_token`` (two DAGs: the W&B
    key from ``wandb_conn_id``, then from a template); TensorOne's free-form ``config``."""
    conn_ref = {"secret": {"conn_id": SECRET_CONN_ID}}
    var_ref = {"secret": {"variable": SECRET_VARIABLE}}
    templated = "{{ var.value." + TEMPLATED_VARIABLE + " }}"
    pace = {"epochs": 30, "seconds_per_epoch": 0.5}  # ~15 s: the trigger rows are read meanwhile
    env = {
        "DB_PASSWORD": conn_ref,
        "DATA_SOURCE_URL": var_ref,
        "HUB_KEY": templated,
        "MODEL_NAME": "digits-mlp",
    }
    wandb = {"wandb_conn_id": WANDB_CONN_ID}
    tensorone = tensorone_spec(**pace)
    tensorone["config"].update(
        hubToken=var_ref, dbPassword=conn_ref, authKey=templated, modelName="digits-mlp"
    )
    modelarts = modelarts_spec(**pace)
    modelarts["algorithm"]["environments"] = env
    return {
        "kp_secrets": (TENSORONE, tensorone, {}),
        "kp_secrets_together": (TOGETHER, together_spec(**pace, hf_api_token=var_ref), wandb),
        "kp_secrets_templated_together": (
            TOGETHER,
            together_spec(**pace, wandb_key=templated, hf_api_token=conn_ref),
            {},
        ),
        "kp_secrets_sagemaker": (SAGEMAKER, sagemaker_spec(**pace, Environment=env), wandb),
        "kp_secrets_pai": (PAI, pai_spec(**pace, Environments=env), wandb),
        "kp_secrets_modelarts": (MODELARTS, modelarts, wandb),
    }
