"""The in-process tier: operators, sensor and trigger run in this process (``testing.inprocess``)
against a real local platform over HTTP with real trainer processes — no scheduler, triggerer or
database. Fast, and judged by the platform's own records."""

from __future__ import annotations

import os

import pytest

from airflow_training_devel.local_fixtures import LOCAL_FIXTURES, connection_env
from airflow_training_platform.control import LocalPlatformControl


@pytest.fixture(scope="session")
def control(platform) -> LocalPlatformControl:
    """The session platform's ``/_local`` client; connections ``tensorone_local``, ``together_local``,
    ``aws_local`` (SageMaker), ``pai_local`` and ``modelarts_local`` point at it."""
    os.environ.update(connection_env(platform.url))
    for conn_type in ("tensorone", "together"):
        # a trailing slash on the host, as users write it: both drivers must build the same URLs
        fixture = LOCAL_FIXTURES[conn_type]
        os.environ[f"AIRFLOW_CONN_{fixture.conn_id.upper()}"] = fixture.connection_json(platform.url + "/")
    return LocalPlatformControl(platform.url)
