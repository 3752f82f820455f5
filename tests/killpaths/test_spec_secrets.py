"""Secrets inside a job spec, on the real stack (scheduler, triggerers, API server, PostgreSQL,
the local platform): each secret DAG passes distinctive values through every path (a connection
reference, a Variable reference, a templated Variable, a W&B connection); the platform's create
request holds every value, and none is in the rendered fields, the task log, XCom, the trigger
rows (decrypted), any file under AIRFLOW_HOME (task and trigger logs included) or a ``pg_dump``
of the metadata database (serialized DAGs, DAG code, everything)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_training_devel.killpaths.flavors import (
    SECRET_VARIABLE,
    SPEC_SECRETS,
    secret_cases,
)

CASES = secret_cases()
SECRETS = set(SPEC_SECRETS.values())
ENVIRONMENT = {"aws": ("Environment",), "pai": ("Environments",), "modelarts": ("algorithm", "environments")}
EXPECTED_ENV = {
    "DB_PASSWORD": SPEC_SECRETS["connection"],
    "DATA_SOURCE_URL": SPEC_SECRETS["variable"],
    "HUB_KEY": SPEC_SECRETS["templated"],
    "WANDB_API_KEY": SPEC_SECRETS["wandb"],
    "MODEL_NAME": "digits-mlp",
}
TRIGGER_ROWS = """
import json
from sqlalchemy import select
from airflow.models.trigger import Trigger
from airflow.utils.session import create_session
with create_session() as session:
    print(json.dumps([t.kwargs for t in session.scalars(select(Trigger))], default=str))
"""


def received(dag_id: str, request: dict) -> dict:
    """Where each secret DAG's values must be in the create request the platform got."""
    flavor = CASES[dag_id][0]
    if flavor.name in ENVIRONMENT:
        node = request
        for part in ENVIRONMENT[flavor.name]:
            node = node[part]
        return node
    if dag_id == "kp_secrets":  # TensorOne's free-form config
        return {k: request["config"][k] for k in ("hubToken", "dbPassword", "authKey", "modelName")}
    return {k: request.get(k) for k in ("wandb_key", "hf_api_token")}


EXPECTED = {
    "kp_secrets": {
        "hubToken": SPEC_SECRETS["variable"],
        "dbPassword": SPEC_SECRETS["connection"],
        "authKey": SPEC_SECRETS["templated"],
        "modelName": "digits-mlp",
    },
    "kp_secrets_together": {"wandb_key": SPEC_SECRETS["wandb"], "hf_api_token": SPEC_SECRETS["variable"]},
    "kp_secrets_templated_together": {
        "wandb_key": SPEC_SECRETS["templated"],
        "hf_api_token": SPEC_SECRETS["connection"],
    },
    **{dag_id: EXPECTED_ENV for dag_id, case in CASES.items() if case[0].name in ENVIRONMENT},
}


def leaked(text: str) -> list[str]:
    return sorted(name for name, value in SPEC_SECRETS.items() if value in text)


def trigger_kwargs(stack) -> list[dict]:
    """Every trigger row's kwargs, decrypted (they are stored Fernet-encrypted)."""
    run = subprocess.run(
        [sys.executable, "-c", TRIGGER_ROWS], env=stack.env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def xcom_values(stack, dag_id: str, run_id: str) -> dict:
    base = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/train/xcomEntries"
    keys = [e["key"] for e in stack.call("GET", base)["xcom_entries"]]
    return {key: stack.call("GET", f"{base}/{key}")["value"] for key in keys}


@pytest.fixture(scope="module")
def secret_runs(kill_path_stack):
    """Every secret DAG run once; the trigger rows read while all of them are deferred."""
    stack, platform = kill_path_stack.stack, kill_path_stack.platform
    runs = {dag_id: stack.trigger(dag_id) for dag_id in CASES}
    for dag_id, run_id in runs.items():
        ti = stack.wait_ti(dag_id, run_id, "train", {"deferred", "success", "failed"}, timeout=180)
        assert ti["state"] == "deferred", (dag_id, ti)
    triggers = trigger_kwargs(stack)
    tis = {
        dag_id: stack.wait_ti(dag_id, run_id, "train", {"success", "failed"}, timeout=180)
        for dag_id, run_id in runs.items()
    }
    jobs = {dag_id: platform.run_jobs(dag_id, run_id) for dag_id, run_id in runs.items()}
    return runs, tis, jobs, triggers


@pytest.mark.parametrize("dag_id", list(CASES))
def test_the_platform_receives_each_secret_and_airflow_shows_none(kill_path_stack, secret_runs, dag_id):
    stack, platform = kill_path_stack.stack, kill_path_stack.platform
    runs, tis, jobs, _ = secret_runs
    run_id, ti = runs[dag_id], tis[dag_id]
    assert ti["state"] == "success", ti
    (job,) = jobs[dag_id]
    assert job["state"] == "succeeded"
    assert received(dag_id, platform.job(job["job_id"])["request"]) == EXPECTED[dag_id]

    rendered = json.dumps(ti["rendered_fields"])
    assert not leaked(rendered), rendered
    assert '"***"' in rendered, "masked values show as ***"
    assert "digits-mlp" in rendered, "values that are not secret stay readable"

    log = stack.task_log(dag_id, run_id, "train", ti["try_number"], wait_for=("succeeded",))
    assert "Secrets resolved on the worker (masked)" in log and job["job_id"] in log
    assert not leaked(log), [line for line in log.splitlines() if leaked(line)]

    xcoms = json.dumps(xcom_values(stack, dag_id, run_id))
    assert job["job_id"] in xcoms and not leaked(xcoms)


def test_no_trigger_row_holds_a_secret(secret_runs):
    _, _, jobs, triggers = secret_runs
    text = json.dumps(triggers)
    for dag_id, (job,) in jobs.items():
        assert job["job_id"] in text, f"the trigger of {dag_id} was read while it waited"
    assert not leaked(text)


def test_no_file_under_airflow_home_holds_a_secret(kill_path_stack, secret_runs):
    home = Path(kill_path_stack.stack.home)
    files = [p for p in home.rglob("*") if p.is_file()]
    task_logs = [p for p in files if "dag_id=kp_secrets" in str(p)]
    assert task_logs, "the secret DAGs' task logs are on disk"
    holding = {str(p): leaked(p.read_text(errors="replace")) for p in files}
    assert not {p: names for p, names in holding.items() if names}


def test_the_metadata_database_holds_no_secret(kill_path_stack, secret_runs):
    _, _, jobs, _ = secret_runs
    dump = kill_path_stack.postgres.dump()
    assert SECRET_VARIABLE in dump, "the serialized DAG keeps the reference (a name, not the value)"
    assert all(job["job_id"] in dump for (job,) in jobs.values())
    assert not leaked(dump), [line[:200] for line in dump.splitlines() if leaked(line)]
