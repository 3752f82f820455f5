"""PAI ``ListTrainingJobLogs`` on the local platform, read with Alibaba's own client
(``alibabacloud-paistudio20220112``, ``Client.list_training_job_logs``): a user-code job's lines
(``tests/data/user_code/train.py`` as a ``Command`` + ``CodeDir`` job) while it runs and after it
ended, paging, the "no instance yet" answer of a queued job, an unknown job. No mocks.

One GPU: the second job waits in the queue while the first runs.
"""

from __future__ import annotations

import time

import pytest
from alibabacloud_paistudio20220112 import models
from alibabacloud_paistudio20220112.client import Client
from Tea.exceptions import TeaException

from airflow_training_devel.user_code import put_pai_code_and_data
from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.engine.programs import read_log
from airflow_training_platform.server import LocalPlatformServer
from tests.conftest import server_options
from tests.local_platform.test_pai_api import client
from tests.local_platform.test_pai_user_code import ended, request, unique, wait

EPOCHS = 4


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalPlatformServer(
        str(tmp_path_factory.mktemp("pai-logs")),
        gpus=1,
        log_level="warning",
        allow_user_code=True,
        **server_options(),
    ) as srv:
        put_pai_code_and_data(srv.data_dir)
        yield srv


@pytest.fixture(scope="module")
def pai(server) -> Client:
    return client(server)


def logs(pai: Client, job_id: str, **query) -> models.ListTrainingJobLogsResponseBody:
    return pai.list_training_job_logs(job_id, models.ListTrainingJobLogsRequest(**query)).body


def every_line(pai: Client, job_id: str, page_size: int) -> list[str]:
    """All lines, page by page, as the pai SDK's log printer pages."""
    out: list[str] = []
    page = 1
    while True:
        body = logs(pai, job_id, page_number=page, page_size=page_size)
        out += body.logs
        if len(body.logs) < page_size:
            return out
        page += 1


def test_a_user_code_jobs_lines_read_back_in_order_while_it_runs_and_after_the_end(pai, server):
    control = LocalPlatformControl(server.url)
    running_id = pai.create_training_job(request(unique("logs"), epochs=EPOCHS, seconds_per_epoch=0.5)).body
    running_id = running_id.training_job_id
    queued_id = pai.create_training_job(request(unique("queued"), epochs=1)).body.training_job_id

    # the second job waits for the one GPU: no instance yet, the error the pai SDK reads as "no logs yet"
    with pytest.raises(TeaException) as caught:
        logs(pai, queued_id)
    assert caught.value.code == "TRAINING_JOB_INSTANCE_NOT_FOUND"
    assert caught.value.statusCode == 404

    # while it runs: what has been written so far, in order
    deadline = time.monotonic() + 20
    while not (seen := logs(pai, running_id, page_size=100)).logs or not seen.logs[0].startswith("epoch=1 "):
        assert time.monotonic() < deadline, seen.logs
        time.sleep(0.1)
    assert pai.get_training_job(running_id).body.status == "Running"
    assert int(seen.total_count) == len(seen.logs) < 2 * EPOCHS + 1

    job = wait(pai, running_id, ended)
    assert job.status == "Succeed", job.reason_message
    # after the end: every line of the program's log file, complete and in order
    record = control.job(running_id)
    written = [entry["line"] for entry in read_log(record["program"]["log_file"], 0, 10_000)["lines"]]
    wanted = [x for e in range(1, EPOCHS + 1) for x in (f"epoch={e} ", f"progress {e}/{EPOCHS}")]
    assert len(written) == 2 * EPOCHS + 1 and all(
        map(str.startswith, written, wanted + ["training complete"])
    )
    whole = logs(pai, running_id)
    assert whole.logs == written and whole.total_count == str(len(written))
    assert seen.logs == written[: len(seen.logs)]  # what was read while running was a prefix

    # paging: PageSize 3 pages through the same lines; a page past the end is empty
    assert every_line(pai, running_id, page_size=3) == written
    assert logs(pai, running_id, page_number=2, page_size=3).logs == written[3:6]
    assert logs(pai, running_id, page_number=99, page_size=3).logs == []
    # the one instance by its id; another instance has none
    instance = f"{running_id}-master-0"
    assert logs(pai, running_id, instance_id=instance).logs == written
    with pytest.raises(TeaException) as caught:
        logs(pai, running_id, instance_id=f"{running_id}-worker-7")
    assert caught.value.code == "TRAINING_JOB_INSTANCE_NOT_FOUND"
    # a time window after the last line holds none of them
    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 5))
    empty = logs(pai, running_id, start_time=later)
    assert empty.logs == [] and empty.total_count == "0"

    # the queued job ran once the GPU was free: its lines are there now
    assert wait(pai, queued_id, ended).status == "Succeed"
    assert logs(pai, queued_id).logs[-1] == "training complete"


def test_an_unknown_job_is_pais_not_found_error(pai):
    with pytest.raises(TeaException) as caught:
        logs(pai, "trainnosuchjob")
    assert caught.value.code == "EntityNotExist.TrainingJob"
    assert caught.value.statusCode == 404


def test_a_built_in_trainer_jobs_lines_are_its_events_from_its_start(pai, server):
    """The same lines SageMaker's CloudWatch stream holds for such a job (``engine/job_log.py``)."""
    body = request(unique("builtin"), code=False, data_uri="oss://b/iris/", epochs=2, seconds_per_epoch=0.1)
    job_id = pai.create_training_job(body).body.training_job_id
    assert wait(pai, job_id, ended).status == "Succeed"
    record = LocalPlatformControl(server.url).job(job_id)
    assert record["program"] is None  # the built-in trainer, not user code
    events = [
        e["message"] for e in record["events"] if e["created_at"] >= record["started_at"] and e["message"]
    ]
    lines = logs(pai, job_id).logs
    assert lines == events and "Training complete" in lines
    assert any(line.startswith("Epoch 2 complete: val_accuracy=") for line in lines)
