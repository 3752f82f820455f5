"""ModelArts task logs on the local platform, read with Huawei's own client
(``huaweicloudsdkmodelarts``: ``show_training_job_logs_preview``, ``show_training_job_logs_from_aom``)
and, for the temporary link (the SDK has no request class for ``…/logs/url``), plain HTTP with an
IAM token: a user-code job's lines (the boot file running ``tests/data/user_code/train.py``) while
it runs and after it ended, paging through the AOM lines both ways, the empty log of a queued job,
an unknown job and an unknown task. No mocks (the 5 MB cut is shown on :func:`logs.preview` itself).

One GPU: the second job waits in the queue while the first runs.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from huaweicloudsdkcore.exceptions.exceptions import ClientRequestException
from huaweicloudsdkmodelarts.v1 import ModelArtsClient
from huaweicloudsdkmodelarts.v1 import model as m

from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.engine.programs import read_log
from airflow_training_platform.platforms.modelarts import logs as ma_logs
from airflow_training_platform.server import LocalPlatformServer
from tests.conftest import MODELARTS_PROJECT_ID, server_options
from tests.local_platform.test_modelarts_api import client
from tests.local_platform.test_modelarts_user_code import ENDED, create, unique, wait
from tests.modelarts_user_code import algorithm, put_code_and_data

EPOCHS = 4
TASK = "worker-0"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalPlatformServer(
        str(tmp_path_factory.mktemp("ma-logs")),
        gpus=1,
        log_level="warning",
        allow_user_code=True,
        **server_options(),
    ) as srv:
        put_code_and_data(srv.data_dir)
        yield srv


@pytest.fixture(scope="module")
def ma(server) -> ModelArtsClient:
    return client(server)


def preview(ma: ModelArtsClient, job_id: str, task: str = TASK):
    return ma.show_training_job_logs_preview(
        m.ShowTrainingJobLogsPreviewRequest(training_job_id=job_id, task_id=task)
    )


def aom(ma: ModelArtsClient, job_id: str, task: str = TASK, **query):
    return ma.show_training_job_logs_from_aom(
        m.ShowTrainingJobLogsFromAomRequest(training_job_id=job_id, task_id=task, **query)
    )


def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_a_user_code_jobs_log_reads_back_complete_and_in_order(ma, server):
    control = LocalPlatformControl(server.url)
    name = unique("ma-logs")
    job_id = create(ma, name, algorithm(f"/out/{name}", epochs=EPOCHS, seconds_per_epoch=0.5))
    queued = unique("ma-queued")
    queued_id = create(ma, queued, algorithm(f"/out/{queued}", epochs=1))
    assert ma.show_training_job_details(
        m.ShowTrainingJobDetailsRequest(training_job_id=job_id)
    ).status.tasks == [TASK]

    # the queued job has not started: its task's log is empty (not an error)
    empty = preview(ma, queued_id)
    assert (empty.content, empty.current_size, empty.full_size) == ("", 0, 0)
    assert aom(ma, queued_id).lines == 0

    # while it runs: the lines so far
    deadline = time.monotonic() + 20
    while not (early := preview(ma, job_id)).content.startswith("epoch=1 "):
        assert time.monotonic() < deadline, early.content
        time.sleep(0.1)
    assert wait(ma, job_id, ("Running",)).status.phase == "Running"

    job = wait(ma, job_id, ENDED)
    assert job.status.phase == "Completed", job.status.task_statuses
    record = control.job(job_id)
    written = [entry["line"] for entry in read_log(record["program"]["log_file"], 0, 10_000)["lines"]]
    wanted = [x for e in range(1, EPOCHS + 1) for x in (f"epoch={e} ", f"progress {e}/{EPOCHS}")]
    assert len(written) == 2 * EPOCHS + 1 and all(
        map(str.startswith, written, wanted + ["training complete"])
    )
    text = "".join(line + "\n" for line in written)
    assert text.startswith(early.content)  # what was read while running was the log's beginning

    # preview: the whole log while small
    whole = preview(ma, job_id)
    size = len(text.encode())
    assert (whole.content, whole.current_size, whole.full_size) == (text, size, size)

    # the temporary link: the whole log as a file, no signature needed; a tampered link is refused
    status, body = http_get(
        f"{server.url}/v2/{MODELARTS_PROJECT_ID}/training-jobs/{job_id}/tasks/{TASK}/logs/url",
        {"X-Auth-Token": "iam-token"},
    )
    assert status == 200, body
    link = json.loads(body)["obs_url"]
    assert f"/modelarts-job-{job_id}-{TASK}.log?" in link
    assert http_get(link) == (200, text.encode())
    assert http_get(link.replace("Signature=", "Signature=0"))[0] == 403

    # AOM lines: newest first by default, 50 lines; paging with base_line = end_line, both ways
    newest = aom(ma, job_id)
    n = len(written)
    assert (newest.start_line, newest.end_line, newest.lines) == (str(n), "1", n)
    assert newest.content == "".join(line + "\n" for line in reversed(written))
    back, base = [], None
    while (page := aom(ma, job_id, lines=2, **({"base_line": base} if base else {}))).lines:
        back += page.content.splitlines()
        base = page.end_line
    assert back == list(reversed(written))
    forward, base = [], "0"
    while (page := aom(ma, job_id, lines=3, order="asc", base_line=base)).lines:
        forward += page.content.splitlines()
        base = page.end_line
    assert forward == written and base == str(n)
    middle = aom(ma, job_id, lines=2, order="asc", base_line="3")
    assert (middle.start_line, middle.end_line, middle.content) == (
        "4",
        "5",
        written[3] + "\n" + written[4] + "\n",
    )

    assert wait(ma, queued_id, ENDED).status.phase == "Completed"
    assert preview(ma, queued_id).content.endswith("training complete\n")


def test_an_unknown_job_or_task_is_modelarts_error(ma, server):
    with pytest.raises(ClientRequestException) as caught:
        preview(ma, "00000000-0000-0000-0000-000000000000")
    assert (caught.value.status_code, caught.value.error_code) == (404, "ModelArts.2762")
    name = unique("ma-task")
    job_id = create(ma, name, algorithm(f"/out/{name}", epochs=1))
    for call in (preview, aom):
        with pytest.raises(ClientRequestException) as caught:
            call(ma, job_id, task="worker-9")
        assert (caught.value.status_code, caught.value.error_code) == (400, "ModelArts.0101")
        assert "worker-9" in caught.value.error_msg
    with pytest.raises(ClientRequestException) as caught:
        aom(ma, job_id, lines=501)
    assert (caught.value.status_code, caught.value.error_code) == (400, "ModelArts.0101")
    wait(ma, job_id, ENDED)


def test_a_log_over_the_preview_limit_is_cut_to_its_latest_whole_lines():
    text = "".join(f"line {i:03d}\n" for i in range(100))  # 9 bytes a line
    cut = ma_logs.preview(text, limit=40)
    assert cut == {
        "content": "line 096\nline 097\nline 098\nline 099\n",
        "current_size": 36,
        "full_size": 900,
    }
    assert ma_logs.preview(text, limit=900)["content"] == text
    assert ma_logs.PREVIEW_BYTES == 5 * 1024 * 1024
