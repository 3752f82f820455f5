"""The in-process tier: operators, sensor and trigger run in this process (``testing.inprocess``)
against a real local platform over HTTP with real trainer processes — no scheduler, triggerer or
database. Fast, and judged by the platform's own records."""

from __future__ import annotations

import json
import os

import pytest

from airflow_training_platform.control import LocalPlatformControl
from tests.conftest import API_KEY, aws_connection, modelarts_connection, pai_connection

PLATFORM_CONNS = ("tensorone", "together")


@pytest.fixture(scope="session")
def control(platform) -> LocalPlatformControl:
    """The session platform's ``/_local`` client; connections ``tensorone_local``, ``together_local``,
    ``aws_local`` (SageMaker), ``pai_local`` and ``modelarts_local`` point at it."""
    for conn_type in PLATFORM_CONNS:
        # a trailing slash on the host, as users write it: both drivers must build the same URLs
        value = json.dumps({"conn_type": conn_type, "host": platform.url + "/", "password": API_KEY})
        os.environ[f"AIRFLOW_CONN_{conn_type.upper()}_LOCAL"] = value
    os.environ["AIRFLOW_CONN_AWS_LOCAL"] = aws_connection(platform.url)
    os.environ["AIRFLOW_CONN_PAI_LOCAL"] = pai_connection(platform.url)
    os.environ["AIRFLOW_CONN_MODELARTS_LOCAL"] = modelarts_connection(platform.url)
    return LocalPlatformControl(platform.url)
