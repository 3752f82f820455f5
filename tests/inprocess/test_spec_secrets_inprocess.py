"""Secrets inside a job spec, in this process against the local platform: a reference resolved
on the worker reaches the platform's create request while the operator's spec (what Airflow
renders and stores) keeps the reference; a reference or W&B connection that cannot be served
fails the task before anything is submitted. (The full search of Airflow's stores runs on the
real stack: tests/killpaths/test_spec_secrets.py.)"""

from __future__ import annotations

import copy
import json
import re
import uuid

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_training_devel.killpaths.flavors import FLAVORS
from airflow_training_provider.spec_secrets import SecretNotFoundError, connection_secret, variable_secret
from airflow_training_provider.testing.inprocess import run_task, task_context
from tests.inprocess.test_operators_inprocess import submit, tensorone_spec

PASSWORD = "ip-conn-secret-" + uuid.uuid4().hex
VARIABLE = "ip-var-secret-" + uuid.uuid4().hex
WANDB = ("ipwandb" + uuid.uuid4().hex * 2)[:40]


@pytest.fixture(autouse=True)
def secrets(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_IP_SECRET", json.dumps({"conn_type": "generic", "password": PASSWORD}))
    monkeypatch.setenv("AIRFLOW_VAR_IP_SECRET", VARIABLE)
    monkeypatch.setenv("AIRFLOW_CONN_IP_WANDB", json.dumps({"conn_type": "generic", "password": WANDB}))


def test_references_reach_the_platform_and_the_operator_keeps_the_references(control, capfd):
    spec = FLAVORS["aws"].spec(epochs=1, seconds_per_epoch=0)
    spec["CheckpointConfig"] = {"S3Uri": f"s3://ip/secrets/{uuid.uuid4().hex[:8]}"}
    spec["Environment"] = {
        "DB_PASSWORD": connection_secret("ip_secret"),
        "SOURCE": variable_secret("ip_secret"),
    }
    before = copy.deepcopy(spec)
    op = submit("aws", spec, wandb_conn_id="ip_wandb", wait_for_completion=False)
    result = run_task(op, task_context(op, run_id="secrets"))
    request = control.job(result["id"])["request"]
    assert request["Environment"] == {"DB_PASSWORD": PASSWORD, "SOURCE": VARIABLE, "WANDB_API_KEY": WANDB}
    assert op.spec == before, "what Airflow renders and stores keeps the references"
    assert op.job_reference_published is True, "the console link reads the job reference"
    out = "".join(capfd.readouterr())
    assert (
        "Secrets resolved on the worker (masked): Environment.DB_PASSWORD from connection 'ip_secret'" in out
    )
    assert PASSWORD not in out and VARIABLE not in out and WANDB not in out


def test_wandb_on_a_platform_with_no_place_for_it_fails_before_submit(control):
    spec = tensorone_spec()
    op = submit("tensorone", spec, wandb_conn_id="ip_wandb")
    ctx = task_context(op, run_id="no-wandb")
    with pytest.raises(
        AirflowFailException, match="^Parameter 'wandb_conn_id': TensorOne job specs have no field"
    ):
        run_task(op, ctx)
    assert op.job_reference_published is False and "training_job" not in ctx["ti"].xcoms
    assert control.jobs(name=spec["name"]) == [], "nothing was submitted"


@pytest.mark.parametrize(
    ("where", "reference", "says", "error"),
    [
        (
            "hubToken",
            variable_secret("ip_missing"),
            "Variable 'ip_missing' is not defined",
            SecretNotFoundError,
        ),
        (
            "dbPassword",
            connection_secret("ip_missing"),
            "connection 'ip_missing' (password) is not defined",
            SecretNotFoundError,
        ),
        (
            "token",
            connection_secret("ip_secret", "extra.token"),
            "connection 'ip_secret' (extra.token) holds no value",
            AirflowFailException,  # an empty secret is a mistake no retry mends
        ),
    ],
)
def test_a_reference_to_nothing_fails_before_submit_naming_the_field(control, where, reference, says, error):
    """A missing connection or Variable fails the try with retries left (it may be added, or its
    secrets backend be back: Airflow reports both the same way); an empty one fails for good."""
    spec = tensorone_spec()
    spec["config"][where] = reference
    op = submit("tensorone", spec, retries=3)
    with pytest.raises(error, match=re.escape(f"field 'config.{where}': secret reference: {says}")) as raised:
        run_task(op, task_context(op, run_id="missing"))
    assert type(raised.value) is error
    assert control.jobs(name=spec["name"]) == [], "nothing was submitted"
