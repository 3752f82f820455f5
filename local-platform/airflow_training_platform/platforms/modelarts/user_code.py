"""The ModelArts training-container contract for a user's own code (API v2 ``JobAlgorithm``:
``code_dir`` + ``boot_file``, or a custom image's ``engine.image_url`` mapped to a local command),
translated into an engine program (:mod:`airflow_training_platform.engine.programs`). The contract
as implemented, the choices where Huawei leaves things open, and the Huawei documents each rule
follows are in ``docs/platforms/modelarts.md`` ("Your own training code on the local platform").

Container paths are mapped under the job directory: ``/home/ma-user/modelarts/inputs/data_url_0``
is ``<job dir>/home/ma-user/modelarts/inputs/data_url_0``, and every path the program is given (in
its arguments and its environment) is that local path. OBS is the local OBS root
(:func:`.wire.obs_path`); the copies to and from it are :mod:`~airflow_training_platform.engine.program_files`.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

from airflow_training_platform.engine import program_files, programs
from airflow_training_platform.engine.programs import Program, ProgramExit
from airflow_training_platform.platforms.modelarts.wire import CHECKPOINT_CHANNELS, bad, obs_path

# Container paths ("Environment variables of a training container", ModelArts user guide).
MA_HOME = "/home/ma-user"
MA_MOUNT_PATH = "/home/ma-user/modelarts"
MA_JOB_DIR = "/home/ma-user/modelarts/user-job-dir"
MA_LOG_DIR = "/home/ma-user/modelarts/log"
INPUTS_DIR = "/home/ma-user/modelarts/inputs"
OUTPUTS_DIR = "/home/ma-user/modelarts/outputs"
TASK_NAME = "worker"
TASK_ID = "worker-0"
"""The one task of a local job (``status.tasks``)."""
LOCAL_IP = "127.0.0.1"
ACCESS_METHODS = ("parameter", "env")
"""How a channel's local directory reaches the program (``Input.access_method``; default ``parameter``)."""
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""What an ``algorithm.environments`` name may be (the API reference's ``environments`` constraint)."""
MAX_ENVIRONMENTS = 100
RESERVED_ENV_PREFIX = "MA_"
"""Names users must not define (the platform's own variables)."""


def is_user_code(body: dict[str, Any], image_commands: dict[str, str]) -> bool:
    """Does this create ask to run the user's code: ``algorithm.code_dir`` with ``boot_file``, or an
    ``algorithm.engine.image_url`` mapped to a local command (``--modelarts-image-command``)? A
    custom image that is not mapped keeps the built-in trainer."""
    algorithm = body.get("algorithm") if isinstance(body, dict) else None
    if not isinstance(algorithm, dict):
        return False
    engine = algorithm.get("engine")
    image = engine.get("image_url") if isinstance(engine, dict) else None
    return bool(algorithm.get("code_dir") and algorithm.get("boot_file")) or (
        isinstance(image, str) and image in image_commands
    )


def parse_image_commands(entries: list[str] | None) -> dict[str, str]:
    """The ``--modelarts-image-command IMAGE=COMMAND`` entries as ``{image: command}``."""
    return programs.parse_image_commands(entries, "--modelarts-image-command")


def mapped(job_dir: str, container_path: str) -> str:
    """A container path (``/home/ma-user/...``, already checked by :func:`_container_path`) → the
    same path under ``job_dir``."""
    return os.path.join(job_dir, container_path.lstrip("/"))


@dataclass(frozen=True)
class Channel:
    """One ``algorithm.inputs[]`` / ``outputs[]`` entry.

    name: the channel name (``data_url``, ``train_url``...): the argument (``--<name>=<dir>``) or,
        with ``access_method`` ``env``, the environment variable its directory is passed as.
    obs_url: ``remote.obs.obs_url``, an OBS directory (``/bucket/key/`` or ``obs://bucket/key/``).
    local_dir: the container path (``local_dir``; default ``/home/ma-user/modelarts/inputs/<name>_0``
        or ``.../outputs/<name>_0``).
    access_method: ``parameter`` (default) or ``env``.
    """

    name: str
    obs_url: str
    local_dir: str
    access_method: str = "parameter"


@dataclass
class UserCodeJob:
    """One ModelArts create running the user's code (an engine ``ProgramSource``).

    data_dir: the server's data directory (the local OBS root is ``<data_dir>/obs``).
    code_dir: ``algorithm.code_dir`` (an OBS directory), or ``None`` for a mapped image without code.
    boot_file: ``algorithm.boot_file`` relative to ``code_dir`` (a ``.py`` file), or ``None`` for a
        mapped image.
    image_command: the local command a mapped ``engine.image_url`` stands for (its boot command:
        ``algorithm.command`` names paths inside the image, so it is recorded, not run).
    parameters: ``algorithm.parameters`` as ``(name, value)`` strings, in request order.
    inputs, outputs: ``algorithm.inputs`` / ``outputs``.
    checkpoint_output: the name of the output whose directory is the job's checkpoints (the first
        of ``checkpoints``, ``train_url`` present, as for the built-in trainer), or ``None``.
    environments: ``algorithm.environments``.
    local_code_dir, working_dir: ``algorithm.local_code_dir`` / ``working_dir`` (container paths).
    python: the interpreter a ``.py`` boot file runs with (the server's own).
    """

    data_dir: str
    code_dir: str | None
    boot_file: str | None
    image_command: str | None = None
    parameters: list[tuple[str, str]] = field(default_factory=list)
    inputs: list[Channel] = field(default_factory=list)
    outputs: list[Channel] = field(default_factory=list)
    checkpoint_output: str | None = None
    environments: dict[str, str] = field(default_factory=dict)
    local_code_dir: str | None = None
    working_dir: str | None = None
    python: str = sys.executable

    def _obs(self, url: str, what: str) -> str:
        return obs_path(self.data_dir, url, what)

    # ------------------------------------------------------------------ ProgramSource
    def prepare(self, job_dir: str) -> Program:
        """Lay out ``<job_dir>/home/ma-user`` (code, inputs copied in, outputs, the checkpoints
        output restored from OBS) and return the program with its arguments and environment."""
        for path in (MA_HOME, MA_MOUNT_PATH, MA_JOB_DIR, MA_LOG_DIR):
            os.makedirs(mapped(job_dir, path), exist_ok=True)
        code = self._lay_out_code(job_dir)
        local = self._lay_out_channels(job_dir)
        channels = [*self.inputs, *self.outputs]
        args = [f"--{c.name}={local[c.name]}" for c in channels if c.access_method == "parameter"]
        args += [f"--{name}={value}" for name, value in self.parameters]
        if self.boot_file and code is not None:
            argv = [self.python, os.path.join(code, self.boot_file), *args]
        else:
            assert self.image_command is not None
            argv = [*shlex.split(self.image_command), *args]
        env = self._environment(job_dir)
        env.update({c.name: local[c.name] for c in channels if c.access_method == "env"})
        env.update(self.environments)
        if "PYTHONPATH" in self.environments:  # the preset images' PYTHONPATH=${MA_JOB_DIR}:${PYTHONPATH}
            env["PYTHONPATH"] = f"{mapped(job_dir, MA_JOB_DIR)}:{self.environments['PYTHONPATH']}"
        checkpoint_dir = local.get(self.checkpoint_output) if self.checkpoint_output else None
        model = next((c.name for c in self.outputs if c.name in ("model", "model_url")), None)
        cwd = mapped(job_dir, self.working_dir) if self.working_dir else code or mapped(job_dir, MA_JOB_DIR)
        os.makedirs(cwd, exist_ok=True)
        return Program(
            argv=argv,
            cwd=cwd,
            env=env,
            log_file=os.path.join(job_dir, "logs", f"{TASK_ID}.jsonl"),
            checkpoint_dir=checkpoint_dir,
            model_dir=local.get(model) if model else None,
            output_dir=mapped(job_dir, OUTPUTS_DIR),
            on_checkpoints=functools.partial(self._sync_checkpoints, checkpoint_dir),
            on_exit=functools.partial(self._copy_outputs, local),
        )

    def _lay_out_code(self, job_dir: str) -> str | None:
        """``code_dir`` copied to ``${MA_JOB_DIR}/<its last dir>`` (or under ``local_code_dir``);
        the local code directory, ``None`` without code. :raises FileNotFoundError: no such code."""
        if not self.code_dir:
            return None
        parent = mapped(job_dir, self.local_code_dir or MA_JOB_DIR)
        code = os.path.join(parent, posixpath.basename(self.code_dir.rstrip("/")) or "code")
        source = self._obs(self.code_dir, "algorithm.code_dir")
        if not os.path.isdir(source):
            raise FileNotFoundError(f"code_dir {self.code_dir!r} is not an OBS directory here")
        program_files.copy_in(source, code)
        if self.boot_file and not os.path.isfile(os.path.join(code, self.boot_file)):
            raise FileNotFoundError(f"boot_file {self.boot_file!r} is not in code_dir {self.code_dir!r}")
        return code

    def _lay_out_channels(self, job_dir: str) -> dict[str, str]:
        """Each channel's local directory (by name): inputs copied in from OBS, outputs created
        empty but for the checkpoints output, restored from OBS (how a retry resumes)."""
        local = {}
        for channel in self.inputs:
            local[channel.name] = mapped(job_dir, channel.local_dir)
            program_files.copy_in(self._obs(channel.obs_url, "algorithm.inputs.obs_url"), local[channel.name])
        for channel in self.outputs:
            local[channel.name] = mapped(job_dir, channel.local_dir)
            os.makedirs(local[channel.name], exist_ok=True)
            if channel.name == self.checkpoint_output:
                remote = self._obs(channel.obs_url, "algorithm.outputs.obs_url")
                program_files.copy_in(remote, local[channel.name])
        return local

    def _environment(self, job_dir: str) -> dict[str, str]:
        """The documented variables of a training container, with local paths."""
        return {
            "HOME": mapped(job_dir, MA_HOME),  # custom images run as ma-user, whose home this is
            "MA_HOME": mapped(job_dir, MA_HOME),
            "MA_JOB_DIR": mapped(job_dir, MA_JOB_DIR),
            "MA_MOUNT_PATH": mapped(job_dir, MA_MOUNT_PATH),
            "MA_LOG_DIR": mapped(job_dir, MA_LOG_DIR),
            "MA_NUM_GPUS": str(programs.cuda_device_count()),
            "MA_NUM_HOSTS": "1",
            "MA_TASK_NAME": TASK_NAME,
            "MA_CURRENT_IP": LOCAL_IP,
            "VC_TASK_INDEX": "0",
            "VC_WORKER_NUM": "1",
            "VC_WORKER_HOSTS": LOCAL_IP,
            "PYTHONPATH": mapped(job_dir, MA_JOB_DIR),
        }

    def _sync_checkpoints(self, local_dir: str | None, paths: list[str]) -> None:
        """New or changed files of the checkpoints output → its ``obs_url``, as they appear."""
        channel = next((c for c in self.outputs if c.name == self.checkpoint_output), None)
        if channel is not None and local_dir is not None:
            remote = self._obs(channel.obs_url, "algorithm.outputs.obs_url")
            program_files.copy_files_out(local_dir, paths, remote)

    def _copy_outputs(self, local: dict[str, str], _exit: ProgramExit) -> None:
        """After the program, whatever its outcome: every output's directory → its ``obs_url``."""
        for channel in self.outputs:
            program_files.copy_tree_out(
                local[channel.name], self._obs(channel.obs_url, "algorithm.outputs.obs_url")
            )


# ---------------------------------------------------------------------------------- the create body
def _container_path(value: Any, field_name: str) -> str:
    """An absolute container path without ``..``, normalized (``/home/ma-user/x/``→``/home/ma-user/x``)."""
    if not isinstance(value, str) or not value.startswith("/") or ".." in value.split("/"):
        raise bad(field_name, f"'{value}' must be an absolute path without '..'")
    return posixpath.normpath(value)


def _obs_key(url: str) -> str:
    """``obs://bucket/key`` or ``/bucket/key`` → ``/bucket/key`` (no trailing ``/``)."""
    return "/" + url.removeprefix("obs://").strip("/")


def _boot_file(code_dir: str, boot_file: Any) -> str:
    """``boot_file`` relative to ``code_dir``: an OBS path inside it (``/bucket/code/train.py``), the
    same file under ``${MA_JOB_DIR}/<code dir>``, or a relative path; a ``.py`` file."""
    if not isinstance(boot_file, str) or not boot_file:
        raise bad("algorithm.boot_file", "is required with code_dir")
    relative = boot_file
    if boot_file.startswith(("obs://", "/")):
        key, last = _obs_key(boot_file), posixpath.basename(code_dir.rstrip("/"))
        prefix = next(
            (p for p in (_obs_key(code_dir) + "/", f"{MA_JOB_DIR}/{last}/") if key.startswith(p)), None
        )
        if prefix is None:
            raise bad("algorithm.boot_file", f"'{boot_file}' must be in code_dir '{code_dir}'")
        relative = key[len(prefix) :]
    if ".." in relative.split("/") or not relative.endswith(".py"):
        raise bad(
            "algorithm.boot_file", f"'{boot_file}' must be a .py file in code_dir (started with Python)"
        )
    return relative


def _channels(algorithm: dict[str, Any], key: str, root: str) -> list[Channel]:
    out = []
    for i, raw in enumerate(algorithm.get(key) or []):
        where = f"algorithm.{key}[{i}]"
        name = raw.get("name")
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise bad(f"{where}.name", f"'{name}' must be letters, digits and '_', not starting with a digit")
        url = ((raw.get("remote") or {}).get("obs") or {}).get("obs_url")
        if not isinstance(url, str) or not url:
            raise bad(
                f"{where}.remote.obs.obs_url", "is required here (only OBS channels are served locally)"
            )
        obs_key = _obs_key(url)
        if obs_key == "/" or ".." in obs_key.split("/"):
            raise bad(f"{where}.remote.obs.obs_url", f"'{url}' is not an OBS directory")
        method = raw.get("access_method") or "parameter"
        if method not in ACCESS_METHODS:
            raise bad(f"{where}.access_method", f"'{method}' is not one of {', '.join(ACCESS_METHODS)}")
        local_dir = raw.get("local_dir") or f"{root}/{name}_0"
        out.append(Channel(name, url, _container_path(local_dir, f"{where}.local_dir"), method))
    return out


def _environments(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise bad("algorithm.environments", "must be a map of strings")
    if len(raw) > MAX_ENVIRONMENTS:
        raise bad("algorithm.environments", f"holds {len(raw)} variables (at most {MAX_ENVIRONMENTS})")
    for name in raw:
        if not ENV_NAME.match(name):
            raise bad(
                f"algorithm.environments.{name}", "must be letters, digits and '_', not starting with a digit"
            )
        if name.startswith(RESERVED_ENV_PREFIX):
            raise bad(
                f"algorithm.environments.{name}", f"{RESERVED_ENV_PREFIX}* variables are ModelArts' own"
            )
    return dict(raw)


def parse_user_code(body: dict[str, Any], data_dir: str, image_commands: dict[str, str]) -> UserCodeJob:
    """The :class:`UserCodeJob` of a create for which :func:`is_user_code` holds (already checked by
    :func:`.wire.parse_create`).

    :raises ApiError: ``ModelArts.0101`` naming a bad field.
    """
    algorithm = body["algorithm"]
    code_dir, boot_file = algorithm.get("code_dir") or None, None
    if code_dir is not None:
        if not isinstance(code_dir, str) or _obs_key(code_dir) == "/" or ".." in code_dir.split("/"):
            raise bad("algorithm.code_dir", f"'{code_dir}' must be an OBS directory (/bucket/path/)")
        obs_path(data_dir, code_dir, "algorithm.code_dir")
        if algorithm.get("boot_file"):
            boot_file = _boot_file(code_dir, algorithm["boot_file"])
    engine = algorithm.get("engine")
    image = engine.get("image_url") if isinstance(engine, dict) else None
    parameters = []
    for i, p in enumerate(algorithm.get("parameters") or []):
        if not (isinstance(p, dict) and isinstance(p.get("name"), str) and p["name"]):
            raise bad(f"algorithm.parameters[{i}]", "must be {name, value}")
        value = p.get("value")
        parameters.append((p["name"], "" if value is None else str(value)))
    inputs, outputs = _channels(algorithm, "inputs", INPUTS_DIR), _channels(algorithm, "outputs", OUTPUTS_DIR)
    names = [c.name for c in outputs]
    if len({c.name for c in inputs} | set(names)) < len(inputs) + len(outputs):
        raise bad("algorithm.outputs", "every input and output needs a name of its own")
    local_code_dir, working_dir = (
        _container_path(algorithm[key], f"algorithm.{key}") if algorithm.get(key) else None
        for key in ("local_code_dir", "working_dir")
    )
    if local_code_dir and (
        not local_code_dir.startswith("/home/") or (local_code_dir + "/").startswith(MA_MOUNT_PATH + "/")
    ):
        raise bad(
            "algorithm.local_code_dir", f"'{local_code_dir}' must be under /home, outside {MA_MOUNT_PATH}"
        )
    return UserCodeJob(
        data_dir=data_dir,
        code_dir=code_dir,
        boot_file=boot_file,
        image_command=None if boot_file else image_commands.get(str(image)),
        parameters=parameters,
        inputs=inputs,
        outputs=outputs,
        checkpoint_output=next((n for n in CHECKPOINT_CHANNELS if n in names), None),
        environments=_environments(algorithm.get("environments")),
        local_code_dir=local_code_dir,
        working_dir=working_dir,
    )
