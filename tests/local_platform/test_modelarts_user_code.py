"""ModelArts user code on the local platform: the user's own boot file (``tests/data/user_code/
modelarts_train.py`` running ``train.py``, plain numpy) named by ``code_dir`` + ``boot_file`` and
submitted with Huawei's own client (``huaweicloudsdkmodelarts``), run as a real process under the
ModelArts training-container contract, terminated with the real stop contract. No mocks.

The code and the data are written straight into the server's local OBS (``<data_dir>/obs/...``).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from huaweicloudsdkcore.exceptions.exceptions import ClientRequestException
from huaweicloudsdkmodelarts.v1 import ModelArtsClient
from huaweicloudsdkmodelarts.v1 import model as m

from airflow_training_platform.cli import build_parser
from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.engine.programs import read_log
from airflow_training_platform.platforms.common import FINAL_CHECKPOINT_FIELD
from airflow_training_platform.platforms.modelarts.user_code import (
    is_user_code,
    parse_image_commands,
    parse_user_code,
)
from airflow_training_platform.platforms.modelarts.wire import job_to_wire
from airflow_training_platform.server import LocalPlatformServer
from tests.conftest import API_KEY, MODELARTS_ACCESS_KEY, server_options
from tests.local_platform.test_modelarts_api import client
from tests.modelarts_user_code import BOOT_FILE, algorithm, put_code_and_data

GRACE = 1.5  # the server's ModelArts stop grace (s)
IMAGE = "swr.cn-north-4.myhuaweicloud.com/me/numpy-train:1"
SERVER_ENV_MARKER = f"server-only-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A platform that runs user code (a custom image mapped to the boot file too), started with a
    marker in its environment that no program may see."""
    os.environ["ATP_TEST_SERVER_MARKER"] = SERVER_ENV_MARKER
    try:
        srv = LocalPlatformServer(
            str(tmp_path_factory.mktemp("ma-usercode")),
            gpus=4,
            log_level="warning",
            allow_user_code=True,
            modelarts_image_command=[f"{IMAGE}={sys.executable} {BOOT_FILE}"],
            **server_options(modelarts_stop_grace_seconds=GRACE),
        ).start()
    finally:
        os.environ.pop("ATP_TEST_SERVER_MARKER", None)
    put_code_and_data(srv.data_dir)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def ma(server) -> ModelArtsClient:
    return client(server)


@pytest.fixture(scope="module")
def control(server):
    return LocalPlatformControl(server.url)


def sdk_algorithm(spec: dict[str, Any]) -> m.JobAlgorithm:
    """:func:`tests.modelarts_user_code.algorithm` as the SDK's model."""
    engine = spec.get("engine") or {}
    return m.JobAlgorithm(
        code_dir=spec.get("code_dir"),
        boot_file=spec.get("boot_file"),
        command=spec.get("command"),
        engine=m.JobEngine(**engine) if engine else None,
        parameters=[m.Parameters(name=p["name"], value=p["value"]) for p in spec.get("parameters") or []],
        inputs=[
            m.Input(
                name=c["name"],
                remote=m.InputDataInfo(obs=m.InputDataInfoObs(obs_url=c["remote"]["obs"]["obs_url"])),
            )
            for c in spec.get("inputs") or []
        ],
        outputs=[
            m.Output(name=c["name"], remote=m.Remote(obs=m.RemoteObs(obs_url=c["remote"]["obs"]["obs_url"])))
            for c in spec.get("outputs") or []
        ],
        environments=spec.get("environments"),
        local_code_dir=spec.get("local_code_dir"),
        working_dir=spec.get("working_dir"),
    )


def create(ma: ModelArtsClient, name: str, spec: dict[str, Any]) -> str:
    body = m.Job(
        kind="job",
        metadata=m.JobMetadata(name=name),
        algorithm=sdk_algorithm(spec),
        spec=m.Spec(resource=m.SpecResource(flavor_id="modelarts.vm.cpu.2u", node_count=1)),
    )
    return ma.create_training_job(m.CreateTrainingJobRequest(body=body)).metadata.id


def wait(ma: ModelArtsClient, job_id: str, phases: tuple[str, ...], timeout: float = 30):
    deadline = time.monotonic() + timeout
    while True:
        job = ma.show_training_job_details(m.ShowTrainingJobDetailsRequest(training_job_id=job_id))
        if job.status.phase in phases:
            return job
        assert time.monotonic() < deadline, f"{job_id} stayed {job.status.phase}"
        time.sleep(0.2)


ENDED = ("Completed", "Failed", "Terminated")


def wait_for_line(control, job_id: str, text: str, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        record = control.job(job_id)
        if any(text in line for line in record["logs"]):
            return record
        assert time.monotonic() < deadline, record["logs"]
        time.sleep(0.1)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_a_code_dir_job_runs_the_boot_file_by_the_modelarts_contract(ma, control, server):
    name = unique("ma-code")
    spec = {**algorithm(f"/out/{name}", epochs=3, lr=0.5), "environments": {"MY_SETTING": "mine"}}
    job_id = create(ma, name, spec)
    job = wait(ma, job_id, ENDED)
    assert job.status.phase == "Completed", job.status.task_statuses
    assert job.status.task_statuses[0].exit_code == 0
    # the model lands at the train_url output's OBS location
    out = Path(server.data_dir) / "obs" / "out" / name
    assert {"model.json", "seen.json", "predictions.csv", "modelarts_seen.json"} <= set(
        os.listdir(out / "model")
    )
    seen = json.loads((out / "model" / "modelarts_seen.json").read_text())
    home = Path(server.data_dir) / "jobs" / job_id / "home" / "ma-user"
    modelarts = home / "modelarts"
    # channels as --<name>=<local_dir> (inputs, outputs), then the parameters as --name=value
    assert seen["argv"] == [
        f"--data_url={modelarts / 'inputs' / 'data_url_0'}",
        f"--train_url={modelarts / 'outputs' / 'train_url_0'}",
        f"--checkpoints={modelarts / 'outputs' / 'checkpoints_0'}",
        "--epochs=3",
        "--lr=0.5",
    ]
    assert seen["data_files"] == ["part-0.csv"]  # copied in from OBS
    assert seen["cwd"] == str(modelarts / "user-job-dir" / "ma-code")  # ${MA_JOB_DIR}/<last dir of code_dir>
    env = seen["env"]
    assert {k: v for k, v in env.items() if k.startswith(("MA_", "VC_"))} == {
        "MA_HOME": str(home),
        "MA_JOB_DIR": str(modelarts / "user-job-dir"),
        "MA_MOUNT_PATH": str(modelarts),
        "MA_LOG_DIR": str(modelarts / "log"),
        "MA_NUM_GPUS": env["MA_NUM_GPUS"],
        "MA_NUM_HOSTS": "1",
        "MA_TASK_NAME": "worker",
        "MA_CURRENT_IP": "127.0.0.1",
        "VC_TASK_INDEX": "0",
        "VC_WORKER_NUM": "1",
        "VC_WORKER_HOSTS": "127.0.0.1",
    }
    assert env["MA_NUM_GPUS"].isdigit() and env["MY_SETTING"] == "mine" and env["HOME"] == str(home)
    assert env["PYTHONPATH"] == str(modelarts / "user-job-dir")
    text = json.dumps(env)
    for secret in (API_KEY, MODELARTS_ACCESS_KEY, SERVER_ENV_MARKER):
        assert secret not in text
    model = json.loads((out / "model" / "model.json").read_text())
    assert model["epochs"] == 3
    # the log file: stdout and stderr, one timestamped line per record, in order
    record = control.job(job_id)
    lines = [entry["line"] for entry in read_log(record["program"]["log_file"])["lines"]]
    expected = [x for e in (1, 2, 3) for x in (f"epoch={e} ", f"progress {e}/3")] + ["training complete"]
    assert len(lines) == len(expected) and all(map(str.startswith, lines, expected)), lines
    assert record["metrics"] == {}  # ModelArts has no metric regexes


def test_a_terminate_sigterms_the_group_and_the_final_checkpoint_resumes_the_next_job(ma, control, server):
    shared = f"/out/{unique('shared')}/checkpoints/"
    name = unique("ma-stop")
    job_id = create(
        ma, name, algorithm(f"/out/{name}", shared, epochs=100, seconds_per_epoch=0.3, spawn_child=1)
    )
    record = wait_for_line(control, job_id, "epoch=2 ")
    local_model = Path(server.data_dir) / "jobs" / job_id / "home/ma-user/modelarts/outputs/train_url_0"
    child = int((local_model / "child.pid").read_text())
    assert alive(child)
    answer = ma.stop_training_job(
        m.StopTrainingJobRequest(training_job_id=job_id, body=m.JobActionType(action_type="terminate"))
    )
    assert answer.status.phase == "Terminating"
    assert wait(ma, job_id, ENDED).status.phase == "Terminated"
    record = control.job(job_id)
    assert (
        record["cancel"]["final_checkpoints"] == record["program"]["final_checkpoints"] == ["checkpoint.json"]
    )
    assert record["program"]["killed_after_grace"] is False
    assert [e["signal"] for e in record["events"] if e["type"] == "signal_sent"] == ["SIGTERM"]
    assert not alive(child), "the script's child got the SIGTERM too"
    saved = Path(server.data_dir) / "obs" / shared.strip("/") / "checkpoint.json"
    stopped_at = json.loads(saved.read_text())["epoch"]
    assert stopped_at >= 2
    # the job object says so too (the local platform's extension, which Huawei's client ignored)
    after_stop = job_to_wire(record)[FINAL_CHECKPOINT_FIELD]
    assert after_stop == {
        "written": True,
        "files": ["checkpoint.json"],
        "location": shared,
        "at": after_stop["at"],
    }
    assert after_stop["at"] >= record["program"]["stop_signal_at"]

    second = unique("ma-resume")
    resumed = create(ma, second, algorithm(f"/out/{second}", shared, epochs=stopped_at + 1))
    assert wait(ma, resumed, ENDED).status.phase == "Completed"
    assert f"resumed from epoch {stopped_at}" in control.job(resumed)["logs"]
    seen = json.loads((Path(server.data_dir) / "obs" / "out" / second / "model" / "seen.json").read_text())
    assert seen["start_epoch"] == stopped_at + 1


def test_a_failing_boot_file_fails_the_job_with_its_exit_code_and_last_lines(ma):
    name = unique("ma-fails")
    job_id = create(ma, name, algorithm(f"/out/{name}", fail_with="no label column"))
    job = wait(ma, job_id, ENDED)
    assert job.status.phase == "Failed"
    task = job.status.task_statuses[0]
    assert task.exit_code == 1 and "giving up: no label column" in task.message


def test_a_mapped_custom_image_runs_its_local_command_with_the_channels_and_parameters(ma, control, server):
    name = unique("ma-image")
    spec = algorithm(f"/out/{name}", epochs=2)
    spec = {
        **spec,
        "code_dir": None,
        "boot_file": None,
        "engine": {"image_url": IMAGE},
        "command": "bash /home/ma-user/run.sh",
    }
    job_id = create(ma, name, spec)
    job = wait(ma, job_id, ENDED)
    assert job.status.phase == "Completed", job.status.task_statuses
    modelarts = Path(server.data_dir) / "jobs" / job_id / "home" / "ma-user" / "modelarts"
    assert control.job(job_id)["program"]["argv"] == [
        sys.executable,
        str(BOOT_FILE),
        f"--data_url={modelarts / 'inputs' / 'data_url_0'}",
        f"--train_url={modelarts / 'outputs' / 'train_url_0'}",
        f"--checkpoints={modelarts / 'outputs' / 'checkpoints_0'}",
        "--epochs=2",
    ]
    assert (Path(server.data_dir) / "obs" / "out" / name / "model" / "model.json").is_file()


def test_without_the_opt_in_flag_user_code_is_refused_and_nothing_runs(platform):
    ma = client(platform)
    name = unique("ma-refused")
    with pytest.raises(ClientRequestException) as err:
        create(ma, name, algorithm(f"/out/{name}"))
    assert (err.value.status_code, err.value.error_code) == (400, "ModelArts.0101")
    assert "--allow-user-code" in err.value.error_msg
    assert name not in [j["name"] for j in LocalPlatformControl(platform.url).jobs(platform="modelarts")]
    assert not (Path(platform.data_dir) / "obs" / "out" / name).exists()


def test_a_bad_user_code_field_is_refused_naming_it(ma):
    spec = {**algorithm("/out/x"), "boot_file": "/elsewhere/train.py"}
    with pytest.raises(ClientRequestException) as err:
        create(ma, unique("ma-bad"), spec)
    assert err.value.status_code == 400 and "algorithm.boot_file" in err.value.error_msg
    spec = {**algorithm("/out/x"), "environments": {"MA_HOME": "/tmp"}}
    with pytest.raises(ClientRequestException) as err:
        create(ma, unique("ma-bad"), spec)
    assert err.value.status_code == 400 and "algorithm.environments.MA_HOME" in err.value.error_msg
    spec = {**algorithm("/out/x"), "local_code_dir": "/home/ma-user/modelarts/code"}
    with pytest.raises(ClientRequestException) as err:
        create(ma, unique("ma-bad"), spec)
    assert err.value.status_code == 400 and "algorithm.local_code_dir" in err.value.error_msg


def test_env_channels_local_dirs_and_working_dir_are_laid_out_under_the_job_directory(tmp_path):
    # the program as prepared (nothing started): the choices of the less common fields
    put_code_and_data(str(tmp_path))
    spec = algorithm("/out/layout", lr=0.1)
    spec["inputs"][0].update(access_method="env", local_dir="/home/ma-user/data/")
    spec.update(
        local_code_dir="/home/ma-user/src",
        working_dir="/home/ma-user/work",
        environments={"PYTHONPATH": "/opt/extra"},
    )
    program = parse_user_code({"algorithm": spec}, str(tmp_path), {}).prepare(str(tmp_path / "job"))
    job = tmp_path / "job"
    assert program.argv == [
        sys.executable,
        str(job / "home/ma-user/src/ma-code/modelarts_train.py"),
        f"--train_url={job / 'home/ma-user/modelarts/outputs/train_url_0'}",
        f"--checkpoints={job / 'home/ma-user/modelarts/outputs/checkpoints_0'}",
        "--lr=0.1",
    ]
    assert program.env["data_url"] == str(job / "home/ma-user/data")
    assert os.listdir(program.env["data_url"]) == ["part-0.csv"]
    assert program.cwd == str(job / "home/ma-user/work")
    assert program.env["PYTHONPATH"] == f"{job / 'home/ma-user/modelarts/user-job-dir'}:/opt/extra"
    assert program.checkpoint_dir == str(job / "home/ma-user/modelarts/outputs/checkpoints_0")


def test_images_are_mapped_by_a_repeatable_server_option():
    args = build_parser().parse_args(
        ["serve", "--data-dir", "d", "--modelarts-image-command", "a=x", "--modelarts-image-command", "b=y z"]
    )
    assert parse_image_commands(args.modelarts_image_command) == {"a": "x", "b": "y z"}
    with pytest.raises(ValueError, match="IMAGE=COMMAND"):
        parse_image_commands(["no-command"])
    assert not is_user_code({"algorithm": {"engine": {"image_url": "a"}, "command": "python t.py"}}, {})
    assert is_user_code({"algorithm": {"engine": {"image_url": "a"}, "command": "python t.py"}}, {"a": "x"})
