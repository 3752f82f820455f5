"""Secrets inside a job spec (pure logic): references found, checked and resolved; the values a
spec carries recognised per platform for the masker; W&B keys placed where each platform takes
them; and, through Airflow's own rendering and rendered-field serialization, ``***`` where the
Rendered Template view would show them. The real-stack proof is tests/killpaths/test_spec_secrets.py."""

from __future__ import annotations

import copy
import json

import jinja2
import pytest
from airflow.sdk import DAG
from airflow.sdk.execution_time.task_runner import _serialize_rendered_fields

from airflow_training_provider.errors import InvalidJobSpecError
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.platforms import PLATFORMS
from airflow_training_provider.spec_secrets import (
    SecretNotFoundError,
    connection_secret,
    find_references,
    looks_secret,
    mask,
    read_wandb_connection,
    resolve_references,
    secret_values,
    variable_secret,
)
from tests.unit.test_dialect_conformance import CASES

SPECS = {case.platform.conn_type: case.spec for case in CASES}
ENV_PATHS = {"aws": "Environment", "pai": "Environments", "modelarts": "algorithm.environments"}


def dialect(conn_type: str):
    return PLATFORMS[conn_type].dialect()


def at(spec: dict, path: str):
    for part in path.split("."):
        spec = spec[part]
    return spec


def with_env(conn_type: str, env: dict) -> dict:
    spec = copy.deepcopy(SPECS[conn_type])
    *parents, leaf = ENV_PATHS[conn_type].split(".")
    node = spec
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = env
    return spec


# -- references ---------------------------------------------------------------------------------
def test_reference_builders_give_the_documented_forms():
    assert connection_secret("wandb") == {"secret": {"conn_id": "wandb", "field": "password"}}
    assert connection_secret("hub", "extra.token") == {"secret": {"conn_id": "hub", "field": "extra.token"}}
    assert variable_secret("hf_token") == {"secret": {"variable": "hf_token"}}
    with pytest.raises(
        ValueError, match=r"^connection_secret\('hub', field='pasword'\): 'field' must be one of"
    ):
        connection_secret("hub", "pasword")


def test_references_are_found_with_their_paths_in_dicts_and_lists():
    spec = {
        "name": "x",
        "Environment": {"A": connection_secret("c1"), "B": "plain"},
        "channels": [{"token": variable_secret("v1")}],
    }
    found = {path: ref.describe() for path, ref in find_references(spec)}
    assert found == {
        "Environment.A": "connection 'c1' (password)",
        "channels.0.token": "Variable 'v1'",
    }


@pytest.mark.parametrize(
    ("inner", "where", "says"),
    [
        ({}, "env.K.secret", "give exactly one of 'conn_id' and 'variable'"),
        ({"conn_id": "c", "variable": "v"}, "env.K.secret", "give exactly one"),
        ({"variable": "v", "field": "login"}, "env.K.secret", "'field' goes with 'conn_id'"),
        ({"conn_id": "c", "field": "extra."}, "env.K.secret", "'field' must be one of"),
        ({"conn_id": "c", "key": "x"}, "env.K.secret.key", "unknown key (known: conn_id, field, variable)"),
        ({"conn_id": "c", "feild": "login"}, "env.K.secret.feild", "unknown key (did you mean 'field'?)"),
        ("just-a-name", "env.K.secret", "valid dictionary"),
    ],
)
def test_a_malformed_reference_is_refused_naming_its_path(inner, where, says):
    with pytest.raises(InvalidJobSpecError) as err:
        list(find_references({"env": {"K": {"secret": inner}}}))
    assert err.value.field == where and says in err.value.expected


def test_a_malformed_reference_fails_the_dag_parse():
    with pytest.raises(ValueError, match=r"field 'Environment.K.secret'.*exactly one"):
        SubmitTrainingJobOperator(task_id="t", conn_id="x", spec={"Environment": {"K": {"secret": {}}}})


def test_resolving_replaces_each_reference_and_leaves_the_spec_unchanged():
    spec = {
        "name": "x",
        "env": {"A": connection_secret("c1"), "B": connection_secret("c1", "extra.token"), "C": "plain"},
        "list": [variable_secret("v1")],
    }
    before = copy.deepcopy(spec)
    conns = {("c1", "password"): "pw-from-connection", ("c1", "extra.token"): "tok-from-extra"}
    resolved, values = resolve_references(
        spec, lambda c, f: conns[(c, f)], {"v1": "var-value-123"}.__getitem__
    )
    assert resolved == {
        "name": "x",
        "env": {"A": "pw-from-connection", "B": "tok-from-extra", "C": "plain"},
        "list": ["var-value-123"],
    }
    assert values == ["pw-from-connection", "tok-from-extra", "var-value-123"]
    assert spec == before


def test_a_reference_to_nothing_is_refused_naming_path_and_source():
    class AirflowNotFoundException(Exception):
        pass

    def missing_conn(conn_id, field):
        raise AirflowNotFoundException(conn_id)

    with pytest.raises(InvalidJobSpecError) as err:
        resolve_references({"env": {"A": connection_secret("nope")}}, missing_conn)
    assert err.value.field == "env.A" and "connection 'nope' (password) is not defined" in err.value.expected
    assert isinstance(err.value, SecretNotFoundError), "retries apply: it may be added meanwhile"
    with pytest.raises(InvalidJobSpecError) as err:
        resolve_references({"k": variable_secret("nope")}, read_variable={}.__getitem__)
    assert err.value.field == "k" and "Variable 'nope' is not defined" in err.value.expected
    with pytest.raises(InvalidJobSpecError, match="holds no value"):
        resolve_references({"k": connection_secret("c")}, lambda c, f: None)


def test_a_failing_secrets_backend_is_not_a_spec_error():
    def backend_down(conn_id, field):
        raise ConnectionError("vault unreachable")

    with pytest.raises(ConnectionError):  # the task retries; nothing was submitted
        resolve_references({"k": connection_secret("c")}, backend_down)


def test_the_sdk_lookups_read_connections_and_variables(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPEC_SECRET_TEST",
        json.dumps(
            {"conn_type": "generic", "password": "conn-pass-xyz", "extra": {"token": "extra-tok-xyz"}}
        ),
    )
    monkeypatch.setenv("AIRFLOW_VAR_SPEC_SECRET_TEST", "var-val-xyz")
    spec = {
        "a": connection_secret("spec_secret_test"),
        "b": connection_secret("spec_secret_test", "extra.token"),
        "c": variable_secret("spec_secret_test"),
    }
    resolved, _ = resolve_references(spec)
    assert resolved == {"a": "conn-pass-xyz", "b": "extra-tok-xyz", "c": "var-val-xyz"}
    with pytest.raises(InvalidJobSpecError, match="Variable 'not_there_xyz' is not defined"):
        resolve_references({"c": variable_secret("not_there_xyz")})
    with pytest.raises(InvalidJobSpecError, match="connection 'not_there_xyz'"):
        resolve_references({"c": connection_secret("not_there_xyz")})


# -- what counts as a secret --------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [
        "WANDB_API_KEY",
        "WANDB_KEY",
        "HF_TOKEN",
        "hfToken",
        "DB_PASSWORD",
        "aws_secret",
        "GITHUB_PAT",
        "MY_AUTH",
    ],
)
def test_secret_names(name):
    assert looks_secret(name)


@pytest.mark.parametrize("name", ["MODEL_NAME", "EPOCHS", "monkey", "author", "PATH", "keyboard_layout"])
def test_names_that_are_not_secret(name):
    assert not looks_secret(name)


def test_together_marks_its_wandb_key_and_hub_token():
    spec = {**SPECS["together"], "wandb_key": "w" * 40, "hf_api_token": "hf_abcdefgh", "suffix": "demo-run"}
    assert secret_values(spec, dialect("together")) == ["w" * 40, "hf_abcdefgh"]


@pytest.mark.parametrize("conn_type", sorted(ENV_PATHS))
def test_environment_values_under_secret_names_are_marked(conn_type):
    env = {
        "WANDB_KEY": "wandb-literal-1",
        "MODEL_NAME": "resnet-50",
        "REF": variable_secret("not-a-secret-name"),
    }
    assert secret_values(with_env(conn_type, env), dialect(conn_type)) == ["wandb-literal-1"]


def test_any_key_that_looks_secret_is_marked_and_references_are_not():
    spec = {"name": "x", "config": {"hubToken": "tok-123456", "deep": [{"password": "pw-123456"}]}}
    spec["config"]["ref"] = {"secret": {"conn_id": "named-connection"}}
    assert secret_values(spec, dialect("tensorone")) == ["tok-123456", "pw-123456"]
    assert secret_values(spec, None) == ["tok-123456", "pw-123456"]


# -- W&B ----------------------------------------------------------------------------------------
def test_wandb_goes_where_each_platform_takes_it():
    out = dialect("together").with_wandb(SPECS["together"], "k" * 40, "https://wandb.example.com")
    assert out["wandb_key"] == "k" * 40 and out["wandb_base_url"] == "https://wandb.example.com"
    for conn_type, path in ENV_PATHS.items():
        spec = with_env(conn_type, {"EPOCHS": "3"})
        out = dialect(conn_type).with_wandb(spec, "k" * 40, None)
        assert at(out, path) == {"EPOCHS": "3", "WANDB_API_KEY": "k" * 40}, conn_type
        assert at(spec, path) == {"EPOCHS": "3"}, "the caller's spec is not changed"
    bare = {**SPECS["modelarts"], "algorithm": {"id": "algo-1"}}  # no environments yet: created
    assert at(dialect("modelarts").with_wandb(bare, "k" * 40, None), ENV_PATHS["modelarts"]) == {
        "WANDB_API_KEY": "k" * 40
    }
    assert dialect("tensorone").with_wandb(SPECS["tensorone"], "k" * 40, None) is None


def test_wandb_key_set_twice_is_refused():
    with pytest.raises(InvalidJobSpecError) as err:
        dialect("together").with_wandb({**SPECS["together"], "wandb_key": "x" * 40}, "k" * 40, None)
    assert err.value.field == "wandb_key"
    with pytest.raises(InvalidJobSpecError) as err:
        dialect("aws").with_wandb(with_env("aws", {"WANDB_API_KEY": "x"}), "k" * 40, None)
    assert err.value.field == "Environment.WANDB_API_KEY"


def test_wandb_connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_WANDB_TEST", json.dumps({"conn_type": "generic", "password": "k" * 40}))
    monkeypatch.setenv("AIRFLOW_CONN_WANDB_EMPTY", json.dumps({"conn_type": "generic", "host": "h"}))
    assert read_wandb_connection("wandb_test") == ("k" * 40, None)
    with pytest.raises(
        InvalidJobSpecError, match=r"^Parameter 'wandb_conn_id': connection 'wandb_empty' has no"
    ):
        read_wandb_connection("wandb_empty")
    with pytest.raises(
        SecretNotFoundError, match=r"^Parameter 'wandb_conn_id': connection 'wandb_nope' is not"
    ):
        read_wandb_connection("wandb_nope")


# -- masking through Airflow's own rendering ----------------------------------------------------
def test_rendered_fields_show_stars_for_secret_values(monkeypatch):
    """Airflow's task runner stores ``_serialize_rendered_fields(task)`` as the Rendered Template
    view, after rendering; values registered while rendering come out as ``***``."""
    monkeypatch.setenv("AIRFLOW_CONN_SECRETS_SM", _aws_connection())
    env = {
        "WANDB_KEY": "{{ params.wandb }}",
        "MODEL_NAME": "resnet-50-rendered",
        "REF": connection_secret("hub"),
    }
    with DAG("secrets_render"):
        op = SubmitTrainingJobOperator(task_id="t", conn_id="secrets_sm", spec=with_env("aws", env))
    op.render_template_fields(
        {"params": {"wandb": "templated-wandb-literal"}}, jinja_env=jinja2.Environment()
    )
    rendered = json.dumps(_serialize_rendered_fields(op))
    assert "templated-wandb-literal" not in rendered and '"WANDB_KEY": "***"' in rendered
    assert "resnet-50-rendered" in rendered, "a value under a name that is not secret stays readable"


def test_mapped_tasks_mask_too(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SECRETS_SM", _aws_connection())
    with DAG("secrets_mapped"):
        mapped = SubmitTrainingJobOperator.partial(task_id="t", conn_id="secrets_sm").expand(
            spec=[with_env("aws", {"WANDB_KEY": "mapped-wandb-literal"})]
        )
    unmapped = mapped.unmap({"spec": with_env("aws", {"WANDB_KEY": "mapped-wandb-literal"})})
    unmapped._do_render_template_fields(unmapped, unmapped.template_fields, {}, jinja2.Environment(), set())
    assert "mapped-wandb-literal" not in json.dumps(_serialize_rendered_fields(unmapped))


def test_masked_values_are_stars_in_log_lines():
    from airflow.sdk._shared.secrets_masker import redact

    mask(["resolved-secret-value-42"])
    assert redact("logged: resolved-secret-value-42 here") == "logged: *** here"


def _aws_connection() -> str:
    return json.dumps(
        {
            "conn_type": "aws",
            "login": "AKIDEXAMPLE",
            "password": "not-used-here",
            "extra": {"region_name": "us-east-1", "endpoint_url": "http://127.0.0.1:9"},
        }
    )


def test_the_console_link_of_a_try_that_submitted_nothing_asks_nothing():
    """The task runner asks every extra link at the end of a try; one that failed before submit
    (a bad spec) published no job reference: the link is empty without an XCom lookup (which
    would log a 404 as an error next to the real failure)."""
    from types import SimpleNamespace

    from airflow_training_provider.links import TrainingJobConsoleLink

    assert (
        TrainingJobConsoleLink().get_link(SimpleNamespace(job_reference_published=False), ti_key=None) == ""
    )
