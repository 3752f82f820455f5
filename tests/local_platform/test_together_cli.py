"""Together's own CLI (``together``/``tg`` 3.1.1, run as a process) and SDK against the local platform,
with only ``TOGETHER_BASE_URL`` and ``TOGETHER_API_KEY`` set (plus the CLI's telemetry and version
check off, and a throw-away home: both would otherwise reach together.ai and PyPI).

The CLI asks ``GET /v3/whoami`` before every command; then the fine-tuning group's lifecycle: create,
list, retrieve, list-events, list-checkpoints, list-metrics, model-limits, cancel, delete (a running
job is refused, an ended one is gone); download and download-tokenized-dataset fail (501), not with
"job not found". Every method of the SDK's ``fine_tuning`` resource is served
or answered 501 ``not_implemented`` — never a 404 for a job that exists.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest
import together
from together.resources.fine_tuning import FineTuningResource

from airflow_training_platform.server import LocalPlatformServer

API_KEY = "together-cli-key"
CLI = os.path.join(os.path.dirname(sys.executable), "together")
JOB_ID = re.compile(r"ft-[0-9a-f]{8}-[0-9a-f-]{27}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    srv = LocalPlatformServer(
        str(tmp_path_factory.mktemp("together-cli")),
        gpus=2,
        seconds_per_epoch=0.3,
        api_key=API_KEY,
        log_level="warning",
    ).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def cli_env(server: LocalPlatformServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = str(tmp_path_factory.mktemp("together-home"))
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "XDG_CONFIG_HOME": home,
        "TOGETHER_BASE_URL": server.url,
        "TOGETHER_API_KEY": API_KEY,
        "TOGETHER_TELEMETRY_DISABLED": "1",
        "TOGETHER_DISABLE_VERSION_CHECK": "1",
        "COLUMNS": "200",
    }


def start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([CLI, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out + err


def tg(env: dict[str, str], *args: str) -> tuple[int, str]:
    return finish(start(env, *args))


def first_json(text: str) -> Any:
    """The JSON document the CLI printed (``--json``), before any warning the SDK adds on stderr."""
    return json.JSONDecoder().raw_decode(text[text.index("{") :])[0]


def wait(client: together.Together, job_id: str, statuses: set[str], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while (job := client.fine_tuning.retrieve(job_id)).status not in statuses:
        assert time.monotonic() < deadline, f"{job_id} still {job.status}"
        time.sleep(0.2)
    return job


@pytest.fixture(scope="module")
def client(server: LocalPlatformServer) -> together.Together:
    return together.Together(api_key=API_KEY, base_url=server.url, max_retries=0, timeout=30)


def test_whoami_answers_the_local_project(cli_env):
    code, out = tg(cli_env, "whoami", "--json")
    assert code == 0, out
    assert first_json(out)["project"]["id"] == "proj-local"


def test_the_cli_runs_a_fine_tuning_lifecycle(cli_env, client, server):
    create = ("fine-tuning", "create", "--model", "org/base-8b", "--non-interactive", "--training-file")
    creates = [start(cli_env, *create, "file-digits", "--n-epochs", "2"),
               start(cli_env, *create, "file-iris", "--n-epochs", "200")]  # fmt: skip
    (code, out), (code2, out2) = [finish(proc) for proc in creates]
    assert code == code2 == 0, out + out2
    done, running = JOB_ID.search(out).group(0), JOB_ID.search(out2).group(0)
    wait(client, done, {"completed"})
    wait(client, running, {"running"})

    reads = {
        "list": start(cli_env, "fine-tuning", "list", "--json"),
        "retrieve": start(cli_env, "fine-tuning", "retrieve", done, "--json"),
        "events": start(cli_env, "fine-tuning", "list-events", done, "--json"),
        "checkpoints": start(cli_env, "fine-tuning", "list-checkpoints", done, "--json"),
        "metrics": start(cli_env, "fine-tuning", "list-metrics", done, "--json"),
        "limits": start(cli_env, "fine-tuning", "model-limits", "org/base-8b", "--json"),
        "delete_running": start(cli_env, "fine-tuning", "delete", running, "--non-interactive"),
        "download": start(cli_env, "fine-tuning", "download", done),
        "download_tokenized": start(cli_env, "fine-tuning", "download-tokenized-dataset", done),
    }
    answers = {name: finish(proc) for name, proc in reads.items()}
    for name, (code, out) in answers.items():
        assert code == (1 if name.startswith(("delete", "download")) else 0), f"{name}: {out}"
    assert {done, running} <= set(JOB_ID.findall(answers["list"][1]))
    assert first_json(answers["retrieve"][1])["status"] == "completed"
    assert {"job_complete", "training_complete"} <= set(re.findall(r'"type": "(\w+)"', answers["events"][1]))
    assert '"step"' in answers["checkpoints"][1]
    assert '"loss"' in answers["metrics"][1] or "loss" in answers["metrics"][1]
    assert "max_num_epochs" in answers["limits"][1]
    assert "cannot be deleted while it is running" in answers["delete_running"][1]
    for name in ("download", "download_tokenized"):  # not served (501): a failure, never "job not found"
        assert "not found" not in answers[name][1].lower(), answers[name][1]
    # the CLI prints the 501's message (its download prints its own "not downloadable" for any failure)
    assert "is not implemented by the local training platform" in answers["download_tokenized"][1]
    assert client.fine_tuning.retrieve(running).status == "running"

    stop_and_delete = [start(cli_env, "fine-tuning", "cancel", running, "--non-interactive"),
                       start(cli_env, "fine-tuning", "delete", done, "--non-interactive")]  # fmt: skip
    for code, out in [finish(proc) for proc in stop_and_delete]:
        assert code == 0, out
    wait(client, running, {"cancelled"})
    code, out = tg(cli_env, "fine-tuning", "delete", running, "--non-interactive")
    assert code == 0 and "Deleted fine-tuning job" in out, out
    for job_id in (done, running):
        with pytest.raises(together.NotFoundError):
            client.fine_tuning.retrieve(job_id)
        assert httpx.get(f"{server.url}/_local/jobs/{job_id}", timeout=10).status_code == 404


#: the fine_tuning methods the local platform serves; every other one is answered 501
SERVED = {
    "cancel", "create", "delete", "estimate_price", "list", "list_checkpoints", "list_events",
    "list_metrics", "model_limits", "retrieve",
}  # fmt: skip


def test_every_fine_tuning_method_of_the_sdk_is_served_or_refused_honestly(client):
    job = client.fine_tuning.create(training_file="file-digits", model="org/base-8b", n_epochs=1)
    wait(client, job.id, {"completed"})
    args: dict[str, dict[str, Any]] = {
        "create": {"training_file": "file-digits", "model": "org/base-8b", "n_epochs": 1},
        "estimate_price": {"training_file": "file-digits", "model": "org/base-8b", "n_epochs": 1},
        "model_limits": {"model_name": "org/base-8b"},
        "preview": {"model": "org/base-8b", "training_file": "file-digits"},
        "content": {"ft_id": job.id},
        "list": {},
    }
    methods = [
        name
        for name, fn in inspect.getmembers(FineTuningResource, inspect.isfunction)
        if not name.startswith("_")
    ]
    assert set(SERVED) < set(methods)  # the SDK still has them
    outcome: dict[str, str] = {}
    for name in sorted(methods, key=lambda n: n == "delete"):  # delete last: the job is used before
        call = getattr(client.fine_tuning, name)
        try:
            call(**args[name]) if name in args else call(job.id)
            outcome[name] = "served"
        except together.APIStatusError as exc:  # an answer of its own (the ended job's cancel: 400) or 501
            assert exc.status_code != 404, f"{name}: the job exists: {exc.body}"
            served = exc.status_code != 501
            error = exc.body.get("error", exc.body) if isinstance(exc.body, dict) else {}
            assert served or error.get("code") == "not_implemented", f"{name}: {exc.body}"
            outcome[name] = "served" if served else "501"
    assert {n for n, o in outcome.items() if o == "served"} == SERVED, outcome
    with pytest.raises(together.NotFoundError):
        client.fine_tuning.retrieve(job.id)
