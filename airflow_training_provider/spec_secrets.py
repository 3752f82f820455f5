"""Secrets inside a job spec: references resolved on the worker right before submit, and masking
of the secret values a spec carries.

A job spec may need secrets of its own: a Weights & Biases key, a Hugging Face token, an
environment variable holding a password. Written into the DAG file, such a value is in the DAG
file, in the serialized DAG and in the task's Rendered Template view. Instead, any value of a spec
may be a **reference**, a mapping with the single key ``secret``::

    {"secret": {"conn_id": "wandb"}}                         # the connection's password
    {"secret": {"conn_id": "hub", "field": "extra.token"}}   # or its login, host, schema, an extra
    {"secret": {"variable": "hf_token"}}                     # an Airflow Variable

(:func:`connection_secret` and :func:`variable_secret` build them.) The submit operator replaces
each reference with its value on the worker, after the template fields were rendered and stored and
right before the spec is validated and submitted, and registers every resolved value with Airflow's
secrets masker (``***`` in the task log). The value reaches the platform's create request and none
of Airflow's stores: not the rendered fields, XCom, the trigger's kwargs nor the serialized DAG. The
connection or Variable may live in any secrets backend (environment variables, Vault, a cloud
secret manager) or in the metadata database.

A value written in the spec itself (or rendered from a template) is registered with the masker too,
so the Rendered Template view and the task log show ``***``, when it sits in a field the platform
marks as secret (:attr:`~airflow_training_provider.platforms.base.Dialect.secret_fields`), in an
environment variable whose name says it holds a secret (:func:`looks_secret`), or under any key of
that kind.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from airflow_training_provider.errors import InvalidJobSpecError

if TYPE_CHECKING:
    from airflow_training_provider.platforms.base import Dialect

REFERENCE_KEY = "secret"
"""The single key of a secret reference: ``{"secret": {...}}``."""

CONNECTION_FIELDS = ("password", "login", "host", "schema")
"""Connection attributes a reference may read (besides ``extra.<key>``)."""

# Words that make a name secret, as a whole word (WANDB_KEY, HF_AUTH) or anywhere (GITHUB_TOKEN,
# dbPassword). Airflow's own list (``[core] sensitive_var_conn_names`` and its defaults) applies too.
_SECRET_WORDS = frozenset({"key", "auth", "pwd", "pat"})
_SECRET_PARTS = ("token", "secret", "password", "passwd", "passphrase", "credential", "apikey", "private_key")


# ``Key`` beside these names an object or a tag, not a secret: an OSS/S3 location (``{"Bucket",
# "Key"}``, PAI's ``CodeDir.LocationValue``) or a tag (``{"Key", "Value"}``, SageMaker's ``Tags``).
# Taken for a secret it would stop the program's lines while deferred (``stream_logs``).
_KEY_NAMES_OBJECT_WITH = frozenset({"Bucket", "Value"})


class SecretNotFoundError(InvalidJobSpecError):
    """A secret reference (or ``wandb_conn_id``) names a connection or Variable that no secrets
    backend has. Nothing was submitted. Unlike other spec errors the task's retries apply: the
    connection may be added meanwhile, and Airflow reports a secrets backend that failed to
    answer the same way as a missing connection."""


class SecretReference(BaseModel):
    """The inside of a ``{"secret": {...}}`` reference: exactly one of ``conn_id`` (with the
    connection attribute ``field``: ``password``, ``login``, ``host``, ``schema`` or
    ``extra.<key>``; default ``password``) or ``variable`` (an Airflow Variable's key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    conn_id: str | None = None
    field: str = "password"
    variable: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> SecretReference:
        if (self.conn_id is None) == (self.variable is None):
            raise ValueError("give exactly one of 'conn_id' and 'variable'")
        if self.variable is not None and "field" in self.model_fields_set:
            raise ValueError("'field' goes with 'conn_id', not with 'variable'")
        if self.field not in CONNECTION_FIELDS and not (self.field.startswith("extra.") and self.field[6:]):
            raise ValueError(f"'field' must be one of {', '.join(CONNECTION_FIELDS)} or 'extra.<key>'")
        return self

    def describe(self) -> str:
        """``connection 'wandb' (password)`` / ``Variable 'hf_token'``: names only, never the value."""
        if self.conn_id is not None:
            return f"connection {self.conn_id!r} ({self.field})"
        return f"Variable {self.variable!r}"


def connection_secret(conn_id: str, field: str = "password") -> dict[str, Any]:
    """A reference to a connection's attribute: ``{"secret": {"conn_id": conn_id, "field": field}}``.

    :param field: ``password`` (default), ``login``, ``host``, ``schema`` or ``extra.<key>``.
    :raises ValueError: a field of another kind, naming it."""
    try:
        ref = SecretReference(conn_id=conn_id, field=field)
    except ValidationError as exc:
        message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise ValueError(f"connection_secret({conn_id!r}, field={field!r}): {message}") from None
    return {REFERENCE_KEY: ref.model_dump(exclude={"variable"})}


def variable_secret(key: str) -> dict[str, Any]:
    """A reference to an Airflow Variable: ``{"secret": {"variable": key}}``."""
    return {REFERENCE_KEY: {"variable": key}}


def is_reference(value: Any) -> bool:
    """``value`` is a secret reference (a mapping whose only key is ``secret``)."""
    return isinstance(value, dict) and len(value) == 1 and REFERENCE_KEY in value


def find_references(spec: Any, path: str = "") -> Iterator[tuple[str, SecretReference]]:
    """``(dotted path, reference)`` of every secret reference in ``spec`` (lists by index).

    :raises InvalidJobSpecError: a malformed reference, naming its path and what was expected."""
    if is_reference(spec):
        try:
            yield path or "spec", SecretReference.model_validate(spec[REFERENCE_KEY])
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join([path or "spec", REFERENCE_KEY, *(str(p) for p in err["loc"])])
            message = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":  # a typo: say which key was meant
                known = list(SecretReference.model_fields)
                close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1, cutoff=0.6)
                message = f"unknown key ({f'did you mean {close[0]!r}?' if close else 'known: ' + ', '.join(known)})"
            raise InvalidJobSpecError(where, f"secret reference: {message}") from None
    elif isinstance(spec, dict):
        for key, value in spec.items():
            yield from find_references(value, _join(path, key))
    elif isinstance(spec, list):
        for index, value in enumerate(spec):
            yield from find_references(value, _join(path, index))


def _join(path: str, key: Any) -> str:
    """The dotted path of ``key`` under ``path`` (``""`` is the spec itself)."""
    return f"{path}.{key}" if path else str(key)


def _read_connection(conn_id: str, field: str) -> Any:
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    if field.startswith("extra."):
        return (conn.extra_dejson or {}).get(field[6:])
    return getattr(conn, field)


def _read_variable(key: str) -> Any:
    from airflow.sdk import Variable

    return Variable.get(key)


def resolve_references(
    spec: dict[str, Any],
    read_connection: Callable[[str, str], Any] = _read_connection,
    read_variable: Callable[[str], Any] = _read_variable,
) -> tuple[dict[str, Any], list[str]]:
    """``(spec with every reference replaced by its value, the values)``; ``spec`` is not changed.

    Called on the worker (before submit), in the triggerer and in the API server (to mask the
    program's lines); the values returned must not reach anything Airflow stores (XCom, trigger
    kwargs, rendered fields).

    :param read_connection: ``(conn_id, field) → value`` (default: the Task SDK's connection
        lookup, which asks every secrets backend).
    :param read_variable: ``key → value`` (default: ``airflow.sdk.Variable.get``).
    :raises SecretNotFoundError: the connection or Variable is not defined (naming the spec path
        and the connection or Variable).
    :raises InvalidJobSpecError: a malformed reference, or one whose value is empty.
    """
    values: list[str] = []

    def resolve(node: Any, path: str) -> Any:
        if is_reference(node):
            ref = next(find_references(node, path))[1]
            try:
                if ref.conn_id is not None:
                    value = read_connection(ref.conn_id, ref.field)
                else:
                    value = read_variable(cast(str, ref.variable))  # the one source left
            except Exception as exc:
                if not _is_not_found(exc):
                    raise  # a secrets backend that failed: let the task retry
                raise SecretNotFoundError(
                    path, f"secret reference: {ref.describe()} is not defined (nothing was submitted)"
                ) from None
            if value is None or value == "":
                raise InvalidJobSpecError(
                    path, f"secret reference: {ref.describe()} holds no value (nothing was submitted)"
                )
            values.append(str(value))
            return str(value)
        if isinstance(node, dict):
            return {k: resolve(v, _join(path, k)) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v, _join(path, i)) for i, v in enumerate(node)]
        return node

    return resolve(spec, ""), values


def _is_not_found(exc: Exception) -> bool:
    """A missing connection (``AirflowNotFoundException``) or Variable (``KeyError``, or the Task
    SDK's ``AirflowRuntimeError`` with ``VARIABLE_NOT_FOUND``)."""
    if isinstance(exc, KeyError) or type(exc).__name__ == "AirflowNotFoundException":
        return True
    error = getattr(exc, "error", None)
    return "NOT_FOUND" in str(getattr(error, "error", "")).upper()


def looks_secret(name: str) -> bool:
    """Whether a field or environment variable called ``name`` holds a secret: Airflow's rule
    (a sensitive word such as ``password``, ``token``, ``api_key`` in it), or one of the words
    ``key``, ``auth``, ``credential``, ``secret``… (``WANDB_KEY``, ``hfToken``, ``DB_PASSWORD``).
    ``MODEL_NAME`` or ``EPOCHS`` do not."""
    if _airflow_hides(name):
        return True
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    words = set(re.split(r"[^a-z0-9]+", snake))
    return bool(words & _SECRET_WORDS) or any(part in snake for part in _SECRET_PARTS)


def _airflow_hides(name: str) -> bool:
    try:  # the masker's own rule honours [core] sensitive_var_conn_names; private in Airflow 3.3
        from airflow.sdk._shared.secrets_masker import should_hide_value_for_key
    except ImportError:
        return False
    return bool(should_hide_value_for_key(name))


def secret_values(spec: Any, dialect: Dialect | None) -> list[str]:
    """The secret values written in ``spec`` (literally or rendered from a template): strings in
    the dialect's :attr:`~Dialect.secret_fields`, and anywhere under a key that
    :func:`looks_secret` (an environment variable's name included), except ``Key`` beside
    ``Bucket`` or ``Value`` (an object location, a tag). References are skipped (their names are
    not secrets); with no ``dialect`` only the key rule applies."""
    found: list[str] = []
    if not isinstance(spec, dict):
        return found
    for path in dialect.secret_fields if dialect else ():
        value = _at(spec, path)
        if isinstance(value, str):
            found.append(value)

    def walk(node: Any, secret: bool) -> None:
        if is_reference(node):
            return
        if isinstance(node, dict):
            names_object = "Key" in node and bool(node.keys() & _KEY_NAMES_OBJECT_WITH)
            for key, value in node.items():
                walk(value, secret or (looks_secret(str(key)) and not (key == "Key" and names_object)))
        elif isinstance(node, list):
            for value in node:
                walk(value, secret)
        elif secret and isinstance(node, str):
            found.append(node)

    walk(spec, False)
    return list(dict.fromkeys(v for v in found if v))


def _at(spec: dict[str, Any], path: str) -> Any:
    node: Any = spec
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def mask(values: list[str]) -> None:
    """Register ``values`` with Airflow's secrets masker (this process and, in a task, the
    supervisor that writes the task log): each shows as ``***`` from then on. Airflow leaves
    values shorter than ``[logging] min_length_masked_secret`` (5) unmasked."""
    from airflow.sdk.log import mask_secret

    for value in values:
        mask_secret(value)


def read_wandb_connection(
    conn_id: str, read_connection: Callable[[str, str], Any] = _read_connection
) -> tuple[str, str | None]:
    """``(API key, base URL or None)`` of a Weights & Biases connection: the key is its password,
    a self-hosted W&B's URL its host (``https://wandb.example.com``); any connection type.

    :raises SecretNotFoundError: the connection is not defined (field ``wandb_conn_id``).
    :raises InvalidJobSpecError: it has no password."""
    try:
        key, host = read_connection(conn_id, "password"), read_connection(conn_id, "host")
    except Exception as exc:
        if not _is_not_found(exc):
            raise
        raise SecretNotFoundError(
            "wandb_conn_id", f"connection {conn_id!r} is not defined (nothing was submitted)", parameter=True
        ) from None
    if not key:
        raise InvalidJobSpecError(
            "wandb_conn_id",
            f"connection {conn_id!r} has no password, the W&B API key (nothing was submitted)",
            parameter=True,
        )
    return str(key), (str(host) if host else None)
