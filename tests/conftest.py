"""Shared fixtures: a real local training platform on 127.0.0.1, started and stopped by PID."""

from __future__ import annotations

import os
import tempfile

# Airflow reads its configuration on first import: point it at a throw-away home before any test
# module imports airflow, so tests never touch ~/airflow.
_HOME = tempfile.mkdtemp(prefix="atp-airflow-home-")
os.environ.setdefault("AIRFLOW_HOME", _HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

import pytest  # noqa: E402

from airflow_training_devel.local_fixtures import (  # noqa: E402, F401 - the project and workspace ids re-exported
    LOCAL_FIXTURES,
    LOCAL_SECRET,
    MODELARTS_PROJECT_ID,
    PAI_WORKSPACE_ID,
    server_options,
)
from airflow_training_platform.server import LocalPlatformServer  # noqa: E402

PARALLEL_TIERS = ("unit", "inprocess", "local_platform", "integration")
"""Test folders whose tests `make test` runs on three pytest workers (its first stage)."""


SERVER_TIERS = ("local_platform", "integration")
"""Test folders whose modules start their own servers and jobs: one worker runs a whole module."""


def pytest_collection_modifyitems(config, items):
    """Mark ``parallel`` the tests of :data:`PARALLEL_TIERS` that are not ``exclusive`` (timing
    checks that need the machine to themselves): `make test` runs those on three workers, then
    the rest (``-m "not parallel"``) one at a time. A module of :data:`SERVER_TIERS` is one
    ``xdist_group`` (with ``--dist loadgroup``, one worker starts its servers and jobs once)."""
    tests_dir = os.path.dirname(__file__)
    for item in items:
        tier = os.path.relpath(str(item.path), tests_dir).split(os.sep)[0]
        if tier in PARALLEL_TIERS and item.get_closest_marker("exclusive") is None:
            item.add_marker(pytest.mark.parallel)
        if tier in SERVER_TIERS:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))


API_KEY = LOCAL_SECRET
AWS_ACCESS_KEY_ID = LOCAL_FIXTURES["aws"].login
"""The SageMaker emulation checks signatures for this key pair (secret: :data:`API_KEY`)."""
PAI_ACCESS_KEY_ID = LOCAL_FIXTURES["pai"].login
"""The PAI emulation checks ACS3 signatures for this AccessKey (secret: :data:`API_KEY`)."""
MODELARTS_ACCESS_KEY = LOCAL_FIXTURES["modelarts"].login
"""The ModelArts emulation checks SDK-HMAC-SHA256 signatures for this AK (secret key: :data:`API_KEY`)."""


@pytest.fixture(scope="session")
def platform(tmp_path_factory):
    """A local training platform for the whole session: 4 simulated GPUs, fast epochs, every
    platform's local credentials checked, a 5 s stop grace."""
    data_dir = tmp_path_factory.mktemp("platform")
    stop_grace = {f"{name}_stop_grace_seconds": 5 for name in ("sagemaker", "pai", "modelarts")}
    with LocalPlatformServer(
        data_dir, gpus=4, seconds_per_epoch=0.3, **server_options(**stop_grace)
    ) as server:
        yield server


def aws_connection(url: str, **extra) -> str:
    """An ``aws`` connection to the local platform's SageMaker, as ``AIRFLOW_CONN_*`` JSON."""
    return LOCAL_FIXTURES["aws"].connection_json(url, **extra)


def pai_connection(url: str, **extra) -> str:
    """A ``pai`` connection to the local platform's PAI, as ``AIRFLOW_CONN_*`` JSON."""
    return LOCAL_FIXTURES["pai"].connection_json(url, **extra)


def modelarts_connection(url: str, **extra) -> str:
    """A ``modelarts`` connection to the local platform's ModelArts, as ``AIRFLOW_CONN_*`` JSON."""
    return LOCAL_FIXTURES["modelarts"].connection_json(url, **extra)


@pytest.fixture(scope="session")
def conn_uri_env(platform):
    """The ``AIRFLOW_CONN_TENSORONE_LOCAL`` value pointing at the session's platform."""
    return LOCAL_FIXTURES["tensorone"].connection_json(platform.url)
