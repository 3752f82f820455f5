"""Each platform's local set-up, defined once: the credentials the local training platform checks,
the server options that make it check them, and the Airflow connection that uses them. The
tests, ``make ui``'s stack and the kill-path harness all take them from here.

Adding a platform adds one :class:`LocalFixture` to :data:`LOCAL_FIXTURES` (keyed by the
provider's connection type, as ``airflow_training_provider.platforms.PLATFORMS`` is); a test
fails until it is there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

LOCAL_SECRET = "local-secret-not-a-secret"
"""The one secret of every local set-up: the API key, and each key pair's secret."""


@dataclass(frozen=True)
class LocalFixture:
    """One platform's local credentials and connection.

    :ivar conn_type: the provider's connection type (``aws`` for SageMaker).
    :ivar conn_id: the connection id the examples, tests and ``make ui`` use.
    :ivar login: the access key id the emulation checks signatures for (``None``: a bearer key).
    :ivar key_options: the server options naming the login and the secret
        (``{"sagemaker_access_key_id": "login", "sagemaker_secret_access_key": "secret"}``).
    :ivar extra: the connection's ``extra`` (region, workspace, project).
    :ivar url_in_extra: the platform's URL goes in ``extra[url_in_extra]`` rather than ``host``
        (the ``aws`` connection's ``endpoint_url``).
    :ivar url_also_at: dotted paths in ``extra`` that get the URL too (the ``aws`` connection's
        ``service_config.sts.endpoint_url``, so the Amazon provider's connection Test asks the
        local platform's STS, not the real one).
    """

    conn_type: str
    conn_id: str
    login: str | None = None
    key_options: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    url_in_extra: str | None = None
    url_also_at: tuple[str, ...] = ()

    def server_options(self, secret: str = LOCAL_SECRET) -> dict[str, str]:
        """The local platform's options that make it accept this connection."""
        values = {"login": self.login or "", "secret": secret}
        return {option: values[which] for option, which in self.key_options.items()}

    def connection(self, url: str, secret: str = LOCAL_SECRET, **extra: Any) -> dict[str, Any]:
        """The connection to the local platform at ``url`` (``conn_type``, ``host``, ``login``,
        ``password``, ``extra`` as a dict), ``extra`` entries added or replaced."""
        merged = {**self.extra, **extra}
        conn: dict[str, Any] = {"conn_type": self.conn_type, "password": secret}
        if self.url_in_extra:
            merged[self.url_in_extra] = url
        else:
            conn["host"] = url
        for path in self.url_also_at:
            *parents, leaf = path.split(".")
            node = merged
            for key in parents:
                node[key] = node = dict(node.get(key) or {})  # a copy: the caller's dict stays as given
            node.setdefault(leaf, url)
        if self.login:
            conn["login"] = self.login
        if merged:
            conn["extra"] = merged
        return conn

    def connection_json(self, url: str, secret: str = LOCAL_SECRET, **extra: Any) -> str:
        """:meth:`connection` as an ``AIRFLOW_CONN_*`` value."""
        return json.dumps(self.connection(url, secret, **extra))


MODELARTS_PROJECT_ID = "0a1b2c3d4e5f"
PAI_WORKSPACE_ID = "86995"
LOCAL_BUCKET = "ml-training-local"
"""The bucket of each local connection's ``storage_root`` (S3, OSS, OBS on the local platform)."""

LOCAL_FIXTURES: dict[str, LocalFixture] = {
    f.conn_type: f
    for f in (
        LocalFixture("tensorone", "tensorone_local"),
        LocalFixture("together", "together_local"),
        LocalFixture(
            "aws",
            "aws_local",
            login="AKIDLOCALTEST",
            key_options={"sagemaker_access_key_id": "login", "sagemaker_secret_access_key": "secret"},
            extra={"region_name": "us-east-1", "storage_root": f"s3://{LOCAL_BUCKET}/"},
            url_in_extra="endpoint_url",
            url_also_at=("service_config.sts.endpoint_url",),
        ),
        LocalFixture(
            "pai",
            "pai_local",
            login="LTAILOCALTEST",
            key_options={"pai_access_key_id": "login", "pai_access_key_secret": "secret"},
            extra={
                "region": "cn-hangzhou",
                "workspace_id": PAI_WORKSPACE_ID,
                "storage_root": f"oss://{LOCAL_BUCKET}/",
            },
        ),
        LocalFixture(
            "modelarts",
            "modelarts_local",
            login="HWLOCALTESTAK",
            key_options={"modelarts_access_key": "login", "modelarts_secret_key": "secret"},
            extra={
                "region": "cn-north-4",
                "project_id": MODELARTS_PROJECT_ID,
                "storage_root": f"obs://{LOCAL_BUCKET}/",
            },
        ),
    )
}


def server_options(secret: str = LOCAL_SECRET, **options: Any) -> dict[str, Any]:
    """Options of a local platform that accepts every fixture's connection (the API key and each
    key pair), plus ``options``."""
    merged: dict[str, Any] = {"api_key": secret}
    for fixture in LOCAL_FIXTURES.values():
        merged.update(fixture.server_options(secret))
    return {**merged, **options}


def connection_env(url: str, secret: str = LOCAL_SECRET) -> dict[str, str]:
    """``AIRFLOW_CONN_<CONN_ID>`` for every fixture, pointing at the local platform at ``url``."""
    return {
        f"AIRFLOW_CONN_{f.conn_id.upper()}": f.connection_json(url, secret) for f in LOCAL_FIXTURES.values()
    }
