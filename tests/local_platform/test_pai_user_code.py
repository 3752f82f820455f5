"""PAI training jobs running the user's own code on the local platform: the script of
``tests/data/user_code/train.py`` (plain numpy) submitted with Alibaba's own client
(``alibabacloud-paistudio20220112``) as a ``Command`` + ``CodeDir`` job, run as a real process
under PAI's ``/ml`` contract, stopped with the real stop contract. No mocks.

The code (individual objects under a prefix, as the pai SDK uploads ``source_dir``) and the data
are written straight under the server's OSS root (``<data_dir>/oss/...``).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

import pytest
from alibabacloud_paistudio20220112 import models
from alibabacloud_paistudio20220112.client import Client

from airflow_training_devel.user_code import (
    METRIC_DEFINITIONS,
    PAI_CODE,
    PAI_COMMAND,
    PAI_DATA_URI,
    SCRIPT,
    put_pai_code_and_data,
)
from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.engine.programs import cuda_device_count, read_log
from airflow_training_platform.platforms.common import FINAL_CHECKPOINT_FIELD
from airflow_training_platform.platforms.pai.wire import job_to_wire
from airflow_training_platform.server import LocalPlatformServer
from tests.conftest import PAI_WORKSPACE_ID, server_options
from tests.local_platform.test_pai_api import client

GRACE = 3.0  # the server's PAI stop grace (s)
IMAGE = "local/pai-train:1"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalPlatformServer(
        str(tmp_path_factory.mktemp("pai-usercode")),
        gpus=4,
        log_level="warning",
        allow_user_code=True,
        pai_image_command=[f"{IMAGE}={sys.executable} {SCRIPT}"],
        **server_options(pai_stop_grace_seconds=GRACE),
    ) as srv:
        put_pai_code_and_data(srv.data_dir)
        yield srv


@pytest.fixture(scope="module")
def pai(server) -> Client:
    return client(server)


@pytest.fixture(scope="module")
def control(server) -> LocalPlatformControl:
    return LocalPlatformControl(server.url)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def request(
    name: str,
    checkpoints: str | None = None,
    code: bool = True,
    image: str = "dsw-registry.cn-hangzhou.cr.aliyuncs.com/pai/pytorch-training:2.1-cpu-py310",
    data_uri: str = PAI_DATA_URI,
    **hyper,
) -> models.CreateTrainingJobRequest:
    """A ``Command`` + ``CodeDir`` job as the pai SDK's ``Estimator`` submits one."""
    return models.CreateTrainingJobRequest(
        training_job_name=name,
        workspace_id=PAI_WORKSPACE_ID,
        algorithm_spec=models.AlgorithmSpec(
            image=image,
            command=PAI_COMMAND,
            job_type="PyTorchJob",
            metric_definitions=[
                models.MetricDefinition(name=d["Name"], regex=d["Regex"]) for d in METRIC_DEFINITIONS
            ],
        ),
        code_dir=(
            models.Location(
                location_type="oss",
                location_value={**PAI_CODE, "Endpoint": "oss-cn-hangzhou.aliyuncs.com"},
            )
            if code
            else None
        ),
        compute_resource=models.CreateTrainingJobRequestComputeResource(ecs_spec="ecs.c6.large", ecs_count=1),
        hyper_parameters=[
            models.CreateTrainingJobRequestHyperParameters(name=k, value=str(v))
            for k, v in {"epochs": 3, "lr": 0.5, **hyper}.items()
        ],
        input_channels=[models.CreateTrainingJobRequestInputChannels(name="train", input_uri=data_uri)],
        output_channels=[
            models.CreateTrainingJobRequestOutputChannels(
                name="model", output_uri=f"oss://out/{name}/model/"
            ),
            models.CreateTrainingJobRequestOutputChannels(
                name="checkpoints", output_uri=checkpoints or f"oss://out/{name}/checkpoints/"
            ),
        ],
        environments={"MY_SETTING": "mine"},
    )


def wait(pai: Client, job_id: str, until, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while True:
        job = pai.get_training_job(job_id).body
        if until(job):
            return job
        assert time.monotonic() < deadline, f"{job_id} stayed {job.status}"
        time.sleep(0.2)


def ended(job) -> bool:
    return job.status in ("Succeed", "Failed", "Terminated")


def wait_for_line(control, job_id: str, text: str, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        record = control.job(job_id)
        if any(text in line for line in record["logs"]):
            return record
        assert time.monotonic() < deadline, record["logs"]
        time.sleep(0.1)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_a_code_dir_job_runs_the_users_script_by_pais_contract(pai, control, server):
    name = unique("pai-code")
    job_id = pai.create_training_job(request(name)).body.training_job_id
    job = wait(pai, job_id, ended)
    assert job.status == "Succeed", job.reason_message
    oss = Path(server.data_dir) / "oss"
    # the model: what the script wrote to PAI_OUTPUT_MODEL, at the model channel's OutputUri
    model_dir = oss / "out" / name / "model"
    assert sorted(p.name for p in model_dir.iterdir()) == ["model.json", "seen.json"]
    seen = json.loads((model_dir / "seen.json").read_text())
    assert seen["argv"] == ["--epochs", "3", "--lr", "0.5"]  # $PAI_USER_ARGS
    assert seen["channel_files"] == ["part-0.csv"]
    assert seen["hyperparameters"] == {"epochs": "3", "lr": "0.5"}  # hyperparameters.json: strings
    record = control.job(job_id)
    ml = Path(record["job_dir"]) / "ml"
    assert seen["cwd"] == str(ml / "usercode")
    env = seen["env"]
    assert env["PAI_WORKING_DIR"] == f"{ml}/usercode/" and env["PAI_CONFIG_DIR"] == f"{ml}/input/config/"
    assert env["PAI_INPUT_TRAIN"] == f"{ml}/input/data/train/"
    assert env["PAI_OUTPUT_MODEL"] == f"{ml}/output/model/"
    assert env["PAI_OUTPUT_CHECKPOINTS"] == f"{ml}/output/checkpoints/"
    assert json.loads(env["PAI_HPS"]) == {"epochs": "3", "lr": "0.5"}
    assert env["PAI_HPS_EPOCHS"] == "3" and env["PAI_HPS_LR"] == "0.5"
    assert env["PAI_USER_ARGS"] == "--epochs 3 --lr 0.5" and env["MY_SETTING"] == "mine"
    assert env["NPROC_PER_NODE"] == str(max(1, cuda_device_count()))  # PAI's GPUs per node
    assert record["program"]["argv"][4:] == PAI_COMMAND  # under the container init
    # the metrics: MetricDefinitions over the output, served as PAI serves metrics
    last = [line for line in record["logs"] if line.startswith("epoch=3 ")][0]
    expected = {
        "train:loss": float(last.split("loss=")[1].split()[0]),
        "train:accuracy": float(last.split("accuracy=")[1]),
    }
    assert {m.name: m.value for m in job.latest_metrics} == expected
    latest = pai.get_training_job_latest_metrics(job_id, models.GetTrainingJobLatestMetricsRequest()).body
    assert {m.name: m.value for m in latest.metrics} == expected
    rows = pai.list_training_job_metrics(job_id, models.ListTrainingJobMetricsRequest(page_size=100)).body
    losses = [m.value for m in rows.metrics if m.name == "train:loss"]
    assert len(losses) == 3 and losses[-1] == expected["train:loss"]
    # the log: stdout and stderr, one timestamped line per record, in order
    lines = [entry["line"] for entry in read_log(record["program"]["log_file"])["lines"]]
    wanted = [x for e in (1, 2, 3) for x in (f"epoch={e} ", f"progress {e}/3")] + ["training complete"]
    assert len(lines) == len(wanted) and all(map(str.startswith, lines, wanted)), lines


def test_a_stop_sigterms_the_group_and_the_final_checkpoint_resumes_the_next_job(pai, control, server):
    shared = f"oss://out/{unique('shared')}/checkpoints/"
    job_id = pai.create_training_job(
        request(unique("pai-stop"), shared, epochs=100, seconds_per_epoch=0.3, spawn_child=1)
    ).body.training_job_id
    record = wait_for_line(control, job_id, "epoch=2 ")
    child = int((Path(record["program"]["model_dir"]) / "child.pid").read_text())
    assert alive(child)
    pai.stop_training_job(job_id)
    job = wait(pai, job_id, ended)
    assert job.status == "Terminated" and job.reason_code == "JobStoppedByUser"
    record = control.job(job_id)
    assert record["cancel"]["final_checkpoint_written"] is True
    assert record["program"]["final_checkpoints"] == ["checkpoint.json"]
    assert record["program"]["killed_after_grace"] is False
    assert [e["signal"] for e in record["events"] if e["type"] == "signal_sent"] == ["SIGTERM"]
    assert not alive(child), "the script's child got the SIGTERM too"
    saved = Path(server.data_dir) / "oss" / "out" / shared.split("/")[3] / "checkpoints" / "checkpoint.json"
    stopped_at = json.loads(saved.read_text())["epoch"]
    assert stopped_at >= 2
    # GetTrainingJob says so too (the local platform's extension, which Alibaba's client ignored)
    after_stop = job_to_wire(record)[FINAL_CHECKPOINT_FIELD]
    assert after_stop == {
        "written": True,
        "files": ["checkpoint.json"],
        "location": shared,
        "at": after_stop["at"],
    }
    assert after_stop["at"] >= record["program"]["stop_signal_at"]

    second = unique("pai-resume")
    second_id = pai.create_training_job(request(second, shared, epochs=stopped_at + 1)).body.training_job_id
    assert wait(pai, second_id, ended).status == "Succeed"
    assert f"resumed from epoch {stopped_at}" in control.job(second_id)["logs"]
    seen = json.loads((Path(server.data_dir) / "oss" / "out" / second / "model" / "seen.json").read_text())
    assert seen["start_epoch"] == stopped_at + 1


def test_a_mapped_image_runs_its_local_command_and_a_single_file_input_is_that_file(pai, control, server):
    name = unique("pai-image")
    body = request(name, code=False, image=IMAGE, data_uri=PAI_DATA_URI + "part-0.csv", epochs=2)
    job_id = pai.create_training_job(body).body.training_job_id
    job = wait(pai, job_id, ended)
    assert job.status == "Succeed", job.reason_message
    record = control.job(job_id)
    assert record["program"]["argv"][4:] == [sys.executable, str(SCRIPT)]  # the image's command
    seen = json.loads((Path(server.data_dir) / "oss" / "out" / name / "model" / "seen.json").read_text())
    assert seen["env"]["PAI_INPUT_TRAIN"] == str(Path(record["job_dir"]) / "ml/input/data/train/part-0.csv")
    assert seen["channel_files"] == ["part-0.csv"] and seen["argv"] == []


def test_without_the_opt_in_flag_user_code_is_refused_and_nothing_runs(platform):
    pai, name = client(platform), unique("pai-refused")
    with pytest.raises(Exception) as err:
        pai.create_training_job(request(name))
    assert getattr(err.value, "code", None) == "InvalidParameter"
    assert getattr(err.value, "status_code", None) == 400
    assert "--allow-user-code" in str(getattr(err.value, "message", err.value))
    names = [j["name"] for j in LocalPlatformControl(platform.url).jobs(platform="pai")]
    assert name not in names


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            {"code_dir": models.Location(location_type="nas", location_value={"Path": "/x"})},
            "CodeDir.LocationType",
        ),
        (
            {
                "input_channels": [
                    models.CreateTrainingJobRequestInputChannels(name="train", dataset_id="d-1")
                ]
            },
            "InputChannels.1.InputUri",
        ),
    ],
    ids=["nas-code", "dataset-channel"],
)
def test_a_user_code_job_the_local_platform_cannot_serve_is_refused_naming_the_field(pai, change, field):
    body = request(unique("pai-bad"))
    for key, value in change.items():
        setattr(body, key, value)
    with pytest.raises(Exception) as err:
        pai.create_training_job(body)
    assert getattr(err.value, "code", None) == "InvalidParameter" and field in str(err.value)
