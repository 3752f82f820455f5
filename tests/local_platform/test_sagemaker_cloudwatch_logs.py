"""CloudWatch Logs on the local platform: a script-mode job's output read back as AWS's tools read
it — boto3's own ``logs`` client, the Amazon provider's ``SageMakerHook`` log loop and its
``SageMakerTrainingOperator(print_log=True)`` — over real HTTP against a server that runs user code.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from types import SimpleNamespace

import boto3
import pytest
import structlog

from airflow_training_devel.user_code import put_code_and_data, script_hyperparameters
from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.engine.programs import read_log
from airflow_training_platform.server import LocalPlatformServer
from tests.conftest import API_KEY, AWS_ACCESS_KEY_ID, aws_connection, server_options
from tests.local_platform.test_sagemaker_script_mode import ended, script_job, wait

GROUP = "/aws/sagemaker/TrainingJobs"
CONN_ID = "aws_cwlogs_local"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = LocalPlatformServer(
        str(tmp_path_factory.mktemp("cwlogs")),
        gpus=4,
        log_level="warning",
        allow_user_code=True,
        **server_options(sagemaker_stop_grace_seconds=1.0),
    ).start()
    put_code_and_data(srv.data_dir)
    try:
        yield srv
    finally:
        srv.stop()


def aws_client(url: str, service: str):
    return boto3.client(
        service,
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=AWS_ACCESS_KEY_ID,
        aws_secret_access_key=API_KEY,
    )


@pytest.fixture(scope="module")
def sm(server):
    return aws_client(server.url, "sagemaker")


@pytest.fixture(scope="module")
def logs(server):
    return aws_client(server.url, "logs")


@pytest.fixture(scope="module")
def finished(sm):
    """A script-mode job that ran to completion (3 epochs: 7 output lines, stdout and stderr)."""
    name = f"cwlogs-{uuid.uuid4().hex[:8]}"
    sm.create_training_job(**script_job(name))
    assert wait(sm, name, ended)["TrainingJobStatus"] == "Completed"
    return name


@pytest.fixture
def aws_conn(server, monkeypatch):
    """The Airflow ``aws`` connection :data:`CONN_ID` to the server (``endpoint_url`` extra)."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", aws_connection(server.url))


def file_lines(server, name: str) -> list[dict]:
    record = LocalPlatformControl(server.url).job(name)
    return read_log(record["program"]["log_file"])["lines"]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_boto3_lists_the_jobs_stream_and_pages_every_line_once_in_order(server, logs, finished):
    streams = logs.describe_log_streams(
        logGroupName=GROUP, logStreamNamePrefix=finished + "/", orderBy="LogStreamName", limit=1
    )
    assert "nextToken" not in streams  # the SageMaker SDK loops while it is there
    (stream,) = streams["logStreams"]
    lines = file_lines(server, finished)
    assert len(lines) == 7
    start = re.fullmatch(rf"{finished}/algo-1-(\d+)", stream["logStreamName"])
    assert start is not None
    record = LocalPlatformControl(server.url).job(finished)
    assert int(start[1]) == int(record["started_at"]) and stream["creationTime"] == int(
        record["started_at"] * 1000
    )
    assert stream["firstEventTimestamp"] == int(lines[0]["t"] * 1000)  # milliseconds
    assert stream["lastEventTimestamp"] == stream["lastIngestionTime"] == int(lines[-1]["t"] * 1000)
    assert (
        stream["arn"]
        == f"arn:aws:logs:us-east-1:123456789012:log-group:{GROUP}:log-stream:" + (stream["logStreamName"])
    )
    assert stream["storedBytes"] == 0

    # forward, 3 a page, until the forward token comes back unchanged
    name, seen, token, pages = stream["logStreamName"], [], None, 0
    while True:
        page = logs.get_log_events(
            logGroupName=GROUP,
            logStreamName=name,
            startFromHead=True,
            limit=3,
            **({"nextToken": token} if token else {}),
        )
        pages += 1
        seen += page["events"]
        assert page["nextBackwardToken"]  # never null
        if page["nextForwardToken"] == token:
            break
        token = page["nextForwardToken"]
    assert pages == 4 and [e["message"] for e in seen] == [line["line"] for line in lines]
    assert [e["timestamp"] for e in seen] == [int(line["t"] * 1000) for line in lines]
    assert all(e["ingestionTime"] == e["timestamp"] for e in seen)

    # by default the latest events; the backward token pages to the earlier ones
    latest = logs.get_log_events(logGroupName=GROUP, logStreamName=name, limit=3)
    assert [e["message"] for e in latest["events"]] == [line["line"] for line in lines[4:]]
    earlier = logs.get_log_events(
        logGroupName=GROUP, logStreamName=name, limit=3, nextToken=latest["nextBackwardToken"]
    )
    assert [e["message"] for e in earlier["events"]] == [line["line"] for line in lines[1:4]]
    after = logs.get_log_events(logGroupName=GROUP, logStreamName=name, nextToken=latest["nextForwardToken"])
    assert after["events"] == [] and after["nextForwardToken"] == latest["nextForwardToken"]

    # startTime (ms) includes its own millisecond, endTime excludes its own
    third, fifth = seen[2]["timestamp"], seen[4]["timestamp"]
    window = logs.get_log_events(
        logGroupName=GROUP, logStreamName=name, startFromHead=True, startTime=third, endTime=fifth
    )
    assert {e["message"] for e in window["events"]} == {
        e["message"] for e in seen if third <= e["timestamp"] < fifth
    }


def test_describe_log_streams_pages_with_next_token_and_refuses_a_prefix_by_last_event_time(
    logs, sm, finished
):
    other = unique("cwlogs-other")
    sm.create_training_job(**script_job(other))
    wait(sm, other, lambda job: job["SecondaryStatus"] != "Starting")
    names, token = [], None
    while True:
        page = logs.describe_log_streams(
            logGroupName=GROUP, limit=1, **({"nextToken": token} if token else {})
        )
        assert len(page["logStreams"]) == 1
        names += [s["logStreamName"] for s in page["logStreams"]]
        if "nextToken" not in page:
            break
        token = page["nextToken"]
    assert names == sorted(names) and {n.split("/")[0] for n in names} >= {finished, other}
    by_time = logs.describe_log_streams(logGroupName=GROUP, orderBy="LastEventTime", descending=True)
    assert len(by_time["logStreams"]) == len(names) and "nextToken" not in by_time
    with pytest.raises(logs.exceptions.InvalidParameterException):
        logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix=other, orderBy="LastEventTime")
    wait(sm, other, ended)


def test_an_unknown_stream_or_group_is_resource_not_found(logs, finished):
    for call in (
        lambda: logs.get_log_events(logGroupName=GROUP, logStreamName=f"{finished}/algo-1-1"),
        lambda: logs.get_log_events(logGroupName=GROUP, logStreamName="no-such-job/algo-1-1"),
        lambda: logs.describe_log_streams(logGroupName="/aws/sagemaker/Endpoints/x"),
    ):
        with pytest.raises(logs.exceptions.ResourceNotFoundException) as err:
            call()
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert err.value.response["Error"]["Message"].startswith("The specified log ")
    with pytest.raises(logs.exceptions.InvalidParameterException):
        logs.get_log_events(logGroupName=GROUP, logStreamName=f"{finished}/x", nextToken="nonsense")


def fast_describe_gate(monkeypatch) -> None:
    """``describe_training_job_with_log`` calls ``DescribeTrainingJob`` at most every 30 s of
    ``time.monotonic()``: run that one clock 100 times faster in the hook's module (sleeps stay real),
    so the real loop ends within seconds of the job."""
    from airflow.providers.amazon.aws.hooks import sagemaker as hook_module

    real = time.monotonic
    monkeypatch.setattr(
        hook_module, "time", SimpleNamespace(sleep=time.sleep, monotonic=lambda: real() * 100)
    )


def printed(captured: list[dict]) -> list[str]:
    """The messages Airflow's loggers (structlog) wrote, ``%`` arguments applied."""
    return [str(e["event"]) % tuple(e.get("positional_args") or ()) for e in captured]


def test_the_amazon_hooks_log_loop_prints_a_running_jobs_lines(sm, aws_conn, monkeypatch):
    from airflow.providers.amazon.aws.hooks.sagemaker import SageMakerHook

    fast_describe_gate(monkeypatch)
    name = unique("cwlogs-hook")
    sm.create_training_job(**script_job(name, epochs=3, seconds_per_epoch=0.2))
    hook = SageMakerHook(aws_conn_id=CONN_ID)
    started = time.monotonic()
    with structlog.testing.capture_logs() as captured:
        hook.check_training_status_with_log(
            name,
            SageMakerHook.non_terminal_states,
            SageMakerHook.training_failed_states,
            wait_for_completion=True,
            check_interval=1,
            max_ingestion_time=None,
        )
    assert time.monotonic() - started < 15
    messages = printed(captured)
    expected = [x for e in (1, 2, 3) for x in (f"epoch={e} ", f"progress {e}/3")] + ["training complete"]
    lines = [m for m in messages if m.startswith(("epoch=", "progress ", "training complete"))]
    assert len(lines) == len(expected) and all(map(str.startswith, lines, expected)), messages
    assert any(m.startswith("Billable seconds:") for m in messages)


def test_the_amazon_training_operator_with_its_defaults_prints_the_scripts_output(aws_conn, monkeypatch):
    from airflow.providers.amazon.aws.operators.sagemaker import SageMakerTrainingOperator

    fast_describe_gate(monkeypatch)
    name = unique("cwlogs-operator")
    operator = SageMakerTrainingOperator(
        task_id="train", config=script_job(name), aws_conn_id=CONN_ID, check_interval=1
    )
    assert operator.print_log and operator.wait_for_completion and not operator.deferrable
    with structlog.testing.capture_logs() as captured:
        result = operator.execute({})
    assert result["Training"]["TrainingJobStatus"] == "Completed"
    messages = printed(captured)
    assert [m.split()[0] for m in messages if m.startswith("epoch=")] == ["epoch=1", "epoch=2", "epoch=3"]
    assert "training complete" in messages


def test_the_amazon_providers_async_logs_hook_reads_the_stream_through_aiobotocore(
    server, aws_conn, finished
):
    """``AwsLogsHook``'s aiobotocore client (what the provider's async log reads use): the job's
    stream by ``describe_log_streams_async`` and its events, the program's lines, in one page.

    Not ``get_log_events_async`` itself: in provider 9.39 it has no way out of its ``while True``
    (it neither returns when ``nextForwardToken`` repeats nor after empty pages), against AWS too."""
    from airflow.providers.amazon.aws.hooks.logs import AwsLogsHook

    hook = AwsLogsHook(aws_conn_id=CONN_ID)

    async def read() -> tuple[dict | None, dict]:
        streams = await hook.describe_log_streams_async(GROUP, finished + "/", "LogStreamName", 1)
        assert streams is not None
        async with await hook.get_async_conn() as client:
            page = await client.get_log_events(
                logGroupName=GROUP,
                logStreamName=streams["logStreams"][0]["logStreamName"],
                startTime=0,
                startFromHead=True,
            )
        missing = await hook.describe_log_streams_async(
            "/aws/sagemaker/NoSuchGroup", "x/", "LogStreamName", 1
        )
        return missing, page

    missing, page = asyncio.run(read())
    assert missing is None  # ResourceNotFoundException, which the async hook turns into None
    assert [e["message"] for e in page["events"]] == [line["line"] for line in file_lines(server, finished)]


def test_a_built_in_trainer_jobs_stream_holds_its_reports_from_its_start(logs, sm):
    """No program log: the stream is the job's events from its start, one line each."""
    name = unique("cwlogs-trainer")
    body = script_job(name)
    body["HyperParameters"] = {"epochs": "2", "seconds_per_epoch": "0"}
    sm.create_training_job(**body)
    assert wait(sm, name, ended, timeout=60)["TrainingJobStatus"] == "Completed"
    (stream,) = logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix=name + "/")["logStreams"]
    messages = [
        e["message"]
        for e in logs.get_log_events(
            logGroupName=GROUP, logStreamName=stream["logStreamName"], startFromHead=True
        )["events"]
    ]
    shapes = [
        r"Trainer process \d+ started on 1 GPU\(s\)", "Training started",
        r"Epoch 1 complete: val_accuracy=0\.\d+", "Checkpoint ckpt_epoch_1 saved",
        r"Epoch 2 complete: val_accuracy=0\.\d+", "Checkpoint ckpt_epoch_2 saved",
        "Training complete", "Job completed",
    ]  # fmt: skip
    assert len(messages) == len(shapes) and all(map(re.fullmatch, shapes, messages)), messages


class OneJobEngine:
    """A stand-in for ``TrainingEngine`` holding one started script-mode job whose log file has
    ``lines`` (``(t, text)`` pairs): just what :class:`CloudWatchLogs` reads."""

    def __init__(self, lines: list[tuple[float, str]]):
        self.lines = lines
        self.rec = {
            "job_id": "big",
            "platform": "sagemaker",
            "user_code": True,
            "started_at": 1000.0,
            "request": {"HyperParameters": script_hyperparameters()},
        }

    def get(self, job_id: str, platform: str | None = None) -> dict:
        return self.rec

    def list(self, platform: str | None = None) -> list[dict]:
        return [self.rec]

    def read_log(self, job_id: str, start: int = 0, limit: int = 1000, platform: str | None = None) -> dict:
        page = [{"t": t, "line": text} for t, text in self.lines[start : start + limit]]
        return {"lines": page, "next": start + len(page)}


def test_a_page_holds_at_most_1_mb_and_an_oversized_line_goes_alone():
    from airflow_training_platform.platforms.sagemaker.cloudwatch_logs import CloudWatchLogs

    kb300, mb2 = "x" * 300_000, "y" * 2_000_000
    engine = OneJobEngine([(1000.0 + i, text) for i, text in enumerate([kb300] * 4 + [mb2, "", "end"])])
    logs = CloudWatchLogs(engine, "us-east-1")
    stream = {"logGroupName": GROUP, "logStreamName": "big/algo-1-1000"}
    sizes, token = [], None
    while True:
        page = logs.get_log_events(
            {**stream, "startFromHead": True, **({"nextToken": token} if token else {})}
        )
        if page["nextForwardToken"] == token:
            break
        sizes.append([len(e["message"]) for e in page["events"]])
        token = page["nextForwardToken"]
    assert sizes == [[300_000] * 3, [300_000], [2_000_000], [3]]  # the empty line is no event
    latest = logs.get_log_events({**stream, "limit": 3})
    assert [len(e["message"]) for e in latest["events"]] == [3]  # the 2 MB line would not fit beside it
    assert latest["nextBackwardToken"] == "b/6" and latest["nextForwardToken"] == "f/7"
    assert [e["timestamp"] for e in logs.get_log_events({**stream, "startTime": 1_005_000})["events"]] == [
        1_006_000
    ]
