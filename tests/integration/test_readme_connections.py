"""The README's local connections, exactly as written (only the port changed to the test server's),
pass the provider's connection Test (``TrainingPlatformHook.test_connection``, the UI's Test button)
against a local platform started with the README's ``serve`` flags; for PAI and ModelArts the
same connection with another secret fails it, naming authentication (the README starts the local
TensorOne without ``--api-key``: it takes any key). (The ``aws`` one goes through the Amazon provider's
own Test: ``tests/e2e/test_amazon_sagemaker.py``.)"""

from __future__ import annotations

import itertools
import json
import re
import shlex
from pathlib import Path

import pytest

from airflow_training_platform.server import LocalPlatformServer
from airflow_training_provider.hooks.training import TrainingPlatformHook

README = (Path(__file__).parents[2] / "README.md").read_text()
README_URL = "http://127.0.0.1:8765"


def readme_connections(name: str) -> set[str]:
    """Every distinct ``AIRFLOW_CONN_<NAME>_LOCAL`` the README exports."""
    found = set(re.findall(rf"export AIRFLOW_CONN_{name.upper()}_LOCAL='(.*?)'", README, re.S))
    assert found, f"the README exports no AIRFLOW_CONN_{name.upper()}_LOCAL"
    return {json.dumps(json.loads(c)) for c in found}  # the same JSON wrapped differently is one


def readme_serve_options() -> dict[str, str]:
    """The key options of every ``airflow-training-platform serve`` command in the README
    (``--pai-access-key-id LTAIlocal`` → ``{"pai_access_key_id": "LTAIlocal"}``)."""
    options: dict[str, str] = {}
    for command in re.findall(r"airflow-training-platform serve ((?:[^\n]*\\\n)*[^\n]*)", README):
        words = shlex.split(command.replace("\\\n", " ").split("&")[0])
        for flag, value in itertools.pairwise(words):
            if flag.startswith("--") and re.search(r"-(access-key|secret-key|key-id|key-secret)", flag):
                options[flag[2:].replace("-", "_")] = value
    return options


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    options = readme_serve_options()
    assert {
        "pai_access_key_id",
        "pai_access_key_secret",
        "modelarts_access_key",
        "modelarts_secret_key",
    } <= set(options), options
    with LocalPlatformServer(str(tmp_path_factory.mktemp("readme")), log_level="warning", **options) as srv:
        yield srv


@pytest.mark.parametrize("name", ["tensorone", "pai", "modelarts"])
def test_the_readmes_local_connection_passes_the_connection_test(server, monkeypatch, name):
    for connection in readme_connections(name):
        conn_id = f"{name}_local"
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", connection.replace(README_URL, server.url))
        ok, message = TrainingPlatformHook(conn_id).test_connection()
        assert ok, (connection, message)
        assert server.url in message and "accepted the credentials" in message

        secret = json.loads(connection)["password"]
        wrong = connection.replace(f'"password": "{secret}"', '"password": "not-the-secret"')
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", wrong.replace(README_URL, server.url))
        ok, message = TrainingPlatformHook(conn_id).test_connection()
        if name == "tensorone":  # the local TensorOne takes any key unless started with --api-key
            assert ok, message
        else:
            assert not ok and message.startswith("authentication failed"), message
