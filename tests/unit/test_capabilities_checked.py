"""A dialect that declares a capability fails when its class is defined (at import) unless it
overrides the methods that serve it; so does one overriding a request without the parser of its
answer. Every registered platform passes."""

from __future__ import annotations

import importlib
import textwrap
from typing import Any

import pytest

from airflow_training_provider.platforms import PLATFORMS
from airflow_training_provider.platforms.base import ApiRequest, Capabilities, Dialect
from airflow_training_provider.platforms.tensorone import TensorOneDialect


def test_declaring_events_without_their_endpoint_fails_naming_class_flag_and_methods():
    with pytest.raises(TypeError) as err:

        class EventfulTensorOne(TensorOneDialect):
            capabilities = Capabilities(events=True, list_jobs=True)

    message = str(err.value)
    assert "EventfulTensorOne declares capabilities.events" in message
    assert "events_request, parse_events" in message


def test_the_module_defining_such_a_dialect_fails_to_import(tmp_path, monkeypatch):
    (tmp_path / "acme_dialect.py").write_text(
        textwrap.dedent(
            """
            from airflow_training_provider.platforms.base import Capabilities
            from airflow_training_provider.platforms.tensorone import TensorOneDialect

            class AcmeDialect(TensorOneDialect):
                capabilities = Capabilities(events=True)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TypeError, match=r"^acme_dialect\.AcmeDialect declares capabilities\.events but"):
        importlib.import_module("acme_dialect")


def test_events_in_the_job_object_need_no_events_endpoint():
    class EventsInJob(TensorOneDialect):
        capabilities = Capabilities(events=True, events_in_job=True, list_jobs=True)

    assert EventsInJob.capabilities.events


@pytest.mark.parametrize(
    ("capabilities", "flag", "missing"),
    [
        (Capabilities(list_jobs=True), "list_jobs", "list_request, parse_list"),
        (Capabilities(program_logs=True), "program_logs", "logs_request, parse_logs"),
        (
            Capabilities(checkpoints_in_job=False),
            "checkpoints_in_job=False",
            "checkpoints_request, parse_checkpoints",
        ),
    ],
)
def test_a_bare_dialect_declaring_a_capability_fails(capabilities, flag, missing):
    with pytest.raises(
        TypeError, match=rf"Bare declares capabilities\.{flag} but does not override {missing}"
    ):
        type("Bare", (Dialect,), {"name": "bare", "capabilities": capabilities})


def test_half_of_a_capability_names_only_the_missing_method():
    with pytest.raises(
        TypeError, match=r"declares capabilities\.list_jobs but does not override parse_list, which serves it"
    ):

        class ListsWithoutParsing(Dialect):
            capabilities = Capabilities(list_jobs=True)

            def list_request(self, tags: list[str], created_after: Any = None) -> ApiRequest:
                return ApiRequest("GET", "/jobs")


def test_a_request_overridden_without_its_parser_fails():
    with pytest.raises(TypeError, match="HalfMetrics overrides metrics_request but not parse_metrics"):

        class HalfMetrics(TensorOneDialect):
            def metrics_request(self, job_id: str) -> ApiRequest:
                return ApiRequest("GET", f"/v2/training/jobs/{job_id}/metrics")


@pytest.mark.parametrize("conn_type", sorted(PLATFORMS))
def test_every_registered_platform_serves_what_it_declares(conn_type):
    dialect = PLATFORMS[conn_type].dialect
    for methods in dialect.capabilities.served_by().values():
        assert all(dialect._overrides(m) for m in methods)
