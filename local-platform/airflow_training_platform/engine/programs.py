"""User programs: a job that runs the user's own command instead of the built-in trainer.

A platform module translates its wire contract (SageMaker script mode, ...) into a
:class:`ProgramSource`; the engine calls its :meth:`~ProgramSource.prepare` when the job starts and
runs the :class:`Program` it returns with :class:`ProgramProcess`. Everything here is
platform-neutral:

* **Own directory, own process group, clean environment.** The program runs in ``Program.cwd``
  in a new session (``start_new_session=True``: its own process group), with an environment built
  only from :func:`base_environment` (``PATH``, ``HOME``, ``TMPDIR``, ``LANG``, ``PYTHONUNBUFFERED``
  ...) and ``Program.env`` (the platform's contract plus the job's own environment): none of the
  server's environment, settings or keys. It still runs as the server's OS user: this is a clean
  environment, not a sandbox.
* **Output.** stdout and stderr go through one pipe, read line by line; each line is appended to
  ``Program.log_file`` as one JSON object ``{"t": <epoch seconds>, "line": <text>}`` (in the order
  the program wrote them) and handed to the engine. :func:`read_log` reads the file back.
* **Metrics.** Each line is matched against ``Program.metric_definitions`` (``re.search``); the
  value is the regex's **first capture group** (the whole match if it has none), read as a float;
  a match that is not a number is ignored. The engine keeps the last value per name and one
  history row per line that matched.
* **Stop contract.** A stop sends SIGTERM to the whole process group, SIGKILL to the group after
  the platform's grace; whatever is left of the group when the program exits is SIGKILLed too (a
  container ends with its main process).
* **Checkpoints** are whatever the program writes under ``Program.checkpoint_dir``:
  :class:`CheckpointWatch` lists the directory every :data:`SCAN_SECONDS` and at the exit; a file
  new or changed after the stop signal is a *final* checkpoint.

Times are ``time.time()`` floats (unix seconds, UTC); durations are seconds.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from airflow_training_platform.engine._proc import pdeathsig_preexec

SCAN_SECONDS = 0.5
"""How often a running program's checkpoint directory is listed (seconds)."""

FAILURE_REASON_CHARS = 1024
"""A failure reason is cut to this many characters (SageMaker's ``FailureReason`` limit)."""

TAIL_LINES = 5
"""Output lines kept for a failure reason when the program wrote no failure file."""


@dataclass(frozen=True)
class MetricDefinition:
    """One metric to read from the program's output: ``name`` and a Python ``regex`` whose first
    capture group is the value (SageMaker ``AlgorithmSpecification.MetricDefinitions[{Name, Regex}]``)."""

    name: str
    regex: str


@dataclass(frozen=True)
class ProgramExit:
    """How a program ended, for :attr:`Program.on_exit`.

    returncode: the process's exit status (negative: killed by that signal).
    stopped: a stop signal was sent before it exited.
    """

    returncode: int
    stopped: bool


@dataclass
class Program:
    """What to run, ready to start (every path absolute).

    argv: the command; ``argv[0]`` is looked up on ``env["PATH"]`` when it has no slash.
    cwd: the working directory.
    env: the platform's contract variables plus the job's own environment; added to
        :func:`base_environment`, never to the server's environment.
    log_file: where the output lines go (JSON lines, see the module doc).
    checkpoint_dir: the directory whose files are the job's checkpoints (``None``: none).
    model_dir, output_dir: where the program writes its model / other output (shown in the record).
    failure_file: a file the program may write before failing; its first
        :data:`FAILURE_REASON_CHARS` characters are the failure reason.
    metric_definitions: see :class:`MetricDefinition`.
    on_checkpoints: ``on_checkpoints(paths)`` with the checkpoint files new or changed since the
        last listing (e.g. copy them to object storage); called from the runner thread, no lock held.
    on_exit: ``on_exit(ProgramExit)`` after the process group is gone and before the job's outcome is
        recorded (e.g. pack the model); an exception fails the job with its message.
    """

    argv: list[str]
    cwd: str
    env: dict[str, str]
    log_file: str
    checkpoint_dir: str | None = None
    model_dir: str | None = None
    output_dir: str | None = None
    failure_file: str | None = None
    metric_definitions: list[MetricDefinition] = field(default_factory=list)
    on_checkpoints: Callable[[list[str]], None] | None = None
    on_exit: Callable[[ProgramExit], None] | None = None

    def describe(self) -> dict[str, Any]:
        """What the job record shows: paths, argv, the *names* of the environment variables (their
        values may be secrets)."""
        return {
            "argv": list(self.argv),
            "cwd": self.cwd,
            "env_names": sorted(self.env),
            "log_file": self.log_file,
            "checkpoint_dir": self.checkpoint_dir,
            "model_dir": self.model_dir,
            "output_dir": self.output_dir,
            "failure_file": self.failure_file,
            "metric_definitions": [{"Name": m.name, "Regex": m.regex} for m in self.metric_definitions],
        }


class ProgramSource(Protocol):
    """A job's user program as its platform describes it (``JobSpec.program``)."""

    def prepare(self, job_dir: str) -> Program:
        """Lay out the job's directory under ``job_dir`` (code, input data, configuration, restored
        checkpoints) and return the program to run. Called once, when the job starts, from the job's
        runner thread (no engine lock held). An exception fails the job with its message."""
        ...


def parse_image_commands(entries: list[str] | None, setting: str) -> dict[str, str]:
    """``["IMAGE=COMMAND", ...]`` (a platform's ``--<platform>-image-command`` setting, named by
    ``setting`` in the error) → ``{image: command}``: a container image run as a local command.

    :raises ValueError: an entry without ``=``, an image or a command.
    """
    out: dict[str, str] = {}
    for entry in entries or []:
        image, sep, command = entry.partition("=")
        if not sep or not image.strip() or not command.strip():
            raise ValueError(f"{setting} wants IMAGE=COMMAND, got {entry!r}")
        out[image.strip()] = command.strip()
    return out


@functools.cache
def cuda_device_count() -> int:
    """The machine's CUDA devices as the platforms' contracts report them (``SM_NUM_GPUS``,
    ``MA_NUM_GPUS``): the ``GPU `` lines of ``nvidia-smi --list-gpus``, 0 when it is missing or
    fails (as SageMaker's training toolkit counts them)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(
            ["nvidia-smi", "--list-gpus"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def base_environment(job_dir: str) -> dict[str, str]:
    """The minimal environment every program gets, whatever the server's: ``PATH`` (the server's
    interpreter's directory first, so ``python`` is that interpreter, then the system's), ``HOME``
    and ``TMPDIR`` inside the job directory, a UTF-8 locale, unbuffered Python output."""
    home, tmp = os.path.join(job_dir, "home"), os.path.join(job_dir, "tmp")
    os.makedirs(home, exist_ok=True)
    os.makedirs(tmp, exist_ok=True)
    return {
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": home,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


class MetricParser:
    """The metric values on one output line (see the module doc for the rule)."""

    def __init__(self, definitions: list[MetricDefinition]):
        self._patterns = [(d.name, re.compile(d.regex)) for d in definitions]

    def parse(self, line: str) -> dict[str, float]:
        values: dict[str, float] = {}
        for name, pattern in self._patterns:
            match = pattern.search(line)
            if match is None:
                continue
            text = match.group(1) if pattern.groups else match.group(0)
            try:
                values[name] = float(text)
            except (TypeError, ValueError):
                continue
        return values


class CheckpointWatch:
    """The files under a checkpoint directory and what changed since the last look.

    A file is identified by its path relative to the directory, its version by (size, mtime ns).
    """

    def __init__(self, directory: str | None):
        self.directory = directory
        self._seen: dict[str, tuple[int, int]] = {}
        self._at_stop: dict[str, tuple[int, int]] | None = None

    def _listing(self) -> dict[str, tuple[int, int]]:
        found: dict[str, tuple[int, int]] = {}
        if not self.directory or not os.path.isdir(self.directory):
            return found
        for root, _dirs, files in os.walk(self.directory):
            for name in files:
                path = os.path.join(root, name)
                try:
                    st = os.stat(path)
                except OSError:  # written and removed between walk and stat
                    continue
                found[os.path.relpath(path, self.directory)] = (st.st_size, st.st_mtime_ns)
        return found

    def baseline(self) -> None:
        """Remember what is there now (restored checkpoints are not this job's new ones)."""
        self._seen = self._listing()

    def changed(self) -> list[str]:
        """Relative paths new or changed since the last call (or :meth:`baseline`), sorted."""
        now = self._listing()
        new = sorted(rel for rel, version in now.items() if self._seen.get(rel) != version)
        self._seen = now
        return new

    def mark_stop(self) -> None:
        """The stop signal is being sent: files new or changed after this are final checkpoints."""
        if self._at_stop is None:
            self._at_stop = self._listing()

    def is_final(self, rel: str) -> bool:
        """``rel`` is new or changed since :meth:`mark_stop` (False if no stop was marked)."""
        if self._at_stop is None or self.directory is None:
            return False
        try:
            st = os.stat(os.path.join(self.directory, rel))
        except OSError:
            return False
        return self._at_stop.get(rel) != (st.st_size, st.st_mtime_ns)


class ProgramProcess:
    """One running program: its process group, its output reader, its stop.

    Start it from a thread that lives as long as the program (``PR_SET_PDEATHSIG`` follows the
    thread that forked): the engine's runner thread for the job, which then calls :meth:`supervise`.
    """

    def __init__(self, program: Program, job_dir: str):
        self.program = program
        self.checkpoints = CheckpointWatch(program.checkpoint_dir)
        self.checkpoints.baseline()
        self.stop_signal_at: float | None = None
        self.killed_after_grace = False
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._metrics = MetricParser(program.metric_definitions)
        env = {**base_environment(job_dir), **program.env}
        os.makedirs(os.path.dirname(program.log_file), exist_ok=True)
        self._log = open(program.log_file, "a", encoding="utf-8")  # noqa: SIM115 - closed by supervise
        try:
            self.proc = subprocess.Popen(
                program.argv,
                cwd=program.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a stop reaches its children too
                preexec_fn=pdeathsig_preexec(),
            )
        except BaseException:
            self._log.close()
            raise
        self.pid = self.proc.pid

    def signal(self, sig: signal.Signals) -> bool:
        """Send ``sig`` to the program's whole process group while its leader lives; whether it was
        sent. The first SIGTERM/SIGKILL marks the stop for :class:`CheckpointWatch`."""
        if self.proc.returncode is not None:
            return False
        if self.stop_signal_at is None:
            self.checkpoints.mark_stop()
            self.stop_signal_at = time.time()
        try:
            os.killpg(self.pid, sig)
        except OSError:
            return False
        return True

    def supervise(
        self,
        on_line: Callable[[float, str, dict[str, float]], None],
        on_checkpoints: Callable[[list[str]], None],
    ) -> int:
        """Read the output into the log file (``on_line(t, line, metric_values)`` per line) and list
        the checkpoint directory (``on_checkpoints(relative_paths)`` per change) until the program
        exits; then SIGKILL what is left of its group and do the last listing. Returns the exit status."""
        reader = threading.Thread(target=self._read, args=(on_line,), name=f"out-{self.pid}", daemon=True)
        reader.start()
        while True:
            try:
                returncode = self.proc.wait(SCAN_SECONDS)
                break
            except subprocess.TimeoutExpired:
                if changed := self.checkpoints.changed():
                    on_checkpoints(changed)
        try:  # the leader is gone: nothing of the program outlives it (and the pipe reaches EOF)
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        reader.join(10.0)
        self._log.close()
        if changed := self.checkpoints.changed():
            on_checkpoints(changed)
        return returncode

    def _read(self, on_line: Callable[[float, str, dict[str, float]], None]) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            at = time.time()
            self._log.write(json.dumps({"t": at, "line": line}) + "\n")
            self._log.flush()
            if line.strip():
                self.tail.append(line)
            on_line(at, line, self._metrics.parse(line))

    def failure_reason(self, returncode: int) -> str:
        """Why the program failed: the first :data:`FAILURE_REASON_CHARS` characters of its failure
        file if it wrote one, else its exit status and its last output lines."""
        if self.program.failure_file:
            try:
                with open(self.program.failure_file, encoding="utf-8", errors="replace") as fh:
                    text = fh.read(FAILURE_REASON_CHARS).strip()
                if text:
                    return text
            except OSError:
                pass
        how = (
            f"killed by {signal.Signals(-returncode).name}"
            if returncode < 0
            else f"exited with code {returncode}"
        )
        tail = " | ".join(self.tail)
        return (f"program {how}" + (f"; last output: {tail}" if tail else ""))[:FAILURE_REASON_CHARS]


def read_log(path: str, start: int = 0, limit: int = 1000) -> dict[str, Any]:
    """Lines ``start`` .. ``start + limit - 1`` (0-based) of a program's log file.

    :param path: the job's ``Program.log_file``.
    :param start: index of the first line wanted.
    :param limit: most lines returned.
    :returns: ``{"lines": [{"t": epoch seconds, "line": text}, ...], "next": the index after the
        last line returned}`` (``next == start`` when there is nothing new). A missing file is empty.
    """
    lines: list[dict[str, Any]] = []
    for index, entry in enumerate(_entries(path)):
        if index < start:
            continue
        if len(lines) >= limit:
            break
        lines.append(entry)
    return {"lines": lines, "next": start + len(lines)}


def _entries(path: str) -> Iterator[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as fh:
            for raw in fh:
                if raw.endswith("\n"):  # a line being written is read next time
                    yield json.loads(raw)
    except FileNotFoundError:
        return
