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

from airflow_training_platform.server import LocalPlatformServer  # noqa: E402

API_KEY = "test-key-not-a-secret"
AWS_ACCESS_KEY_ID = "AKIDTESTLOCAL"
"""The SageMaker emulation checks signatures for this key pair (secret: :data:`API_KEY`)."""
PAI_ACCESS_KEY_ID = "LTAITESTLOCAL"
"""The PAI emulation checks ACS3 signatures for this AccessKey (secret: :data:`API_KEY`)."""
PAI_WORKSPACE_ID = "86995"
MODELARTS_ACCESS_KEY = "HWTESTLOCALAK"
"""The ModelArts emulation checks SDK-HMAC-SHA256 signatures for this AK (secret key: :data:`API_KEY`)."""
MODELARTS_PROJECT_ID = "0a1b2c3d4e5f"


@pytest.fixture(scope="session")
def platform(tmp_path_factory):
    """A local training platform for the whole session: 4 simulated GPUs, fast epochs, SageMaker
    signatures checked, a 5 s stop grace."""
    data_dir = tmp_path_factory.mktemp("platform")
    with LocalPlatformServer(
        data_dir,
        gpus=4,
        seconds_per_epoch=0.3,
        api_key=API_KEY,
        sagemaker_access_key_id=AWS_ACCESS_KEY_ID,
        sagemaker_secret_access_key=API_KEY,
        sagemaker_stop_grace_seconds=5,
        pai_access_key_id=PAI_ACCESS_KEY_ID,
        pai_access_key_secret=API_KEY,
        pai_stop_grace_seconds=5,
        modelarts_access_key=MODELARTS_ACCESS_KEY,
        modelarts_secret_key=API_KEY,
        modelarts_stop_grace_seconds=5,
    ) as server:
        yield server


def aws_connection(url: str, **extra) -> str:
    """An ``aws`` connection to the local platform's SageMaker, as ``AIRFLOW_CONN_*`` JSON."""
    import json

    return json.dumps(
        {
            "conn_type": "aws",
            "login": AWS_ACCESS_KEY_ID,
            "password": API_KEY,
            "extra": {"region_name": "us-east-1", "endpoint_url": url, **extra},
        }
    )


def pai_connection(url: str, **extra) -> str:
    """A ``pai`` connection to the local platform's PAI, as ``AIRFLOW_CONN_*`` JSON."""
    import json

    return json.dumps(
        {
            "conn_type": "pai",
            "host": url,
            "login": PAI_ACCESS_KEY_ID,
            "password": API_KEY,
            "extra": {"region": "cn-hangzhou", "workspace_id": PAI_WORKSPACE_ID, **extra},
        }
    )


def modelarts_connection(url: str, **extra) -> str:
    """A ``modelarts`` connection to the local platform's ModelArts, as ``AIRFLOW_CONN_*`` JSON."""
    import json

    return json.dumps(
        {
            "conn_type": "modelarts",
            "host": url,
            "login": MODELARTS_ACCESS_KEY,
            "password": API_KEY,
            "extra": {"region": "cn-north-4", "project_id": MODELARTS_PROJECT_ID, **extra},
        }
    )


@pytest.fixture(scope="session")
def conn_uri_env(platform):
    """The ``AIRFLOW_CONN_TENSORONE_LOCAL`` value pointing at the session's platform."""
    import json

    return json.dumps({"conn_type": "tensorone", "host": platform.url, "password": API_KEY})
