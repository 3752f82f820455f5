"""PAI's contract for a training job that runs the user's own code (``CreateTrainingJob`` with a
``CodeDir``, or an ``AlgorithmSpec.Image`` mapped to a local command), translated into an engine
program (:mod:`airflow_training_platform.engine.programs`). The contract as implemented, the
choices where Alibaba leaves things open and the sources are in ``docs/platforms/pai.md``.

``/ml`` is ``<job dir>/ml`` (every path the program sees is that local path, not ``/ml``); OSS is
the local OSS root (:func:`.wire.oss_path`: ``oss://bucket/key`` is ``<data_dir>/oss/bucket/key``).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import tarfile
from dataclasses import dataclass, field
from typing import Any

from airflow_training_platform.engine import programs
from airflow_training_platform.engine.container_init import wrapped
from airflow_training_platform.engine.program_files import copy_files_out, copy_in, copy_tree_out
from airflow_training_platform.engine.programs import MetricDefinition, Program, ProgramExit
from airflow_training_platform.platforms.pai.wire import CHECKPOINT_CHANNEL, bad, oss_path

IMAGE_COMMAND_FLAG = "--pai-image-command"
MODEL_CHANNEL = "model"
_NOT_ENV = re.compile(r"[^A-Za-z0-9_]")


def env_name(name: str) -> str:
    """A hyperparameter or channel name as part of an environment variable name: characters outside
    ``[A-Za-z0-9_]`` become ``_``, upper-cased (``train.learning_rate`` → ``TRAIN_LEARNING_RATE``;
    the pai SDK's ``_normalize_name``)."""
    return _NOT_ENV.sub("_", name).upper()


def code_dir_of(body: dict[str, Any]) -> Any:
    """The request's ``CodeDir`` (``Location``): the top-level field, else ``AlgorithmSpec.CodeDir``."""
    spec = body.get("AlgorithmSpec")
    return body.get("CodeDir") or (spec.get("CodeDir") if isinstance(spec, dict) else None)


def is_user_code(body: dict[str, Any], image_commands: dict[str, str]) -> bool:
    """Does this ``CreateTrainingJob`` ask to run the user's code: a ``CodeDir``, or an
    ``AlgorithmSpec.Image`` mapped to a local command? (A ``Command`` alone does not: without code
    or a mapped image the local platform runs its built-in trainer.)"""
    spec = body.get("AlgorithmSpec")
    image = spec.get("Image") if isinstance(spec, dict) else None
    return bool(code_dir_of(body)) or (isinstance(image, str) and image in image_commands)


def parse_image_commands(entries: list[str] | None) -> dict[str, str]:
    """The ``--pai-image-command IMAGE=COMMAND`` entries as ``{image: command}``."""
    return programs.parse_image_commands(entries, IMAGE_COMMAND_FLAG)


def gpus_per_node() -> int:
    """``NPROC_PER_NODE``, "the number of GPUs of each worker node" in PAI DLC's built-in
    environment variables (``docs/platforms/pai.md``): the machine's CUDA devices
    (:func:`.programs.cuda_device_count`), but at least 1 — a CPU machine runs one process, and
    ``torchrun --nproc_per_node=$NPROC_PER_NODE`` refuses 0."""
    return max(1, programs.cuda_device_count())


def user_args(hyperparameters: dict[str, str]) -> str:
    """``PAI_USER_ARGS``: ``--<name> <value>`` per hyperparameter in request order, each word
    shell-quoted once, joined by spaces (``python train.py $PAI_USER_ARGS``)."""
    return " ".join(shlex.quote(w) for name, value in hyperparameters.items() for w in (f"--{name}", value))


def command_argv(command: list[str]) -> list[str]:
    """The process's argv: the ``Command`` list as given (what a container runs; the pai SDK sends a
    string command as ``["sh", "-c", <command>]``); a one-element list is a command line, run with
    ``/bin/sh -c``."""
    return ["/bin/sh", "-c", command[0]] if len(command) == 1 else list(command)


@dataclass
class PaiUserCodeJob:
    """One ``CreateTrainingJob`` running the user's code (an engine ``ProgramSource``).

    name: the job's ``TrainingJobName``.
    data_dir: the server's data directory (the local OSS root is ``<data_dir>/oss``).
    command: ``AlgorithmSpec.Command`` (list of strings).
    code_dir: the local directory (or file) standing in for ``CodeDir``'s OSS prefix ``Bucket``/``Key``
        (``None``: no code, a mapped image).
    hyperparameters: ``HyperParameters[{Name, Value}]`` as ``{name: str(value)}``, in request order.
    inputs: ``InputChannels[{Name, InputUri}]`` as ``{name: local path of the oss:// URI}``.
    outputs: ``OutputChannels[{Name, OutputUri}]`` as ``{name: local directory of the oss:// URI}``.
    environment: ``Environments`` (string → string).
    metric_definitions: ``AlgorithmSpec.MetricDefinitions[{Name, Regex}]``.
    image_command: the local command a mapped ``AlgorithmSpec.Image`` stands for; it replaces
        ``command`` (``None``: run ``command``).
    """

    name: str
    data_dir: str
    command: list[str]
    code_dir: str | None = None
    hyperparameters: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    metric_definitions: list[MetricDefinition] = field(default_factory=list)
    image_command: str | None = None

    def prepare(self, job_dir: str) -> Program:
        """Lay out ``<job_dir>/ml`` (code, ``hyperparameters.json``, input channels, restored
        checkpoints, output directories) and return the program with its ``PAI_*`` environment."""
        ml = os.path.join(job_dir, "ml")
        working_dir = os.path.join(ml, "usercode")
        config_dir = os.path.join(ml, "input", "config")
        for path in (working_dir, config_dir):
            os.makedirs(path, exist_ok=True)
        if self.code_dir is not None:
            self._fetch_code(working_dir)
        with open(os.path.join(config_dir, "hyperparameters.json"), "w") as fh:
            json.dump(self.hyperparameters, fh)

        env = {"PAI_WORKING_DIR": working_dir + "/", "PAI_CONFIG_DIR": config_dir + "/"}
        for name, source in self.inputs.items():
            target = os.path.join(ml, "input", "data", name)
            copied = copy_in(source, target)
            single_file = copied is not None and os.path.isfile(copied)  # an object, not a prefix
            env[f"PAI_INPUT_{env_name(name)}"] = copied if copied and single_file else target + "/"
        output_dirs = {name: os.path.join(ml, "output", name) for name in self.outputs}
        for name, local in output_dirs.items():
            os.makedirs(local, exist_ok=True)
            env[f"PAI_OUTPUT_{env_name(name)}"] = local + "/"
        checkpoint_dir = output_dirs.get(CHECKPOINT_CHANNEL)
        if checkpoint_dir is not None:  # restored before the program starts: how a retry resumes
            copy_in(self.outputs[CHECKPOINT_CHANNEL], checkpoint_dir)
        env["PAI_HPS"] = json.dumps(self.hyperparameters)
        env.update({f"PAI_HPS_{env_name(k)}": v for k, v in self.hyperparameters.items()})
        env["PAI_USER_ARGS"] = user_args(self.hyperparameters)
        env["NPROC_PER_NODE"] = str(gpus_per_node())
        argv = shlex.split(self.image_command) if self.image_command else command_argv(self.command)
        return Program(
            argv=wrapped(argv),  # under a container init: a shell command survives a stop's SIGTERM
            cwd=working_dir,
            env={**env, **self.environment},
            log_file=os.path.join(job_dir, "logs", "master-0.jsonl"),
            checkpoint_dir=checkpoint_dir,
            model_dir=output_dirs.get(MODEL_CHANNEL),
            output_dir=os.path.join(ml, "output"),
            metric_definitions=list(self.metric_definitions),
            on_checkpoints=functools.partial(self._checkpoints_out, checkpoint_dir),
            on_exit=functools.partial(self._outputs_out, output_dirs),
        )

    def _fetch_code(self, working_dir: str) -> None:
        """``CodeDir`` → the working directory: the objects under the prefix (as the pai SDK uploads
        ``source_dir``), or one object — a tarball is unpacked, another file copied.
        :raises FileNotFoundError: nothing at the prefix."""
        assert self.code_dir is not None
        if os.path.isfile(self.code_dir) and tarfile.is_tarfile(self.code_dir):
            with tarfile.open(self.code_dir) as tar:
                tar.extractall(working_dir, filter="data")  # no absolute paths, no escapes, no devices
        elif (os.path.isdir(self.code_dir) and os.listdir(self.code_dir)) or os.path.isfile(self.code_dir):
            copy_in(self.code_dir, working_dir)
        else:
            raise FileNotFoundError(f"CodeDir: no code at {self.code_dir}")

    def _checkpoints_out(self, local_dir: str | None, paths: list[str]) -> None:
        """New or changed checkpoint files → the ``checkpoints`` channel's ``OutputUri`` (while the
        job runs, and the final ones after a stop)."""
        if local_dir is not None:
            copy_files_out(local_dir, paths, self.outputs[CHECKPOINT_CHANNEL])

    def _outputs_out(self, output_dirs: dict[str, str], _exit: ProgramExit) -> None:
        """After the program, whatever its outcome: each output channel's directory → its
        ``OutputUri`` (same relative paths)."""
        for name, local in output_dirs.items():
            copy_tree_out(local, self.outputs[name])


def parse_user_code(body: dict[str, Any], data_dir: str, image_commands: dict[str, str]) -> PaiUserCodeJob:
    """The :class:`PaiUserCodeJob` of a ``CreateTrainingJob`` for which :func:`is_user_code` holds
    (already checked by :func:`.wire.parse_create`). :raises ApiError: ``InvalidParameter`` naming
    the field."""
    spec = body.get("AlgorithmSpec") or {}
    command = spec.get("Command")
    if not (isinstance(command, list) and command and all(isinstance(c, str) and c for c in command)):
        raise bad("AlgorithmSpec.Command", "must be a non-empty list of strings")
    code_dir = None
    if location := code_dir_of(body):
        code_dir = _code_location(location, data_dir)
    definitions = []
    for i, d in enumerate(spec.get("MetricDefinitions") or []):
        field_name = f"AlgorithmSpec.MetricDefinitions.{i + 1}"
        if not (isinstance(d, dict) and isinstance(d.get("Name"), str) and isinstance(d.get("Regex"), str)):
            raise bad(field_name, "must be {Name, Regex}")
        try:
            re.compile(d["Regex"])
        except re.error as exc:
            raise bad(f"{field_name}.Regex", f"is not a valid regular expression: {exc}") from None
        definitions.append(MetricDefinition(d["Name"], d["Regex"]))
    environment = body.get("Environments") or {}
    if not isinstance(environment, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in environment.items()
    ):
        raise bad("Environments", "must be a map of strings to strings")
    return PaiUserCodeJob(
        name=body["TrainingJobName"],
        data_dir=data_dir,
        command=list(command),
        code_dir=code_dir,
        hyperparameters={str(h["Name"]): str(h.get("Value", "")) for h in body.get("HyperParameters") or []},
        inputs=_channels(body, "InputChannels", "InputUri", data_dir),
        outputs=_channels(body, "OutputChannels", "OutputUri", data_dir),
        environment=dict(environment),
        metric_definitions=definitions,
        image_command=image_commands.get(str(spec.get("Image"))),
    )


def _code_location(location: Any, data_dir: str) -> str:
    """``CodeDir`` ``{"LocationType": "oss", "LocationValue": {"Bucket", "Key", "Endpoint"}}`` → the
    local path of ``oss://Bucket/Key`` (``Endpoint`` is not needed locally)."""
    kind = location.get("LocationType") if isinstance(location, dict) else location
    if not isinstance(location, dict) or str(kind).lower() != "oss":
        raise bad(
            "CodeDir.LocationType", f"'{kind}' is not supported: the local platform reads code from 'oss'"
        )
    value = location.get("LocationValue")
    if not (isinstance(value, dict) and isinstance(value.get("Bucket"), str) and value["Bucket"]):
        raise bad("CodeDir.LocationValue", "must name the OSS Bucket and Key of the code")
    key = str(value.get("Key") or "")
    return oss_path(data_dir, f"oss://{value['Bucket']}/{key}", "CodeDir.LocationValue")


def _channels(body: dict[str, Any], key: str, uri_key: str, data_dir: str) -> dict[str, str]:
    """``InputChannels``/``OutputChannels`` → ``{Name: local path of its oss:// URI}`` (a channel by
    ``DatasetId`` is refused: the local platform has no PAI datasets)."""
    out: dict[str, str] = {}
    for i, channel in enumerate(body.get(key) or []):
        if not (isinstance(channel, dict) and isinstance(channel.get("Name"), str) and channel["Name"]):
            raise bad(f"{key}.{i + 1}.Name", "is mandatory")
        uri = channel.get(uri_key)
        if not isinstance(uri, str):
            raise bad(
                f"{key}.{i + 1}.{uri_key}", "must be an oss:// URI (the local platform has no datasets)"
            )
        out[channel["Name"]] = oss_path(data_dir, uri, f"{key}.{i + 1}.{uri_key}")
    return out
