"""An Airflow connection read once, the same way for the worker and the triggerer.

:class:`PlatformConnection` holds everything a driver needs: the platform (from the connection
type), the API base URL (one rule for both hooks), the credentials (as the platform's descriptor
reads them) and the connection as the HTTP provider's hooks should see it — without the credentials,
so that the HTTP provider neither turns them into Basic auth nor sends credential extras as headers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from airflow_training_provider.errors import PlatformAuthError
from airflow_training_provider.platforms import get_platform
from airflow_training_provider.platforms.base import Credentials, Dialect
from airflow_training_provider.platforms.descriptor import PlatformDescriptor

_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def base_url_of(host: str | None, schema: str | None, port: int | None, default: str) -> str:
    """The API base URL of a connection, without a trailing slash.

    * no host → ``default`` (the platform's public API);
    * a host with a scheme (``http://127.0.0.1:8765``, ``https://api.example.com/prefix``) is used as
      it is;
    * a bare host gets the connection's ``schema`` when that is ``http``/``https``, else ``https``
      (``http`` for a loopback host: the local training platform);
    * ``port`` is added when the host names none.
    """
    host = (host or "").strip()
    if not host:
        return default.rstrip("/")
    if "://" not in host:
        name = urlsplit(f"//{host}").hostname or ""
        scheme = schema if schema in ("http", "https") else ("http" if name in _LOOPBACK_HOSTS else "https")
        host = f"{scheme}://{host}"
    parts = urlsplit(host)
    netloc = parts.netloc
    if port and parts.port is None:
        netloc = f"{netloc}:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), parts.query, "")).rstrip("/")


@dataclass(frozen=True)
class PlatformConnection:
    """A resolved training-platform connection.

    :ivar conn_id: the Airflow connection id.
    :ivar platform: the platform its type names.
    :ivar base_url: API base URL (:func:`base_url_of`).
    :ivar credentials: what the dialect authenticates with (never logged: secrets are kept out of repr).
    :ivar transport_extra: the connection extras minus the credentials the platform reads from them
        (proxies, ``verify``, extra headers... as the HTTP provider interprets them).
    """

    conn_id: str
    platform: PlatformDescriptor
    base_url: str
    credentials: Credentials = field(repr=False)
    transport_extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def resolve(cls, conn: Any) -> PlatformConnection:
        """Read Airflow connection ``conn``.

        :raises ValueError: its type is not a training platform.
        :raises PlatformAuthError: it lacks a credential the platform needs (named).
        """
        platform = get_platform(conn.conn_type)
        credentials = platform.read_credentials(conn)
        missing = platform.missing_credentials(credentials)
        if missing:
            raise PlatformAuthError(
                f"Connection {conn.conn_id!r} ({platform.display_name}) has no "
                + ", ".join(_label(platform, m) for m in missing)
                + f": set its {' and '.join(missing)}"
            )
        reserved = {k for key in platform.extra_keys for k in (key, f"extra__{platform.conn_type}__{key}")}
        extra = {k: v for k, v in (conn.extra_dejson or {}).items() if k not in reserved}
        base_url = base_url_of(conn.host, conn.schema, conn.port, platform.default_url(credentials))
        return cls(conn.conn_id, platform, base_url, credentials, extra)

    @cached_property
    def dialect(self) -> Dialect:
        return self.platform.dialect()

    def transport_connection(self) -> Any:
        """The connection the HTTP provider's hooks see: base URL as host, transport extras only,
        no login or password."""
        from airflow.sdk.definitions.connection import Connection

        return Connection(
            conn_id=self.conn_id,
            conn_type="http",
            host=self.base_url,
            extra=json.dumps(self.transport_extra) if self.transport_extra else None,
        )

    def explain_auth_error(self, exc: PlatformAuthError) -> PlatformAuthError:
        """``exc`` with a hint naming this connection and what to check (for 401/403 answers)."""
        fields = " / ".join(dict.fromkeys(self.platform.credentials.values()))
        exc.message = (
            f"{exc.message} — the platform refused the credentials of connection {self.conn_id!r} "
            f"({self.platform.display_name}); check its {fields}"
        )
        return exc


def _label(platform: PlatformDescriptor, source: str) -> str:
    name = next(n for n, s in platform.credentials.items() if s == source)
    return platform.labels.get(name, name.replace("_", " "))
