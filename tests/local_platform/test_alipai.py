"""Alibaba's ``alipai`` SDK (PyPI ``alipai`` 0.4) against the local PAI, as its users drive it:
the TrainingJob API's create / get / list, ``TrainingJob.wait`` and ``Estimator.fit()`` with its
defaults (``wait=True``, ``show_logs=True``) on the user's script in a local ``source_dir``, which
alipai uploads to OSS (the local platform's ``PutObject``). alipai signs the older ROA HMAC-SHA1 way
(and OSS requests OSS's v1 way); the server checks those signatures against its key pair.

alipai pins numpy<2, so it has a venv of its own (``make pai-sdk``) and runs as a subprocess
(``alipai_lifecycle.py``) with only the environment below. Without that venv the test is skipped,
except under ``CI=true`` where that is a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_training_devel.user_code import PAI_DATA_URI, SCRIPT, put_pai_code_and_data
from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.server import LocalPlatformServer
from tests.conftest import API_KEY, PAI_ACCESS_KEY_ID, PAI_WORKSPACE_ID, server_options

ROOT = Path(__file__).resolve().parents[2]
SDK_PYTHON = ROOT / "build" / "pai-sdk-venv" / "bin" / "python"
DRIVER = Path(__file__).with_name("alipai_lifecycle.py")


@pytest.fixture(scope="module")
def sdk_python() -> Path:
    if not SDK_PYTHON.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{SDK_PYTHON} is missing: `make test` builds it (`make pai-sdk`)")
        pytest.skip(f"no alipai venv at {SDK_PYTHON}: run `make pai-sdk`")
    return SDK_PYTHON


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalPlatformServer(
        str(tmp_path_factory.mktemp("alipai")),
        gpus=2,
        log_level="warning",
        allow_user_code=True,
        **server_options(pai_stop_grace_seconds=3),
    ) as srv:
        put_pai_code_and_data(srv.data_dir)
        yield srv


def test_alipai_creates_gets_lists_waits_and_fits_with_its_defaults(sdk_python, server, tmp_path):
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),  # no ~/.pai/config.json, no ~/.alibabacloud profile
        "ALIBABA_CLOUD_ACCESS_KEY_ID": PAI_ACCESS_KEY_ID,
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": API_KEY,
        "PYTHONUNBUFFERED": "1",
    }
    host = server.url.split("://", 1)[1]
    run = subprocess.run(
        [str(sdk_python), str(DRIVER), host, PAI_WORKSPACE_ID, str(SCRIPT.parent), PAI_DATA_URI],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    assert API_KEY not in out
    result = json.loads(run.stdout.rsplit("RESULT ", 1)[1])

    job_id = result["created"]
    assert job_id.startswith("train")
    assert result["got_status"] in ("Creating", "Submitted", "Initializing", "Running", "Succeed")
    assert result["listed"] == [job_id] and result["listed_total"] == 1
    assert result["waited_status"] == "Succeed"
    assert job_id in result["listed_models"]

    # fit(): source_dir uploaded with oss2 (the local PutObject, signed), the script ran from
    # there and alipai's log printer printed its lines
    assert result["fit_status"] == "Succeed"
    assert "training complete" in run.stdout
    record = LocalPlatformControl(server.url).job(result["fit_id"])
    assert record["state"] == "succeeded" and record["name"].startswith("alipai-fit")
    code_dir = record["request"]["AlgorithmSpec"]["CodeDir"]["LocationValue"]
    assert code_dir["Bucket"] == "out" and code_dir["Key"].startswith("pai/training_src/alipai_fit_")
    uploaded = Path(server.data_dir) / "oss" / "out" / code_dir["Key"] / "train.py"
    assert uploaded.read_bytes() == SCRIPT.read_bytes()
    assert result["fit_model"].startswith("oss://out/") and result["fit_model"].endswith("/model/")
    # the local OSS refuses what it cannot stand behind, in OSS's own (XML) errors
    assert result["oss_refusals"] == {
        "wrong_secret": [403, "SignatureDoesNotMatch"],
        "signature_v4": [501, "NotImplemented"],
        "get_object": [501, "NotImplemented"],
    }
    assert not (Path(server.data_dir) / "oss" / "out" / "x").exists()
    print(f"fit() took {result['fit_seconds']} s")
