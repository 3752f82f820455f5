"""A platform as one registered unit: who it is, how its Airflow connection looks, its dialect.

Everything Airflow learns about a platform (connection type, hook class, connection form,
integration entry in ``get_provider_info``) is generated from its :class:`PlatformDescriptor`, and
the hooks read its credentials through it. A new platform writes one descriptor next to its dialect
(``docs/adding-a-platform.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from airflow_training_provider.budget import EXTRA_KEY as BUDGET_EXTRA
from airflow_training_provider.budget import ApiRates
from airflow_training_provider.errors import PlatformAuthError
from airflow_training_provider.platforms.base import Dialect
from airflow_training_provider.platforms.credentials import Credentials, CredentialSource, connection_fields

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
class ConnectionParts:
    """What a platform reads from an Airflow connection: its credentials, the API base URL, and
    the extras left for the HTTP session (proxies, ``verify``, extra headers), and the base URL of
    each companion service a dialect's request may name (:attr:`ApiRequest.service`: SageMaker's
    ``logs``)."""

    credentials: Credentials = field(repr=False)
    base_url: str
    transport_extra: dict[str, Any] = field(default_factory=dict)
    service_urls: dict[str, str] = field(default_factory=dict)
    api_rates: ApiRates = ApiRates()


#: the connection extra naming where a portable spec's relative locations are (``s3://bucket/ml/``)
STORAGE_ROOT_EXTRA = "storage_root"

#: the Airflow connection fields a credential may come from, besides ``extra.<key>``.
_CONNECTION_FIELDS = ("login", "password")


@dataclass(frozen=True)
class PlatformDescriptor:
    """One platform.

    :ivar conn_type: Airflow connection type, e.g. ``"tensorone"``.
    :ivar display_name: name shown in the UI and the provider's integration list.
    :ivar class_name: stem of the generated hook class (``"TensorOne"`` → ``TensorOneHook``).
    :ivar dialect: the platform's :class:`~airflow_training_provider.platforms.base.Dialect`.
    :ivar default_base_url: API base URL used when the connection has no host; may contain
        ``{region}`` and ``{project}``, filled from the credentials.
    :ivar docs_url: the vendor's API documentation.
    :ivar credentials: where each field of :attr:`credentials_class` comes from: ``"login"``,
        ``"password"`` or ``"extra.<key>"``.
    :ivar required_credentials: credentials fields a connection must set; checked before any call.
    :ivar labels: form label of each credentials field (and of ``"host"``).
    :ivar placeholders: form placeholder of each credentials field (and of ``"host"``).
    :ivar api_rates: the requests per hour the vendor documents for an account on its own
        endpoint (:class:`~airflow_training_provider.budget.ApiRates`; TensorOne's 500 reads, 50
        writes and 10 creates); none by default: not paced, backed off when throttled. A
        connection's ``api_budget`` extra overrides them (:meth:`rates_of`).
    :ivar credentials_class: the :class:`~airflow_training_provider.platforms.credentials.Credentials`
        (sub)class the connection is read into: a platform with credentials of its own (an OAuth
        client id and secret, a workspace) subclasses it and names the subclass here.
    """

    conn_type: str
    display_name: str
    class_name: str
    dialect: type[Dialect]
    default_base_url: str
    docs_url: str
    credentials: Mapping[str, str] = field(default_factory=lambda: {"api_key": "password"})
    required_credentials: tuple[str, ...] = ("api_key",)
    labels: Mapping[str, str] = field(default_factory=lambda: {"api_key": "API key"})
    placeholders: Mapping[str, str] = field(default_factory=dict)
    credentials_class: type[Credentials] = Credentials
    api_rates: ApiRates = ApiRates()

    def __post_init__(self) -> None:
        known = connection_fields(self.credentials_class)
        for name, source in self.credentials.items():
            if name not in known:
                raise ValueError(f"{self.conn_type}: unknown credentials field {name!r}")
            if source not in _CONNECTION_FIELDS and not source.startswith("extra."):
                raise ValueError(
                    f"{self.conn_type}: credentials source {source!r} is not login/password/extra.*"
                )

    @property
    def hook_class_name(self) -> str:
        return f"{self.class_name}Hook"

    @property
    def default_conn_id(self) -> str:
        return f"{self.conn_type}_default"

    @property
    def extra_keys(self) -> tuple[str, ...]:
        """Connection extras this platform reads as credentials (not sent as HTTP headers)."""
        return tuple(s.removeprefix("extra.") for s in self.credentials.values() if s.startswith("extra."))

    #: whether this provider registers ``conn_type`` with Airflow (``False`` when another provider
    #: owns it, like the Amazon provider's ``aws``).
    registers_connection_type = True

    # -- reading a connection ---------------------------------------------------------------------
    def connect(self, conn: Any) -> ConnectionParts:
        """Credentials, base URL and transport extras of Airflow connection ``conn``.

        :raises PlatformAuthError: a required credential is missing (named, with the field to set).
        """
        credentials = self.read_credentials(conn)
        missing = self.missing_credentials(credentials)
        if missing:
            labels = ", ".join(self._label(m) for m in missing)
            raise PlatformAuthError(
                f"Connection {conn.conn_id!r} ({self.display_name}) has no {labels}: set its {' and '.join(missing)}"
            )
        source = self.credential_source(credentials, conn)
        if source is not None:
            credentials = replace(credentials, source=source)
        base_url = base_url_of(conn.host, conn.schema, conn.port, self.default_url(credentials))
        return ConnectionParts(
            credentials, base_url, self.transport_extra(conn), api_rates=self.rates_of(conn, base_url)
        )

    def storage_root_of(self, conn: Any) -> str | None:
        """Connection ``conn``'s ``storage_root`` extra: the object storage location a portable
        spec's relative locations are under (``s3://my-bucket/ml/``, given a trailing ``/``);
        ``None`` when not set. Checked only where it is used
        (:func:`~airflow_training_provider.portable.check_storage_root`): a malformed one must not
        break the connection's native specs."""
        root = (conn.extra_dejson or {}).get(STORAGE_ROOT_EXTRA)
        if root in (None, ""):
            return None
        root = str(root)
        return root if root.endswith("/") else root + "/"

    def transport_extra(self, conn: Any) -> dict[str, Any]:
        """Connection ``conn``'s extras for the HTTP session: without the credentials read from
        them and without ``api_budget`` (neither is ever sent as a header)."""
        reserved = {k for key in self.extra_keys for k in (key, f"extra__{self.conn_type}__{key}")}
        reserved.update((BUDGET_EXTRA, STORAGE_ROOT_EXTRA))
        return {k: v for k, v in (conn.extra_dejson or {}).items() if k not in reserved}

    def rates_of(self, conn: Any, base_url: str) -> ApiRates:
        """The account's requests per hour for connection ``conn`` reaching ``base_url``:
        :attr:`api_rates` (the vendor's documented rates, for its own endpoint only: another host —
        the local training platform, an enterprise endpoint with other limits — has none unless
        declared) with the connection's ``api_budget`` extra over them.

        :raises ValueError: the extra is malformed (named, with what is expected)."""
        vendor = urlsplit(base_url).hostname == urlsplit(self.default_base_url).hostname
        try:
            return (self.api_rates if vendor else ApiRates()).merged(
                (conn.extra_dejson or {}).get(BUDGET_EXTRA)
            )
        except ValueError as exc:
            raise ValueError(f"Connection {conn.conn_id!r}: {exc}") from None

    def credential_source(self, credentials: Credentials, conn: Any) -> CredentialSource[Any] | None:
        """Where expiring credentials come from for connection ``conn``, read into ``credentials``
        (set as their ``source`` by :meth:`connect`): an OAuth platform returns its token exchange
        here. ``None`` (the default): the credentials are used as read."""
        return None

    @property
    def credential_hint(self) -> str:
        """The connection fields that hold the credentials (for error messages)."""
        return " / ".join(dict.fromkeys(self.credentials.values()))

    def _label(self, source: str) -> str:
        name = next(n for n, s in self.credentials.items() if s == source)
        return self.labels.get(name, name.replace("_", " "))

    def read_credentials(self, conn: Any) -> Credentials:
        """The credentials in Airflow connection ``conn``, as a :attr:`credentials_class`. An extra
        is read under its plain key or the form's ``extra__<conn_type>__<key>`` key."""
        extra = conn.extra_dejson or {}
        values: dict[str, Any] = {}
        for name, source in self.credentials.items():
            if source.startswith("extra."):
                key = source.removeprefix("extra.")
                value = extra.get(key, extra.get(f"extra__{self.conn_type}__{key}"))
            else:
                value = getattr(conn, source, None)
            values[name] = value if value not in ("", None) else None
        return self.credentials_class(**values)

    def missing_credentials(self, credentials: Credentials) -> list[str]:
        """Required credentials fields that are empty, as the connection field to set (``password``)."""
        return [self.credentials[n] for n in self.required_credentials if getattr(credentials, n) is None]

    def default_url(self, credentials: Credentials) -> str:
        return self.default_base_url.format(
            region=credentials.region or "", project=credentials.project or ""
        )

    # -- the Airflow connection form ------------------------------------------------------------
    def ui_field_behaviour(self) -> dict[str, Any]:
        """Hidden fields, labels and placeholders of the connection form (hook ``get_ui_field_behaviour``)."""
        used = {s for s in self.credentials.values() if s in _CONNECTION_FIELDS}
        relabeling = {"host": self.labels.get("host", "API base URL (optional)")}
        placeholders = {"host": self.placeholders.get("host", self.default_base_url)}
        for name, source in self.credentials.items():
            if source in _CONNECTION_FIELDS:
                relabeling[source] = self.labels.get(name, name.replace("_", " "))
                if name in self.placeholders:
                    placeholders[source] = self.placeholders[name]
        return {
            "hidden_fields": [f for f in ("schema", "login", "password", "port") if f not in used],
            "relabeling": relabeling,
            "placeholders": placeholders,
        }

    def conn_fields(self) -> dict[str, Any]:
        """Extra fields of the connection form (provider info ``conn-fields``), one per credential
        read from the extras."""
        out = {}
        for name, source in self.credentials.items():
            if source.startswith("extra."):
                out[source.removeprefix("extra.")] = {
                    "label": self.labels.get(name, name.replace("_", " ")),
                    "schema": {"type": ["string", "null"]},
                    "description": self.placeholders.get(name, ""),
                }
        return out

    def provider_connection_type(self, hooks_module: str) -> dict[str, Any] | None:
        """This platform's ``connection-types`` entry of ``get_provider_info`` (``None`` when another
        provider owns the connection type)."""
        if not self.registers_connection_type:
            return None
        entry: dict[str, Any] = {
            "hook-class-name": f"{hooks_module}.{self.hook_class_name}",
            "connection-type": self.conn_type,
            "hook-name": self.display_name,
            "ui-field-behaviour": {k.replace("_", "-"): v for k, v in self.ui_field_behaviour().items()},
        }
        if conn_fields := self.conn_fields():
            entry["conn-fields"] = conn_fields
        return entry
