"""One rule for an answer a dialect cannot read: whatever its parser raises (``KeyError``,
``TypeError``, ``AttributeError``, ``ValueError``, pydantic's ``ValidationError``), the call failed
with a :class:`MalformedResponseError` (transient), through :func:`parse_answer`. Canned answers,
no socket (the waits against the local platform: ``tests/inprocess/test_malformed_answers_inprocess.py``)."""

from __future__ import annotations

import json
import logging

import pytest
from pydantic import BaseModel

from airflow_training_provider.cancellation import CancelPolicy
from airflow_training_provider.errors import MalformedResponseError, TransientPlatformError
from airflow_training_provider.hooks.transport import decode_response
from airflow_training_provider.lifecycle.operations import JobOperations
from airflow_training_provider.lifecycle.waiting import JobFinished, LostContact, Polling, wait_for_job
from airflow_training_provider.models import CancelRequest, JobState, TrainingJob
from airflow_training_provider.platforms.base import ApiRequest, parse_answer
from airflow_training_provider.platforms.tensorone import TensorOneDialect
from airflow_training_provider.platforms.together import TogetherDialect
from tests.unit.canned import Canned

T1 = "/v2/training/jobs/j1"
GET = ApiRequest("GET", T1)


class _Strict(BaseModel):
    status: str


def _key_error(body):
    return body["status"]


def _type_error(body):
    return body + 1


def _attribute_error(body):
    return body.strip()


def _value_error(body):
    return int(body)


def _validation_error(body):
    return _Strict.model_validate(body)


@pytest.mark.parametrize(
    ("parse", "answer", "says"),
    [
        (_key_error, {}, "field 'status' is missing"),
        (_type_error, {}, "TypeError: unsupported operand"),
        (_attribute_error, {}, "AttributeError: 'dict' object has no attribute 'strip'"),
        (_value_error, "ten", "ValueError: invalid literal"),
        (_validation_error, {}, "1 validation error for _Strict (field 'status': Field required)"),
    ],
    ids=["KeyError", "TypeError", "AttributeError", "ValueError", "ValidationError"],
)
def test_any_parse_error_is_a_malformed_answer_naming_the_call(parse, answer, says):
    with pytest.raises(MalformedResponseError) as err:
        parse_answer(GET, parse, answer)
    assert isinstance(err.value, TransientPlatformError) and err.value.sent
    assert err.value.message.startswith(f"malformed answer to GET {T1}: {says}")
    assert isinstance(err.value.__cause__, Exception), "the parser's own error is kept"


def test_the_transport_reads_a_body_through_the_wrapper_with_its_status():
    request = ApiRequest("GET", T1, reader=lambda raw: _key_error({}))
    with pytest.raises(MalformedResponseError, match="field 'status' is missing") as err:
        decode_response(TensorOneDialect(), request, 200, {}, b"{}")
    assert err.value.status == 200
    with pytest.raises(MalformedResponseError, match="malformed answer to GET"):
        decode_response(TensorOneDialect(), GET, 200, {}, b"<html>proxy</html>")  # no reader: not JSON


class _HandRead(TensorOneDialect):
    """Reads by hand: a missing field is a ``KeyError``."""

    def read_poll(self, raw):
        body = json.loads(raw)
        return TrainingJob(
            id=body["jobId"], platform=self.name, state=self.map_status(body["status"]), raw_status=""
        )

    def parse_created(self, body):
        return self.read_poll(json.dumps(body))

    def parse_cancel(self, job_id, body):
        return body["cancellation"]


def test_a_poll_the_dialect_cannot_read_is_a_failed_poll_not_a_crashed_wait():
    # the canned driver does not retry (the hooks do, within the outage budget): one failure loses contact
    canned = Canned({("GET", T1): [{"jobId": "j1"}]})
    ops = JobOperations(_HandRead(), "http://p", canned.clock)
    outcome = canned.drive(
        wait_for_job(ops, "j1", Polling(poll_interval=1, outage_budget=60), CancelPolicy())
    )
    assert isinstance(outcome, LostContact) and "field 'status' is missing" in outcome.message


def test_once_readable_the_wait_goes_on_to_the_jobs_outcome():
    canned = Canned(
        {("GET", T1): [{"jobId": "j1", "status": "running"}, {"jobId": "j1", "status": "completed"}]}
    )
    ops = JobOperations(_HandRead(), "http://p", canned.clock)
    outcome = canned.drive(
        wait_for_job(ops, "j1", Polling(poll_interval=1, outage_budget=60), CancelPolicy())
    )
    assert isinstance(outcome, JobFinished) and outcome.job.state is JobState.SUCCEEDED


def test_a_create_or_cancel_answer_the_dialect_cannot_read_is_malformed_not_a_key_error():
    canned = Canned(
        {
            ("POST", "/v2/training/jobs"): [{"jobId": "j1"}],
            ("GET", T1): [{"jobId": "j1", "status": "running"}],
            ("POST", T1 + "/cancel"): [{"no": "cancellation"}],
        }
    )
    ops = JobOperations(_HandRead(), "http://p", canned.clock)
    with pytest.raises(
        MalformedResponseError, match="malformed answer to POST /v2/training/jobs: field 'status'"
    ):
        canned.drive(ops.create_job({"name": "n"}))
    with pytest.raises(MalformedResponseError, match=f"POST {T1}/cancel: field 'cancellation' is missing"):
        canned.drive(ops.cancel_job("j1", CancelRequest()))


def test_an_auxiliary_read_whose_parser_raises_attribute_error_is_left_out(caplog):
    class Events(TogetherDialect):
        def parse_events(self, body):
            return [event.strip() for event in body]  # an int has no .strip()

    ft = "/v1/fine-tunes/ft-1"
    canned = Canned(
        {
            ("GET", ft): [{"id": "ft-1", "status": "running"}],
            ("GET", ft + "/events"): [[1, 2]],
            ("GET", ft + "/checkpoints"): [{"data": []}],
            ("GET", ft + "/metrics"): [{"metrics": []}],
        }
    )
    ops = JobOperations(Events(), "http://p", canned.clock)
    with caplog.at_level(logging.WARNING, logger="airflow_training_provider.lifecycle.operations"):
        job = canned.drive(ops.snapshot("ft-1"))
    assert job.events == [] and job.state is JobState.RUNNING
    assert "malformed answer to GET /v1/fine-tunes/ft-1/events: AttributeError" in caplog.text
