"""Stop-readiness check: does a training program save its work when the platform stops it?

A cancel from Airflow reaches the job as the platform's stop: SIGTERM to the program, then SIGKILL
after a grace period (SageMaker's ``StopTrainingJob``: 120 s). Whatever the program has not saved
by then is lost, and a retry with ``resume_from_checkpoint=True`` starts from the last checkpoint it
did write. This runs a spec's program once, the way the local platform would (the same contract,
directories and environment, :mod:`.engine.programs`), stops it once it is training, and reports:

* seconds from the stop signal to the exit, and whether it was killed after the grace;
* the checkpoint files new or changed after the stop signal (a *final* checkpoint);
* the exit status and the last lines of output.

The program is **ready** when it wrote a checkpoint after the stop signal, exited within the grace,
and exited cleanly (status 0, or the SIGTERM it was sent: ``-15``/``143``). Anything else is named.
A program that ends before the stop signal was not checked at all: that is said as such (it
finished: give it more to do; it failed: its output says why), not as "not ready".

``airflow-training-platform check-stop SPEC.json --platform sagemaker|pai|modelarts [--data-dir DIR]
[--after-seconds N | --after-checkpoint] [--grace-seconds S]``; the grace defaults to the local
platform's for that platform (SageMaker 120 s, PAI and ModelArts 30 s). Exit status 0 when ready,
1 when not, 2 for a spec that cannot be run (no program, templates not rendered, code not
uploaded), 3 when the program ended before it could be stopped.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_training_platform.engine.programs import ProgramProcess, ProgramSource, read_log
from airflow_training_platform.errors import ApiError

#: exit statuses of a program that stopped as asked: it returned, or SIGTERM's default action ended it
CLEAN_EXITS = frozenset({0, -signal.SIGTERM, 128 + signal.SIGTERM})


@dataclass
class StopCheck:
    """What one stop of a program showed (times in seconds).

    :ivar ran_seconds: from the start to the stop signal (``None``: it exited before being stopped).
    :ivar exit_seconds: from the stop signal to the exit of its process group's leader.
    :ivar killed_after_grace: it was still running after the grace and got SIGKILL.
    :ivar returncode: its exit status (negative: the signal that ended it).
    :ivar final_checkpoints: checkpoint files (relative to its checkpoint directory) new or changed
        after the stop signal.
    :ivar tail: its last lines of output.
    :ivar problems: why it is not ready; empty when it is.
    """

    ran_seconds: float | None = None
    exit_seconds: float | None = None
    killed_after_grace: bool = False
    returncode: int | None = None
    final_checkpoints: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return not self.problems

    @property
    def checked(self) -> bool:
        """The program was stopped (it had not ended before the stop signal)."""
        return self.ran_seconds is not None

    def report(self) -> str:
        """A few lines for a terminal."""
        if not self.checked:
            lines = ["NOT CHECKED: the program ended before it could be stopped"]
        else:
            lines = ["READY: the program saves its work when stopped" if self.ready else "NOT READY"]
        lines += [f"  - {p}" for p in self.problems]
        if self.ran_seconds is not None:
            lines.append(f"stopped after {self.ran_seconds:.1f} s of running")
        if self.exit_seconds is not None:
            killed = " (killed after the grace)" if self.killed_after_grace else ""
            lines.append(f"exited {self.exit_seconds:.1f} s after SIGTERM{killed}, status {self.returncode}")
        lines.append(f"checkpoints written after the stop: {', '.join(self.final_checkpoints) or 'none'}")
        lines += ["last output:", *[f"  | {line}" for line in self.tail]]
        return "\n".join(lines)


def check_stop(
    source: ProgramSource,
    job_dir: str,
    *,
    after_seconds: float | None = None,
    after_checkpoint: bool = False,
    grace_seconds: float = 120.0,
    start_timeout: float = 300.0,
) -> StopCheck:
    """Run ``source``'s program in ``job_dir``, send SIGTERM to its process group once it is
    training (``after_seconds`` after the start, or at its first checkpoint with
    ``after_checkpoint``; at most ``start_timeout`` s), SIGKILL after ``grace_seconds``, and judge.

    Call it from a thread that outlives the program (the main thread of the CLI).
    """
    if (after_seconds is None) == (not after_checkpoint):
        raise ValueError("give after_seconds or after_checkpoint (one of them)")
    program = source.prepare(job_dir)
    result = StopCheck()
    if program.checkpoint_dir is None:
        result.problems.append("the spec gives the program no checkpoint directory")
    process = ProgramProcess(program, job_dir)
    started = time.monotonic()
    first_checkpoint = threading.Event()
    final: set[str] = set()

    def on_checkpoints(paths: list[str]) -> None:
        first_checkpoint.set()
        final.update(p for p in paths if process.checkpoints.is_final(p))

    exited = threading.Event()
    supervisor = threading.Thread(
        target=_supervise, args=(process, on_checkpoints, exited, result), name="stop-check", daemon=True
    )
    supervisor.start()
    if after_checkpoint:
        _wait_any((first_checkpoint, exited), start_timeout)
    else:
        exited.wait(after_seconds)
    if exited.is_set():
        if result.returncode == 0:
            result.problems.append(
                "it finished its work (status 0) before the stop: give it more to do (more epochs) "
                "or stop it sooner (--after-seconds)"
            )
        else:
            result.problems.append(
                f"it failed (status {result.returncode}) before the stop: see its last output"
            )
    else:
        result.ran_seconds = time.monotonic() - started
        stop_at = time.monotonic()
        process.signal(signal.SIGTERM)
        if not exited.wait(grace_seconds):
            result.killed_after_grace = True
            process.signal(signal.SIGKILL)
            exited.wait(30)
        result.exit_seconds = time.monotonic() - stop_at
        if result.killed_after_grace:
            result.problems.append(
                f"it was still running {grace_seconds:.0f} s after SIGTERM and was killed: "
                "handle SIGTERM (save, then exit)"
            )
        if not final:
            result.problems.append(
                "it wrote no checkpoint after SIGTERM: its work since the last one is lost"
            )
        if (
            result.returncode is not None
            and result.returncode not in CLEAN_EXITS
            and not result.killed_after_grace
        ):
            result.problems.append(
                f"it failed on SIGTERM (exit status {result.returncode}): see its last output"
            )
    supervisor.join(30)
    result.final_checkpoints = sorted(final)
    result.tail = [entry["line"] for entry in read_log(program.log_file, 0, 10**9)["lines"][-10:]]
    return result


def _supervise(
    process: ProgramProcess,
    on_checkpoints: Callable[[list[str]], None],
    exited: threading.Event,
    result: StopCheck,
) -> None:
    try:
        result.returncode = process.supervise(lambda *_: None, on_checkpoints)
    finally:
        exited.set()


def _wait_any(events: tuple[threading.Event, ...], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not any(e.is_set() for e in events) and time.monotonic() < deadline:
        time.sleep(0.1)


# -- the platforms whose specs name a program --------------------------------------------------------
def sagemaker_program(spec: dict[str, Any], data_dir: str) -> ProgramSource:
    """A ``CreateTrainingJob`` body's program (script mode, or a mapped image is not known here).

    :raises ValueError: the body names no program (no ``sagemaker_program`` hyperparameter).
    """
    from airflow_training_platform.platforms.sagemaker.script_mode import is_user_code, parse_user_code

    body = {
        "TrainingJobName": "stop-check",
        "OutputDataConfig": {"S3OutputPath": "s3://stop-check/output"},
        **spec,
    }
    if not is_user_code(body, {}):
        raise ValueError("the spec names no program: HyperParameters.sagemaker_program is missing")
    return parse_user_code(body, data_dir, "us-east-1", {})


def pai_program(spec: dict[str, Any], data_dir: str) -> ProgramSource:
    """A PAI ``CreateTrainingJob`` body's program (``CodeDir`` + ``AlgorithmSpec.Command``).

    :raises ValueError: the body names no program (no ``CodeDir``).
    """
    from airflow_training_platform.platforms.pai.user_code import is_user_code, parse_user_code

    body = {"TrainingJobName": "stop-check", **spec}
    body["HyperParameters"] = _pairs(body.get("HyperParameters"), "Name", "Value")
    if not is_user_code(body, {}):
        raise ValueError("the spec names no program: CodeDir is missing")
    return parse_user_code(body, data_dir, {})


def modelarts_program(spec: dict[str, Any], data_dir: str) -> ProgramSource:
    """A ModelArts training job body's program (``algorithm.code_dir`` + ``boot_file``).

    :raises ValueError: the body names no program.
    """
    from airflow_training_platform.platforms.modelarts.user_code import is_user_code, parse_user_code

    body = {"kind": "job", "metadata": {"name": "stop-check"}, **spec}
    if isinstance(body.get("algorithm"), dict):
        algorithm = body["algorithm"] = dict(body["algorithm"])
        algorithm["parameters"] = _pairs(algorithm.get("parameters"), "name", "value")
    if not is_user_code(body, {}):
        raise ValueError("the spec names no program: algorithm.code_dir and boot_file are missing")
    return parse_user_code(body, data_dir, {})


def _pairs(value: Any, name_key: str, value_key: str) -> Any:
    """Hyperparameters as the platform's request carries them, ``[{name_key: …, value_key: "…"}]``,
    also from the mapping a DAG's spec may use (``{"epochs": 3}``; the provider turns it into pairs
    before it submits), so a spec copied from a DAG checks as it would run. Anything else is left
    for the platform's own validation."""
    if isinstance(value, dict):
        return [{name_key: name, value_key: str(v)} for name, v in value.items()]
    return value


PROGRAM_SOURCES: dict[str, Callable[[dict[str, Any], str], ProgramSource]] = {
    "sagemaker": sagemaker_program,
    "pai": pai_program,
    "modelarts": modelarts_program,
}
"""Platform → how its spec names a program (``spec, data_dir → ProgramSource``)."""


def default_grace_seconds(platform: str) -> float:
    """The stop grace (seconds) the local platform gives ``platform``'s jobs by default: its
    ``--<platform>-stop-grace-seconds`` setting (SageMaker 120, PAI 30, ModelArts 30)."""
    from airflow_training_platform.settings import PlatformSettings

    return float(PlatformSettings.model_fields[f"{platform}_stop_grace_seconds"].default)


def run_check(args: Any) -> int:
    """The ``check-stop`` subcommand (see the module doc); returns the exit status."""
    with open(args.spec, encoding="utf-8") as fh:
        text = fh.read()
    if "{{" in text or "{%" in text:
        print(
            f"{args.spec}: the spec still holds Jinja templates ({{{{ … }}}}): give check-stop the spec as "
            "the task sends it, rendered (the task's Rendered Template view, or `airflow tasks render`)"
        )
        return 2
    spec = json.loads(text)
    data_dir = os.path.abspath(args.data_dir)
    try:
        source = PROGRAM_SOURCES[args.platform](spec, data_dir)
    except (ValueError, ApiError) as exc:  # no program, or a field the platform would refuse
        print(f"{args.spec}: {exc}")
        return 2
    grace = args.grace_seconds if args.grace_seconds is not None else default_grace_seconds(args.platform)
    job_dir = os.path.join(data_dir, "stop-checks", time.strftime("%Y%m%dT%H%M%S"))
    os.makedirs(job_dir, exist_ok=True)
    try:
        result = check_stop(
            source,
            job_dir,
            after_seconds=None if args.after_checkpoint else args.after_seconds,
            after_checkpoint=args.after_checkpoint,
            grace_seconds=grace,
        )
    except FileNotFoundError as exc:  # the code or data the spec names is not under data_dir
        print(
            f"{args.spec}: {exc}\n(upload the code and data first — or run the DAG once — to the local "
            f"platform whose --data-dir is {data_dir}, and give check-stop that --data-dir)"
        )
        return 2
    print(result.report())
    print(f"(the program ran in {job_dir})")
    if not result.checked:
        return 3
    return 0 if result.ready else 1
