"""The SageMaker training-container contract for a user's own code: script mode (the SageMaker
training toolkit's ``sagemaker_program`` + ``sagemaker_submit_directory``) and images mapped to a
local command (bring your own container). Translated into an engine program
(:mod:`airflow_training_platform.engine.programs`); the contract as implemented, the choices
where AWS leaves things open and the sources are in ``docs/platforms/sagemaker.md``.

``/opt/ml`` is ``<job dir>/opt/ml`` (every path the program sees is that local path, not
``/opt/ml``); S3 is the local S3 root (:func:`.wire.s3_path`).
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import re
import shlex
import shutil
import stat
import sys
import tarfile
from dataclasses import dataclass, field
from typing import Any

from airflow_training_platform.engine import programs
from airflow_training_platform.engine.container_init import wrapped
from airflow_training_platform.engine.program_files import copy_files_out, copy_in
from airflow_training_platform.engine.programs import MetricDefinition, Program, ProgramExit
from airflow_training_platform.platforms.sagemaker.wire import bad, s3_path

PROGRAM_KEY = "sagemaker_program"
SUBMIT_DIRECTORY_KEY = "sagemaker_submit_directory"
LOG_LEVEL_KEY = "sagemaker_container_log_level"
SAGEMAKER_PREFIX = "sagemaker_"
"""Hyperparameters starting with this are the toolkit's, never the program's arguments
(sagemaker-training-toolkit ``params.SAGEMAKER_PREFIX``)."""
CURRENT_HOST = "algo-1"
DEFAULT_CHECKPOINT_PATH = "/opt/ml/checkpoints"
DEFAULT_LOG_LEVEL = 20  # logging.INFO, the SageMaker Python SDK's default


def decode(value: str) -> Any:
    """A hyperparameter value as the toolkit reads it: JSON (the SageMaker Python SDK sends
    ``json.dumps(v)``, so ``"\\"train.py\\""`` → ``train.py``, ``"1e-3"`` → ``0.001``), else the raw
    string (``"train.py"`` sent plain)."""
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return value


def is_user_code(body: dict[str, Any], image_commands: dict[str, str]) -> bool:
    """Does this ``CreateTrainingJob`` ask to run the user's code: script mode (``sagemaker_program``
    in ``HyperParameters``) or a ``TrainingImage`` mapped to a local command?"""
    hyper = body.get("HyperParameters")
    image = (body.get("AlgorithmSpecification") or {}).get("TrainingImage")
    return (isinstance(hyper, dict) and PROGRAM_KEY in hyper) or (image in image_commands)


def parse_image_commands(entries: list[str] | None) -> dict[str, str]:
    """The ``--sagemaker-image-command IMAGE=COMMAND`` entries as ``{image: command}``."""
    return programs.parse_image_commands(entries, "--sagemaker-image-command")


def to_cmd_args(hyperparameters: dict[str, Any]) -> list[str]:
    """The program's arguments, by the toolkit's ``mapping.to_cmd_args``: keys sorted, ``--key value``
    (``-k`` for a one-character key), a dict value as ``k1=v1,k2=v2``, other values ``str()`` of the
    JSON-decoded value."""
    args: list[str] = []
    for key in sorted(hyperparameters):
        value = hyperparameters[key]
        if isinstance(value, dict):
            value = ",".join(f"{k}={v}" for k, v in value.items())
        args += [f"-{key}" if len(key) == 1 else f"--{key}", str(value)]
    return args


def _env_value(value: Any) -> str:
    """Toolkit convention: strings raw, everything else compact sorted JSON."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass
class ScriptModeJob:
    """One ``CreateTrainingJob`` running the user's code (an engine ``ProgramSource``).

    name, region: the job's name and the server's region.
    data_dir: the server's data directory (the local S3 root is ``<data_dir>/s3``).
    hyperparameters: the request's ``HyperParameters`` (strings, as sent).
    channels: the request's ``InputDataConfig``.
    output_path: ``OutputDataConfig.S3OutputPath``.
    checkpoint_uri, checkpoint_local_path: ``CheckpointConfig.S3Uri`` / ``LocalPath``.
    environment: the request's ``Environment``.
    metric_definitions: ``AlgorithmSpecification.MetricDefinitions``.
    instance_type: ``ResourceConfig.InstanceType``.
    image_command: the local command a mapped ``TrainingImage`` stands for (bring your own container;
        ``None``: script mode), with ``container_entrypoint`` / ``container_arguments``.
    python: the interpreter ``*.py`` entry points run with (the server's own).
    """

    name: str
    region: str
    data_dir: str
    hyperparameters: dict[str, str]
    channels: list[dict[str, Any]]
    output_path: str
    checkpoint_uri: str | None = None
    checkpoint_local_path: str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    metric_definitions: list[MetricDefinition] = field(default_factory=list)
    instance_type: str = "local"
    image_command: str | None = None
    container_entrypoint: list[str] | None = None
    container_arguments: list[str] | None = None
    python: str = sys.executable

    # ------------------------------------------------------------------ paths
    def _s3(self, uri: str) -> str:
        return s3_path(self.data_dir, uri)

    def _model_uri(self) -> str:
        """Where the model lands: what ``ModelArtifacts.S3ModelArtifacts`` reports (:func:`.wire.job_to_wire`)."""
        return f"{self.output_path.rstrip('/')}/{self.name}/output/model.tar.gz"

    @staticmethod
    def _mapped(job_dir: str, container_path: str) -> str:
        """A container path (``/opt/ml/checkpoints``) → the same path under the job directory."""
        return os.path.join(job_dir, container_path.lstrip("/"))

    # ------------------------------------------------------------------ ProgramSource
    def prepare(self, job_dir: str) -> Program:
        """Lay out ``<job_dir>/opt/ml`` (code, configuration, channels, restored checkpoints) and
        return the program with its environment and command."""
        ml = os.path.join(job_dir, "opt", "ml")
        paths = {
            "code": os.path.join(ml, "code"),
            "input": os.path.join(ml, "input"),
            "config": os.path.join(ml, "input", "config"),
            "data": os.path.join(ml, "input", "data"),
            "model": os.path.join(ml, "model"),
            "output": os.path.join(ml, "output"),
            "output_data": os.path.join(ml, "output", "data"),
            "intermediate": os.path.join(ml, "output", "intermediate"),
            "checkpoints": self._mapped(job_dir, self.checkpoint_local_path or DEFAULT_CHECKPOINT_PATH),
        }
        for path in paths.values():
            os.makedirs(path, exist_ok=True)
        decoded = {k: decode(v) for k, v in self.hyperparameters.items()}
        user_hps = {k: v for k, v in decoded.items() if not k.startswith(SAGEMAKER_PREFIX)}
        entry = decoded.get(PROGRAM_KEY)
        submit = decoded.get(SUBMIT_DIRECTORY_KEY)
        if entry is not None:
            if submit:
                self._fetch_code(str(submit), paths["code"])
            if not os.path.isfile(os.path.join(paths["code"], str(entry))):
                raise FileNotFoundError(
                    f"{PROGRAM_KEY} {entry!r} is not in {SUBMIT_DIRECTORY_KEY} {submit!r}"
                )

        resource_config = {
            "current_host": CURRENT_HOST,
            "current_instance_type": self.instance_type,
            "current_group_name": "homogeneousCluster",
            "hosts": [CURRENT_HOST],
            "instance_groups": [
                {
                    "instance_group_name": "homogeneousCluster",
                    "instance_type": self.instance_type,
                    "hosts": [CURRENT_HOST],
                }
            ],  # fmt: skip
            "network_interface_name": "eth0",
        }
        input_data_config = {}
        channel_dirs = {}
        for channel in self.channels:
            name = str(channel["ChannelName"])
            input_data_config[name] = {
                "TrainingInputMode": channel.get("InputMode", "File"),
                "S3DistributionType": (channel.get("DataSource") or {})
                .get("S3DataSource", {})
                .get("S3DistributionType", "FullyReplicated"),
                "RecordWrapperType": channel.get("RecordWrapperType", "None"),
                **({"ContentType": channel["ContentType"]} if channel.get("ContentType") else {}),
            }
            channel_dirs[name] = os.path.join(paths["data"], name)
            uri = (channel.get("DataSource") or {}).get("S3DataSource", {}).get("S3Uri", "")
            self._copy_in(self._s3(str(uri)), channel_dirs[name])
        if self.checkpoint_uri:  # restored before the program starts: how a retry resumes
            self._copy_in(self._s3(self.checkpoint_uri), paths["checkpoints"])
        with open(os.path.join(paths["config"], "hyperparameters.json"), "w") as fh:
            json.dump(self.hyperparameters, fh)
        with open(os.path.join(paths["config"], "resourceconfig.json"), "w") as fh:
            json.dump(resource_config, fh)
        with open(os.path.join(paths["config"], "inputdataconfig.json"), "w") as fh:
            json.dump(input_data_config, fh)

        argv = self._command(paths["code"], entry, user_hps)
        env = self._environment(paths, entry, decoded, user_hps, channel_dirs, resource_config,
                                input_data_config, argv)  # fmt: skip
        return Program(
            argv=argv,
            cwd=paths["code"],
            env=env,
            log_file=os.path.join(job_dir, "logs", f"{CURRENT_HOST}.jsonl"),
            checkpoint_dir=paths["checkpoints"],
            model_dir=paths["model"],
            output_dir=paths["output"],
            failure_file=os.path.join(paths["output"], "failure"),
            metric_definitions=list(self.metric_definitions),
            on_checkpoints=functools.partial(self._sync_out, paths["checkpoints"]),
            on_exit=functools.partial(self._pack, paths["model"], paths["output_data"]),
        )

    # ------------------------------------------------------------------ the pieces
    def _command(self, code_dir: str, entry: Any, user_hps: dict[str, Any]) -> list[str]:
        """The toolkit's command (``process.ProcessRunner._create_command``), or the mapped image's."""
        args = to_cmd_args(user_hps)
        if entry is None:  # a mapped image: docker run [--entrypoint E] image [ARGS | train]
            assert self.image_command is not None
            command = self.container_entrypoint or shlex.split(self.image_command)
            return [*command, *(self.container_arguments or ["train"])]
        entry = str(entry)
        if entry.endswith(".py") and os.path.isfile(os.path.join(code_dir, "setup.py")):
            return [self.python, "-m", entry.removesuffix(".py"), *args]
        if entry.endswith(".py"):
            return [self.python, entry, *args]
        path = os.path.join(code_dir, entry)  # *.sh and anything else: run by the shell
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        command = ["/bin/sh", "-c", " ".join([f"./{shlex.quote(entry)}", *map(shlex.quote, args)])]
        # under a container init, as PAI's shell commands: the shells die of the stop's SIGTERM at
        # once, the init keeps the job alive until the program they started has saved and exited
        return wrapped(command)

    def _environment(
        self,
        paths: dict[str, str],
        entry: Any,
        decoded: dict[str, Any],
        user_hps: dict[str, Any],
        channel_dirs: dict[str, str],
        resource_config: dict[str, Any],
        input_data_config: dict[str, Any],
        argv: list[str],
    ) -> dict[str, str]:
        """The toolkit's ``SM_*`` variables, the platform's own, then the request's ``Environment``."""
        user_args = to_cmd_args(user_hps)
        module = str(entry or "").removesuffix(".py").removesuffix(".sh")
        log_level = decoded.get(LOG_LEVEL_KEY, DEFAULT_LOG_LEVEL)
        framework = {k: v for k, v in decoded.items() if k.startswith(SAGEMAKER_PREFIX)}
        for key in (
            PROGRAM_KEY,
            SUBMIT_DIRECTORY_KEY,
            LOG_LEVEL_KEY,
            "sagemaker_job_name",
            "sagemaker_region",
        ):
            framework.pop(key, None)
        training_env = {
            "job_name": self.name,
            "current_host": CURRENT_HOST,
            "hosts": [CURRENT_HOST],
            "network_interface_name": "eth0",
            "hyperparameters": user_hps,
            "additional_framework_parameters": framework,
            "channel_input_dirs": channel_dirs,
            "input_data_config": input_data_config,
            "resource_config": resource_config,
            "input_dir": paths["input"],
            "input_config_dir": paths["config"],
            "model_dir": paths["model"],
            "output_dir": paths["output"],
            "output_data_dir": paths["output_data"],
            "output_intermediate_dir": paths["intermediate"],
            "module_dir": paths["code"],
            "module_name": module,
            "user_entry_point": entry,
            "log_level": log_level,
            "num_gpus": programs.cuda_device_count(),
            "num_cpus": multiprocessing.cpu_count(),
        }
        env = {
            # the toolkit's own override of /opt/ml: a program (or the toolkit) finds the layout here
            "SAGEMAKER_BASE_DIR": os.path.dirname(paths["model"]),
            "SM_MODEL_DIR": paths["model"],
            "SM_INPUT_DIR": paths["input"],
            "SM_INPUT_CONFIG_DIR": paths["config"],
            "SM_OUTPUT_DIR": paths["output"],
            "SM_OUTPUT_DATA_DIR": paths["output_data"],
            "SM_OUTPUT_INTERMEDIATE_DIR": paths["intermediate"],
            "SM_CHANNELS": _env_value(sorted(channel_dirs)),
            **{f"SM_CHANNEL_{name.upper()}": path for name, path in channel_dirs.items()},
            "SM_HPS": _env_value(user_hps),
            **{f"SM_HP_{key.upper()}": _env_value(value) for key, value in user_hps.items()},
            "SM_USER_ARGS": _env_value(user_args),
            "SM_CURRENT_HOST": CURRENT_HOST,
            "SM_HOSTS": _env_value([CURRENT_HOST]),
            "SM_NETWORK_INTERFACE_NAME": "eth0",
            "SM_CURRENT_INSTANCE_TYPE": self.instance_type,
            "SM_NUM_GPUS": str(programs.cuda_device_count()),
            "SM_NUM_CPUS": str(multiprocessing.cpu_count()),
            "SM_RESOURCE_CONFIG": _env_value(resource_config),
            "SM_INPUT_DATA_CONFIG": _env_value(input_data_config),
            "SM_TRAINING_ENV": _env_value(training_env),
            "SM_MODULE_DIR": paths["code"],
            "SM_MODULE_NAME": module,
            "SM_USER_ENTRY_POINT": str(entry or ""),
            "SM_LOG_LEVEL": _env_value(log_level),
            "SM_FRAMEWORK_PARAMS": _env_value(framework),
            "CURRENT_HOST": CURRENT_HOST,
            "SAGEMAKER_JOB_NAME": self.name,
            "SAGEMAKER_REGION": self.region,
            "TRAINING_JOB_NAME": self.name,
            "TRAINING_JOB_ARN": f"arn:aws:sagemaker:{self.region}:123456789012:training-job/{self.name.lower()}",
        }
        return {**env, **self.environment}

    def _fetch_code(self, submit: str, code_dir: str) -> None:
        """``sagemaker_submit_directory`` → ``code_dir``: an ``s3://`` tarball or prefix, a
        ``file://`` (or plain) directory or tarball. Skipped when ``code_dir`` already holds files,
        as the toolkit does."""
        if os.listdir(code_dir):
            return
        source = self._s3(submit) if submit.startswith("s3://") else submit.removeprefix("file://")
        if os.path.isdir(source):
            shutil.copytree(source, code_dir, dirs_exist_ok=True)
        elif os.path.isfile(source):
            with tarfile.open(source) as tar:
                tar.extractall(code_dir, filter="data")  # no absolute paths, no escapes, no devices
        else:
            raise FileNotFoundError(f"{SUBMIT_DIRECTORY_KEY} {submit!r}: nothing at {source}")

    @staticmethod
    def _copy_in(source: str, target: str) -> None:
        """Copy an S3 prefix (a directory) or object (a file) into ``target`` (File input mode: the
        program gets its own copy). Nothing there: an empty directory, as for an empty prefix."""
        copy_in(source, target)

    def _sync_out(self, local_dir: str, paths: list[str]) -> None:
        """New or changed checkpoint files → ``CheckpointConfig.S3Uri``, same relative paths."""
        if self.checkpoint_uri:
            copy_files_out(local_dir, paths, self._s3(self.checkpoint_uri))

    def _pack(self, model_dir: str, output_data_dir: str, _exit: ProgramExit) -> None:
        """After the program (whatever its outcome): ``model/`` → ``<S3OutputPath>/<job>/output/
        model.tar.gz``, ``output/data/`` → ``output.tar.gz`` beside it; entries at the archive root."""
        model_tar = self._s3(self._model_uri())
        os.makedirs(os.path.dirname(model_tar), exist_ok=True)
        for source, target in ((model_dir, model_tar),
                               (output_data_dir, os.path.join(os.path.dirname(model_tar), "output.tar.gz"))):  # fmt: skip
            with tarfile.open(target, "w:gz") as tar:
                for entry in sorted(os.listdir(source)):
                    tar.add(os.path.join(source, entry), arcname=entry)


def parse_user_code(
    body: dict[str, Any], data_dir: str, region: str, image_commands: dict[str, str]
) -> ScriptModeJob:
    """The :class:`ScriptModeJob` of a ``CreateTrainingJob`` for which :func:`is_user_code` holds
    (already validated by :func:`.wire.parse_create`). :raises ApiError: a bad field."""
    hyper = body.get("HyperParameters") or {}
    algorithm = body.get("AlgorithmSpecification") or {}
    if PROGRAM_KEY in hyper:
        program = decode(hyper[PROGRAM_KEY])
        if (
            not isinstance(program, str)
            or not program
            or os.path.isabs(program)
            or ".." in program.split("/")
        ):
            raise bad(f"hyperParameters.{PROGRAM_KEY}", "failed to satisfy constraint: a file in the code")
    definitions = []
    for i, d in enumerate(algorithm.get("MetricDefinitions") or []):
        if not (isinstance(d, dict) and isinstance(d.get("Name"), str) and isinstance(d.get("Regex"), str)):
            raise bad(
                f"algorithmSpecification.metricDefinitions.{i + 1}",
                "failed to satisfy constraint: {Name, Regex}",
            )
        try:
            re.compile(d["Regex"])
        except re.error as exc:
            raise bad(
                f"algorithmSpecification.metricDefinitions.{i + 1}.regex", f"is not a valid regex: {exc}"
            ) from None
        definitions.append(MetricDefinition(d["Name"], d["Regex"]))
    environment = body.get("Environment") or {}
    if not isinstance(environment, dict) or not all(isinstance(v, str) for v in environment.values()):
        raise bad("environment", "failed to satisfy constraint: Member must be a map of strings")
    checkpoint = body.get("CheckpointConfig") or {}
    for key in ("ContainerEntrypoint", "ContainerArguments"):
        value = algorithm.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise bad(
                f"algorithmSpecification.{key[0].lower()}{key[1:]}",
                "failed to satisfy constraint: a list of strings",
            )
    image = algorithm.get("TrainingImage")
    return ScriptModeJob(
        name=body["TrainingJobName"],
        region=region,
        data_dir=data_dir,
        hyperparameters={str(k): str(v) for k, v in hyper.items()},
        channels=[
            c for c in body.get("InputDataConfig") or [] if isinstance(c, dict) and c.get("ChannelName")
        ],
        output_path=body["OutputDataConfig"]["S3OutputPath"],
        checkpoint_uri=checkpoint.get("S3Uri"),
        checkpoint_local_path=checkpoint.get("LocalPath"),
        environment=dict(environment),
        metric_definitions=definitions,
        instance_type=str((body.get("ResourceConfig") or {}).get("InstanceType", "local")),
        image_command=None if PROGRAM_KEY in hyper else image_commands.get(str(image)),
        container_entrypoint=algorithm.get("ContainerEntrypoint"),
        container_arguments=algorithm.get("ContainerArguments"),
    )
