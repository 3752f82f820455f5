"""``stream_logs=True`` in this process against a local platform that runs the user's own program
(SageMaker script mode, PAI ``Command`` + ``CodeDir``, ModelArts ``code_dir`` + ``boot_file``): every line the program printed lands in the task log once and in order,
deferred and on the worker, the last ones (a traceback) too; a trigger stopped mid-stream and
started again from its kwargs and the saved XCom cursor (a triggerer restart) writes no line twice
and loses none; a secret the program prints shows as ``***`` in what the trigger writes."""

from __future__ import annotations

import asyncio
import json
import re
import tarfile
import time
import uuid
from pathlib import Path

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_training_devel.local_fixtures import LOCAL_FIXTURES
from airflow_training_devel.user_code import script_hyperparameters
from airflow_training_platform.server import LocalPlatformServer
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.program_logs import MAX_LINE_CHARS
from airflow_training_provider.sensors.training_job import TrainingJobSensor
from airflow_training_provider.spec_secrets import connection_secret
from airflow_training_provider.task_instance_lookup import log_cursor_key
from airflow_training_provider.testing.inprocess import InMemoryAirflow, first_event, run_task, task_context
from airflow_training_provider.triggers.training_job import TrainingJobTrigger

# Each run streams a job to its end (and waits the end-of-job settle): `make test` runs them,
# the fast tier keeps the unit tests of the same code (tests/unit/test_program_log*.py).
pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).parents[1] / "data" / "user_code" / "print_lines.py"
CODE_URI = "s3://code/logs/sourcedir.tar.gz"
CONN_ID = "aws_program_logs"
SECRET_CONN = "ip_logs_secret"
PASSWORD = "pw-" + uuid.uuid4().hex
LINES = 40


@pytest.fixture(scope="module")
def user_code_platform(tmp_path_factory):
    with LocalPlatformServer(
        str(tmp_path_factory.mktemp("program-logs")), log_level="warning", allow_user_code=True
    ) as server:
        code = Path(server.data_dir) / "s3" / "code" / "logs"
        code.mkdir(parents=True, exist_ok=True)
        with tarfile.open(code / "sourcedir.tar.gz", "w:gz") as tar:
            tar.add(PROGRAM, arcname="print_lines.py")
        for store, where in (
            ("oss", "code/logs-pai"),
            ("obs", "code/logs-ma"),
        ):  # PAI CodeDir, ModelArts code_dir
            (Path(server.data_dir) / store / where).mkdir(parents=True, exist_ok=True)
            (Path(server.data_dir) / store / where / PROGRAM.name).write_bytes(PROGRAM.read_bytes())
        yield server


@pytest.fixture(autouse=True)
def connections(user_code_platform, monkeypatch):
    for conn_type, conn_id in (
        ("aws", CONN_ID),
        ("pai", "pai_program_logs"),
        ("modelarts", "ma_program_logs"),
    ):
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{conn_id.upper()}",
            LOCAL_FIXTURES[conn_type].connection_json(user_code_platform.url),
        )
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{SECRET_CONN.upper()}", json.dumps({"conn_type": "generic", "password": PASSWORD})
    )


def expected(fail: bool = False) -> list[str]:
    """What the program prints, as the task log shows it (the long line cut, the secret masked)."""
    long = f"{'x' * MAX_LINE_CHARS}… [{3000 - MAX_LINE_CHARS} more characters]"
    lines = [f"line {i:03d} of {LINES}" for i in range(LINES)] + [long, "connecting with password ***"]
    return lines + (
        ["Traceback (most recent call last):", "RuntimeError: the last words"] if fail else ["done"]
    )


def operator(
    *, deferrable: bool, fail: bool = False, burst: float = 0.1, literal: bool = False
) -> SubmitTrainingJobOperator:
    """The SageMaker script-mode job; ``literal``: the secret written in the spec, not referenced."""
    hyperparameters = {**script_hyperparameters(), "sagemaker_program": json.dumps("print_lines.py")}
    hyperparameters["sagemaker_submit_directory"] = json.dumps(CODE_URI)
    spec = {
        "RoleArn": "arn:aws:iam::123456789012:role/InProcess",
        "AlgorithmSpecification": {
            "TrainingImage": "local/sklearn-script-mode:1",
            "TrainingInputMode": "File",
        },
        "OutputDataConfig": {"S3OutputPath": "s3://ip/output"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "HyperParameters": hyperparameters,
        "Environment": {**environment(fail, burst), **({"DB_PASSWORD": PASSWORD} if literal else {})},
    }
    return SubmitTrainingJobOperator(
        task_id="train",
        conn_id=CONN_ID,
        spec=spec,
        deferrable=deferrable,
        poll_interval=0.3,
        stream_logs=True,
    )


def environment(fail: bool, burst: float = 0.1) -> dict:
    """The program's settings: ``burst`` seconds between bursts of ten lines."""
    return {
        "LINES": str(LINES),
        "BURST_SECONDS": str(burst),
        "FAIL": "1" if fail else "0",
        "DB_PASSWORD": connection_secret(SECRET_CONN),
    }


def other_platform(conn_type: str, fail: bool) -> SubmitTrainingJobOperator:
    """The same program as a PAI ``Command`` + ``CodeDir`` job or a ModelArts ``code_dir`` +
    ``boot_file`` job."""
    if conn_type == "pai":
        conn_id = "pai_program_logs"
        spec = {
            "AlgorithmSpec": {
                "Image": "dsw-registry.cn-hangzhou.cr.aliyuncs.com/pai/pytorch-training:2.1-cpu-py310",
                "Command": ["sh", "-c", f"python {PROGRAM.name}"],
                "JobType": "PyTorchJob",
            },
            "CodeDir": {"LocationType": "oss", "LocationValue": {"Bucket": "code", "Key": "logs-pai/"}},
            "ComputeResource": {"EcsSpec": "ecs.c6.large", "EcsCount": 1},
            "Environments": environment(fail),
        }
    else:
        conn_id = "ma_program_logs"
        spec = {
            "kind": "job",
            "metadata": {"name": "print-lines"},
            "algorithm": {
                "code_dir": "/code/logs-ma/",
                "boot_file": f"/code/logs-ma/{PROGRAM.name}",
                "engine": {"engine_name": "PyTorch", "engine_version": "pytorch_2.1.0-cuda_12.1-py_3.10"},
                "environments": environment(fail),
            },
            "spec": {"resource": {"flavor_id": "modelarts.vm.cpu.2u", "node_count": 1}},
        }
    return SubmitTrainingJobOperator(
        task_id="train", conn_id=conn_id, spec=spec, deferrable=True, poll_interval=0.3, stream_logs=True
    )


def program_lines(text: str) -> list[str]:
    """The ``[program]`` lines of a captured task log, without the prefix and the log's decorations."""
    found = [
        re.split(r"\[program\] ", line, maxsplit=1)[1] for line in text.splitlines() if "[program] " in line
    ]
    return [re.sub(r"\s+\[[\w.]+\]( \S+=\S+)*$", "", line) for line in found]


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferred", "worker"])
def test_every_program_line_lands_in_the_task_log_once_in_order(deferrable, capfd, caplog):
    op = operator(deferrable=deferrable, fail=True)
    ctx = task_context(op, run_id=f"program-logs-{deferrable}-{uuid.uuid4().hex[:6]}")
    with InMemoryAirflow().installed(), pytest.raises(Exception, match="the last words|Failed|failed"):
        run_task(op, ctx)
    out, err = capfd.readouterr()
    logged = (
        out
        + err
        + "\n".join(f"[program] {r.getMessage()}" for r in caplog.records if "[program]" in r.getMessage())
    )
    lines = program_lines(out + err) or program_lines(logged)
    assert lines == expected(fail=True)
    assert PASSWORD not in out + err + caplog.text


@pytest.mark.parametrize("conn_type", ["pai", "modelarts"])
def test_pai_and_modelarts_jobs_stream_their_programs_lines_too(conn_type, capfd, caplog):
    op = other_platform(conn_type, fail=True)
    ctx = task_context(op, run_id=f"program-logs-{conn_type}-{uuid.uuid4().hex[:6]}")
    with InMemoryAirflow().installed(), pytest.raises(Exception, match="failed|Failed"):
        run_task(op, ctx)
    out, err = capfd.readouterr()
    assert program_lines(out + err) == expected(fail=True)
    assert PASSWORD not in out + err + caplog.text


class Recorder:
    """A task log that keeps what the trigger writes, formatted, before any masker of Airflow's."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def _add(self, msg, *args) -> None:
        self.lines.append(str(msg) % args if args else str(msg))

    def debug(self, msg, *args):
        self._add(msg, *args)

    info = warning = error = exception = debug

    def log(self, level, msg, *args):
        self._add(msg, *args)

    def program(self) -> list[str]:
        return [line.split("[program] ", 1)[1] for line in self.lines if line.startswith("[program] ")]


def test_a_restarted_trigger_writes_no_line_twice_and_loses_none_and_masks_secrets():
    op = operator(deferrable=True, burst=0.5)  # 2 s of output: the first trigger stops mid-stream
    ctx = task_context(op, run_id=f"program-logs-restart-{uuid.uuid4().hex[:6]}")
    with InMemoryAirflow().installed() as airflow:
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(ctx)
        kwargs = json.loads(json.dumps(deferred.value.trigger.serialize()[1]))
        kwargs.update(resume_settle=0.0, spread_polls=False)
        assert PASSWORD not in json.dumps(kwargs) and "log_cursor" not in kwargs
        ti = (ctx["ti"].dag_id, ctx["ti"].run_id, ctx["ti"].task_id, -1, log_cursor_key(1))

        async def run_until_some_lines() -> Recorder:
            first = TrainingJobTrigger(**kwargs)
            first._log = recorder = Recorder()
            task = asyncio.ensure_future(first_event(first))
            while len(recorder.program()) < 10:
                assert not task.done(), "the job ended before the trigger was stopped"
                await asyncio.sleep(0.05)
            task.cancel()  # the triggerer stops: the trigger is cancelled mid-stream
            await asyncio.gather(task, return_exceptions=True)
            await asyncio.sleep(0.3)  # the shielded cursor save finishes, as it does in the triggerer
            return recorder

        before = asyncio.run(run_until_some_lines())
        saved = airflow.xcoms[ti]
        again = TrainingJobTrigger(**kwargs)  # the triggerer's restart: same kwargs, cursor from XCom
        again._log = after = Recorder()
        event = asyncio.run(first_event(again))
    assert event.payload["status"] == "terminal" and event.payload["job"]["state"] == "succeeded"
    assert saved is not None and 10 <= len(before.program()) < len(expected())
    assert before.program() + after.program() == expected()
    assert PASSWORD not in "\n".join(before.lines + after.lines)


def test_a_secret_written_in_the_spec_is_not_streamed_while_deferred_nor_shown_in_the_tab(capfd, caplog):
    from airflow_training_provider.links import JobReference
    from airflow_training_provider.ui.app import NOT_SHOWN_UNREFERENCED, ask_program_log

    op = operator(deferrable=True, literal=True)
    ctx = task_context(op, run_id=f"program-logs-literal-{uuid.uuid4().hex[:6]}")
    with InMemoryAirflow().installed():
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(ctx)
        kwargs = json.loads(json.dumps(deferred.value.trigger.serialize()[1]))
        kwargs.update(resume_settle=0.0, spread_polls=False)
        trigger = TrainingJobTrigger(**kwargs)
        trigger._log = recorder = Recorder()
        event = asyncio.run(first_event(trigger))
    out, err = capfd.readouterr()
    ref = JobReference.model_validate(ctx["ti"].xcoms["training_job"])
    assert kwargs["unreferenced_secrets"] is True and PASSWORD not in json.dumps(kwargs)
    assert ref.unreferenced_secrets is True and PASSWORD not in ref.model_dump_json()
    assert event.payload["status"] == "terminal" and event.payload["job"]["state"] == "succeeded"
    assert recorder.program() == [] and PASSWORD not in "\n".join(recorder.lines)
    warnings = [line for line in (out + err + caplog.text).splitlines() if "only the worker can mask" in line]
    assert len({w.split("stream_logs:", 1)[1] for w in warnings}) == 1 and "deferrable=False" in warnings[0]
    log = ask_program_log(ref, ref.job)
    assert log is not None and log.lines == [] and log.note == NOT_SHOWN_UNREFERENCED
    # the worker's masker knows the value: a wait on the worker streams every line, masked
    worker = operator(deferrable=False, literal=True)
    run_task(worker, task_context(worker, run_id=f"program-logs-literal-w-{uuid.uuid4().hex[:6]}"))
    out, err = capfd.readouterr()
    assert program_lines(out + err) == expected() and PASSWORD not in out + err


def test_the_sensor_in_poke_mode_streams_the_jobs_lines_too(capfd, caplog):
    submitted = operator(deferrable=False)
    submitted.wait_for_completion = False
    ctx = task_context(submitted, run_id=f"program-logs-sensor-{uuid.uuid4().hex[:6]}")
    job = run_task(submitted, ctx)
    capfd.readouterr()
    sensor = TrainingJobSensor(
        task_id="watch",
        job_id=job["id"],
        conn_id=CONN_ID,
        poll_interval=0.3,
        deferrable=False,
        stream_logs=True,
    )
    sensor_ctx = task_context(sensor, run_id=ctx["run_id"])
    result = run_task(sensor, sensor_ctx)
    out, err = capfd.readouterr()
    assert result["state"] == "succeeded"
    # every line once, in order; the secret line passes through Airflow's masker only (the sensor
    # knows no spec: a documented limit), so it is left out of the comparison
    written = [line for line in program_lines(out + err) if not line.startswith("connecting with password")]
    assert written == [line for line in expected() if not line.startswith("connecting with password")]
    # nor does the UI: the sensor's record shows no lines, the same job's submit record shows them masked
    from airflow_training_provider.links import JobReference
    from airflow_training_provider.models import TrainingJob
    from airflow_training_provider.ui.app import NOT_SHOWN_WITHOUT_SPEC, ask_program_log

    ref = JobReference.model_validate(sensor_ctx["ti"].xcoms["training_job"])
    assert ref.spec_known is False and ref.job is None and ref.job_in_return_value  # not repeated
    log = ask_program_log(ref, TrainingJob.model_validate(result))
    assert log is not None and log.lines == [] and log.note == NOT_SHOWN_WITHOUT_SPEC


def test_a_platform_without_program_logs_says_so_once_and_the_task_succeeds(control, capfd):
    from tests.inprocess.test_operators_inprocess import submit, tensorone_spec

    op = submit("tensorone", tensorone_spec(epochs=1), stream_logs=True, deferrable=True)
    result = run_task(op, task_context(op, run_id=f"program-logs-none-{uuid.uuid4().hex[:6]}"))
    out, err = capfd.readouterr()
    notes = [line for line in (out + err).splitlines() if "stream_logs:" in line]
    assert result["state"] == "succeeded" and len(notes) == 1
    assert "tensorone does not serve its training program's output through its API" in notes[0]
    assert "[program]" not in out + err


def test_the_training_job_tab_shows_the_last_program_lines_masked(capfd):
    from airflow_training_provider.links import JobReference
    from airflow_training_provider.models import TrainingJob
    from airflow_training_provider.ui.app import ask_program_log

    op = operator(deferrable=False)
    ctx = task_context(op, run_id=f"program-logs-ui-{uuid.uuid4().hex[:6]}")
    returned = TrainingJob.model_validate(run_task(op, ctx))  # the tab reads a succeeded try's job there
    ref = JobReference.model_validate(ctx["ti"].xcoms["training_job"])
    assert ref.secret_references == [{"conn_id": SECRET_CONN}], "names only, for the view to mask"
    assert ref.job is None and ref.job_in_return_value
    capfd.readouterr()
    # a record of the same job naming no secrets is asked first: its read is not reused for this one
    unmasked = ask_program_log(ref.model_copy(update={"secret_references": []}), returned)
    assert unmasked is not None and f"connecting with password {PASSWORD}" in unmasked.lines
    log = ask_program_log(ref, returned)
    assert log is not None and log.lines == expected() and log.complete and log.earlier == 0


@pytest.mark.parametrize("fault", ["hangs", "fails"])
def test_a_logs_endpoint_that_hangs_or_fails_does_not_delay_the_deadlines_cancel(user_code_platform, fault):
    from airflow_training_platform.control import LocalPlatformControl

    control = LocalPlatformControl(user_code_platform.url)
    op = operator(deferrable=True, burst=2.0)  # 8 s of output: still running at the deadline
    ctx = task_context(op, run_id=f"program-logs-{fault}-{uuid.uuid4().hex[:6]}")
    broken = {"delay_seconds": 60.0} if fault == "hangs" else {"status": 500, "code": "ServiceUnavailable"}
    rule = control.add_fault(
        method="POST", header="X-Amz-Target", header_value="Logs_20140328.GetLogEvents", count=-1, **broken
    )
    try:
        with InMemoryAirflow().installed():
            with pytest.raises(TaskDeferred) as deferred:
                op.execute(ctx)
            kwargs = json.loads(json.dumps(deferred.value.trigger.serialize()[1]))
            deadline = time.time() + 2.0
            kwargs.update(resume_settle=0.0, spread_polls=False, deadline=deadline)
            trigger = TrainingJobTrigger(**kwargs)
            trigger._log = Recorder()
            event = asyncio.run(first_event(trigger))
        fired = control.fault(rule["id"])["fired"]
    finally:
        control.clear_faults(rule_id=rule["id"])
    assert event.payload["status"] == "timeout" and event.payload["cancel"] is not None, event.payload
    assert fired >= 1, "the log was asked for (and did not answer)"
    late = control.job(event.payload["job_id"])["cancel_requests"][0]["received_at"] - deadline
    assert late < kwargs["poll_interval"] + 1.0, f"the cancel came {late:.1f} s after the deadline"


def test_the_lines_a_program_prints_while_the_deadline_stops_it_reach_the_task_log():
    op = operator(deferrable=True, burst=2.0)  # 8 s of output: still running at the deadline
    ctx = task_context(op, run_id=f"program-logs-deadline-{uuid.uuid4().hex[:6]}")
    with InMemoryAirflow().installed():
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(ctx)
        kwargs = json.loads(json.dumps(deferred.value.trigger.serialize()[1]))
        kwargs.update(resume_settle=0.0, spread_polls=False, deadline=time.time() + 2.5)
        trigger = TrainingJobTrigger(**kwargs)
        trigger._log = recorder = Recorder()
        event = asyncio.run(first_event(trigger))
    assert event.payload["status"] == "timeout" and event.payload["cancel"] is not None, event.payload
    lines = recorder.program()
    assert lines[:10] == expected()[:10] and lines[-1] == "SIGTERM: checkpoint ckpt-final written", lines
    assert len(lines) == len(set(lines)), "no line twice"
