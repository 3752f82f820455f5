"""Program logs (``stream_logs``), pure logic: the SageMaker dialect's CloudWatch Logs requests and
pages (docs/platforms/sagemaker.md, "Program logs"), the companion service's endpoint and SigV4
scope, the shared follow (bounded pages, cursor kept on failure, one warning), masking and cutting
of lines. No I/O."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from airflow_training_provider.errors import JobNotFoundError, PlatformAuthError, TrainingPlatformError
from airflow_training_provider.hooks.transport import prepare_request
from airflow_training_provider.lifecycle.operations import (
    LOG_PAGES_PER_POLL,
    JobOperations,
    LogFollow,
    NewLogLines,
    advance,
)
from airflow_training_provider.models import JobState, TrainingJob
from airflow_training_provider.platforms.base import (
    ApiRequest,
    Capabilities,
    Credentials,
    Dialect,
    LogPage,
)
from airflow_training_provider.platforms.sagemaker import SageMakerDialect
from airflow_training_provider.program_logs import MAX_LINE_CHARS, SecretLines, secret_references, shown
from airflow_training_provider.spec_secrets import connection_secret, variable_secret

D = SageMakerDialect()
JOB = TrainingJob(id="af-demo-1", platform="sagemaker", state=JobState.RUNNING, raw_status="InProgress")
STREAM = "af-demo-1/algo-1-1740823320"


def test_sagemaker_finds_the_jobs_stream_then_reads_it_from_the_head():
    first = D.logs_request(JOB, None)
    assert (first.service, first.headers["X-Amz-Target"]) == ("logs", "Logs_20140328.DescribeLogStreams")
    assert first.body == {
        "logGroupName": "/aws/sagemaker/TrainingJobs",
        "logStreamNamePrefix": "af-demo-1/",
        "orderBy": "LogStreamName",
        "limit": 1,
    }
    assert D.parse_logs({"logStreams": []}, None) == LogPage((), None, False), "no stream yet"
    found = D.parse_logs({"logStreams": [{"logStreamName": STREAM, "creationTime": 1}]}, None)
    assert found.lines == () and found.more and json.loads(found.cursor) == {"stream": STREAM, "token": None}
    read = D.logs_request(JOB, found.cursor)
    assert read.headers["X-Amz-Target"] == "Logs_20140328.GetLogEvents"
    assert read.body == {
        "logGroupName": "/aws/sagemaker/TrainingJobs",
        "logStreamName": STREAM,
        "startFromHead": True,
        "limit": 1000,
    }
    page = D.parse_logs(
        {
            "events": [
                {"timestamp": 1, "message": "epoch=1\n", "ingestionTime": 2},
                {"timestamp": 3, "message": "b"},
            ],
            "nextForwardToken": "f/2",
            "nextBackwardToken": "b/0",
        },
        found.cursor,
    )
    assert page.lines == ("epoch=1", "b") and page.more
    assert D.logs_request(JOB, page.cursor).body["nextToken"] == "f/2"
    end = D.parse_logs({"events": [], "nextForwardToken": "f/2", "nextBackwardToken": "b/2"}, page.cursor)
    assert end == LogPage((), page.cursor, False), "the same token back: the end of the stream for now"


@pytest.mark.parametrize(
    "body", [{}, {"logStreams": "x"}, {"events": "x", "nextForwardToken": "f/1"}, {"events": []}]
)
def test_sagemaker_log_answers_of_another_shape_raise(body):
    cursor = json.dumps({"stream": STREAM, "token": None}) if "events" in body else None
    with pytest.raises((KeyError, TypeError)):
        D.parse_logs(body, cursor)


def test_a_missing_log_group_or_stream_is_not_found_not_a_failure():
    error = D.classify_error(
        400,
        {},
        {"__type": "ResourceNotFoundException", "message": "The specified log stream does not exist."},
    )
    assert isinstance(error, JobNotFoundError)


def test_the_log_calls_go_to_the_logs_endpoint_signed_for_the_logs_service():
    creds = Credentials(access_key_id="AKIDEXAMPLE", secret_access_key="s3cr3t", region="eu-west-1")
    urls = {"logs": "https://logs.eu-west-1.amazonaws.com"}
    http = prepare_request(
        D, "https://api.sagemaker.eu-west-1.amazonaws.com", D.logs_request(JOB, None), creds, urls
    )
    assert http.url == "https://logs.eu-west-1.amazonaws.com/"
    assert "/eu-west-1/logs/aws4_request" in http.headers["Authorization"]
    job_call = prepare_request(
        D, "https://api.sagemaker.eu-west-1.amazonaws.com", D.get_request("j"), creds, urls
    )
    assert "/eu-west-1/sagemaker/aws4_request" in job_call.headers["Authorization"]
    with pytest.raises(TrainingPlatformError, match="no endpoint for service 'logs'"):
        prepare_request(D, "https://h", D.logs_request(JOB, None), creds)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"region_name": "eu-west-1"}, "https://logs.eu-west-1.amazonaws.com"),
        ({"region_name": "us-east-1", "endpoint_url": "http://127.0.0.1:9"}, "http://127.0.0.1:9"),
        (
            {"region_name": "us-east-1", "endpoint_url": "http://127.0.0.1:9",
             "service_config": {"logs": {"endpoint_url": "http://127.0.0.1:7"}}},
            "http://127.0.0.1:7",
        ),
    ],
)  # fmt: skip
def test_the_aws_connection_names_the_logs_endpoint(extra, expected):
    from airflow.sdk.definitions.connection import Connection

    from airflow_training_provider.platforms.sagemaker import PLATFORM

    conn = Connection(conn_id="a", conn_type="aws", login="AKID", password="x", extra=json.dumps(extra))
    assert PLATFORM.connect(conn).service_urls == {"logs": expected}


# -- the shared follow ---------------------------------------------------------------------------
class Paged(Dialect):
    """A platform whose log is ``LINES``, two lines a page; the cursor is the lines read."""

    name = "paged"
    status_map = {"running": JobState.RUNNING}
    capabilities = Capabilities(program_logs=True)

    def logs_request(self, job: TrainingJob, cursor: str | None) -> ApiRequest:
        return ApiRequest("GET", f"/logs/{job.id}", params={"from": int(cursor or 0)})

    def parse_logs(self, body: Any, cursor: str | None) -> LogPage:
        start = int(cursor or 0)
        return LogPage(tuple(body["lines"]), str(start + len(body["lines"])), body["more"])

    # not used here
    spec_model = None  # type: ignore[assignment]
    with_tags = create_request = get_request = cancel_request = parse_created = parse_job = parse_cancel = (
        None  # type: ignore[assignment]
    )


LINES = [f"l{i}" for i in range(30)]


def follow(
    answer, cursor: str | None = None, pages: int = LOG_PAGES_PER_POLL, ops: JobOperations | None = None
):
    """Drive one follow; ``answer(request)`` gives a page body or an exception.
    → (reports, follow, whether it read to the end)."""
    ops = ops or JobOperations(Paged(), "http://h")
    logs = LogFollow(cursor)
    operation = ops.follow_log(JOB, logs, pages)
    reports, reply, error = [], None, None
    while True:
        done, step = advance(operation, reply, error)
        if done:
            return reports, logs, step
        reply = error = None
        if isinstance(step, ApiRequest):
            got = answer(step)
            if isinstance(got, BaseException):
                error = got
            else:
                reply = json.dumps(got).encode()
        else:
            reports.append(step)


def pages_of(request: ApiRequest) -> dict:
    start = request.params["from"]
    return {"lines": LINES[start : start + 2], "more": start + 2 < len(LINES)}


def test_a_poll_reads_a_bounded_number_of_pages_and_reports_them_at_once():
    reports, logs, complete = follow(pages_of)
    assert reports == [NewLogLines(tuple(LINES[:10]), "10")] and logs.cursor == "10" and not complete
    reports, logs, complete = follow(pages_of, logs.cursor, pages=50)
    assert reports == [NewLogLines(tuple(LINES[10:]), "30")] and complete, "the rest, from the cursor on"
    assert follow(pages_of, "30")[0] == [], "nothing new: no report"


def test_a_failed_page_keeps_what_was_read_before_it_and_warns_once(caplog):
    ops = JobOperations(Paged(), "http://h")
    refused = lambda r: pages_of(r) if r.params["from"] < 4 else PlatformAuthError("denied", status=403)  # noqa: E731
    with caplog.at_level(logging.WARNING):
        reports, logs, _ = follow(refused, ops=ops)
        again, _, _ = follow(refused, logs.cursor, ops=ops)
    assert reports == [NewLogLines(tuple(LINES[:4]), "4")] and again == []
    warnings = [r.getMessage() for r in caplog.records if "not readable" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith(
        "The program's log of job af-demo-1 is not readable (403"
    )


def test_no_log_yet_is_silent(caplog):
    with caplog.at_level(logging.WARNING):
        reports, logs, _ = follow(
            lambda r: JobNotFoundError("The specified log stream does not exist.", status=400)
        )
    assert reports == [] and logs.cursor is None and not caplog.records


def test_a_platform_without_program_logs_reads_nothing():
    from airflow_training_provider.platforms.tensorone import TensorOneDialect

    operation = JobOperations(TensorOneDialect(), "http://h").follow_log(JOB, LogFollow(), 5)
    assert advance(operation) == (True, True), "no request, no report: nothing left to read"


# -- lines as written --------------------------------------------------------------------------
def test_secrets_are_masked_longest_first_and_short_values_left_alone():
    secrets = SecretLines(["hunter2-long", "hunter2", "abc"])
    assert secrets.mask("pw=hunter2-long then hunter2 and abc") == "pw=*** then *** and abc"
    assert "hunter2" not in repr(secrets)


PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n  kgSjMIIEnwIBAAKCAQEAu1SU1LfVLPHC  \nab\n-----END PRIVATE KEY-----\n"


def test_each_line_of_a_multi_line_secret_is_masked_on_its_own():
    secrets = SecretLines([PEM], min_length=5)
    assert secrets.mask("key: kgSjMIIEnwIBAAKCAQEAu1SU1LfVLPHC") == "key: ***", "a stripped line of the value"
    assert secrets.mask("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC") == "***"
    assert secrets.mask("ab cd") == "ab cd", "a line shorter than the minimum is not masked"
    assert secrets.mask(PEM) == "***", "the whole value still masked whole (longest first)"


def test_the_minimum_length_is_airflows_setting_and_never_masked_words_are_skipped(monkeypatch):
    monkeypatch.setenv("AIRFLOW__LOGGING__MIN_LENGTH_MASKED_SECRET", "8")
    secrets = SecretLines(["seven77", "eight888", "Airflow", "airflow-pw"])
    line = "seven77 eight888 Airflow airflow-pw"
    assert secrets.mask(line) == "seven77 *** Airflow ***"
    monkeypatch.setenv("AIRFLOW__LOGGING__MIN_LENGTH_MASKED_SECRET", "3")
    assert SecretLines(["abc", "airflow", "AIRFLOW"]).mask("abc airflow AIRFLOW") == "*** airflow AIRFLOW"


def test_an_object_location_or_a_tag_is_not_a_secret_written_in_the_spec():
    from airflow_training_provider.spec_secrets import secret_values

    spec = {
        "CodeDir": {"LocationType": "oss", "LocationValue": {"Bucket": "code", "Key": "logs-pai/"}},
        "Tags": [{"Key": "team", "Value": "vision"}],
        "Environments": {"WANDB_KEY": "wandb-literal-1", "extra": {"Key": "still-a-secret"}},
    }
    assert secret_values(spec, None) == ["wandb-literal-1", "still-a-secret"]


def test_long_lines_are_cut_and_control_characters_replaced():
    assert shown("a\tb\x1b[31mc") == "a\tb�[31mc"
    cut = shown("y" * (MAX_LINE_CHARS + 5))
    assert cut == "y" * MAX_LINE_CHARS + "… [5 more characters]"


def test_a_line_that_was_not_utf8_or_holds_nul_is_written_safely():
    # a JSON log answer's "\udcff" (bytes that were not UTF-8, escaped) and a NUL byte
    line = json.loads('"loss \\udcff\\u0000 1.0"')
    text = shown(line)
    assert text == "loss \ufffd 1.0"
    text.encode("utf-8")  # a log file (and a JSON column) takes it


def test_the_trigger_gets_the_references_never_the_values():
    spec = {
        "Environment": {
            "A": connection_secret("db"),
            "B": variable_secret("tok"),
            "C": connection_secret("db"),
        }
    }
    assert secret_references(spec) == [{"conn_id": "db"}, {"variable": "tok"}]


# -- PAI and ModelArts ---------------------------------------------------------------------------
def test_pai_reads_the_page_holding_the_first_unread_line():
    from airflow_training_provider.platforms.pai import LOG_PAGE_SIZE, PaiDialect

    pai = PaiDialect()
    job = JOB.model_copy(update={"id": "dlc-1", "platform": "pai"})
    first = pai.logs_request(job, None)
    assert (first.method, first.path, first.headers["x-acs-action"]) == (
        "GET",
        "/api/v1/trainingjobs/dlc-1/logs",
        "ListTrainingJobLogs",
    )
    assert first.params == {"PageNumber": 1, "PageSize": LOG_PAGE_SIZE}
    lines = [f"l{i}" for i in range(LOG_PAGE_SIZE + 30)]
    page1 = pai.parse_logs({"RequestId": "r", "TotalCount": "130", "Logs": lines[:LOG_PAGE_SIZE]}, None)
    assert page1.lines == tuple(lines[:LOG_PAGE_SIZE]) and page1.cursor == "100" and page1.more
    assert pai.logs_request(job, page1.cursor).params["PageNumber"] == 2
    page2 = pai.parse_logs({"TotalCount": "130", "Logs": lines[LOG_PAGE_SIZE:]}, page1.cursor)
    assert page2 == LogPage(tuple(lines[LOG_PAGE_SIZE:]), "130", False)
    again = pai.parse_logs({"TotalCount": "132", "Logs": [*lines[LOG_PAGE_SIZE:], "a", "b\n"]}, page2.cursor)
    assert again == LogPage(("a", "b"), "132", False), "the same page re-read: only the lines past the cursor"
    assert pai.parse_logs({"TotalCount": "0", "Logs": None}, None) == LogPage((), "0", False)
    error = pai.classify_error(404, {}, {"Code": "TRAINING_JOB_INSTANCE_NOT_FOUND", "Message": "no instance"})
    assert isinstance(error, JobNotFoundError), "before the job's instance started: no logs yet"
    with pytest.raises(TypeError):
        pai.parse_logs({"Logs": "x"}, None)


def modelarts_job(tasks: list[str]) -> dict:
    return {"metadata": {"id": "ma-1", "name": "n"}, "status": {"phase": "Running", "tasks": tasks}}


def preview(text: str, limit: int | None = None) -> dict:
    whole = text.encode()
    part = whole if limit is None or len(whole) <= limit else whole[len(whole) - limit :]
    return {"content": part.decode(), "current_size": len(part), "full_size": len(whole)}


def test_modelarts_finds_the_task_then_reads_whole_lines_of_its_log_preview():
    from airflow_training_provider.platforms.modelarts import ModelArtsDialect

    ma = ModelArtsDialect()
    job = JOB.model_copy(update={"id": "ma-1", "platform": "modelarts"})
    assert ma.logs_request(job, None).path == "/training-jobs/ma-1"
    assert ma.parse_logs(modelarts_job([]), None) == LogPage((), None, False), "no task yet"
    found = ma.parse_logs(modelarts_job(["worker-0", "worker-1"]), None)
    assert found.more and json.loads(found.cursor) == {"task": "worker-0", "bytes": 0}
    read = ma.logs_request(job, found.cursor)
    assert (read.method, read.path) == ("GET", "/training-jobs/ma-1/tasks/worker-0/logs/preview")
    page = ma.parse_logs(preview("a\nb\nc-still-being-writ"), found.cursor)
    assert page.lines == ("a", "b") and not page.more and json.loads(page.cursor)["bytes"] == 4
    page = ma.parse_logs(preview("a\nb\nc-still-being-written\nd\n"), page.cursor)
    assert page.lines == ("c-still-being-written", "d")
    assert ma.parse_logs(preview("a\nb\nc-still-being-written\nd\n"), page.cursor).lines == ()


def test_modelarts_past_the_previews_limit_says_what_was_skipped():
    from airflow_training_provider.platforms.modelarts import ModelArtsDialect

    ma = ModelArtsDialect()
    start = json.dumps({"task": "worker-0", "bytes": 4})  # "a\nb\n" read
    page = ma.parse_logs(preview("a\nb\nccc\nddd\neee\n", limit=8), start)  # the window: "ddd\neee\n"
    assert page.lines == ("[4 bytes of the log not shown: past the log preview's size limit]", "ddd", "eee")
    assert json.loads(page.cursor)["bytes"] == 16
    with pytest.raises((KeyError, TypeError)):
        ma.parse_logs({"content": 1, "current_size": 1, "full_size": 1}, start)
