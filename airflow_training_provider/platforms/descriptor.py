"""A platform as one registered unit: who it is, how its Airflow connection looks, its dialect.

Everything Airflow learns about a platform (connection type, hook class, connection form,
integration entry in ``get_provider_info``) is generated from its :class:`PlatformDescriptor`, and
the hooks read its credentials through it. A new platform writes one descriptor next to its dialect
(``docs/adding-a-platform.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from airflow_training_provider.platforms.base import Credentials, Dialect

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
    :ivar credentials: where each :class:`~airflow_training_provider.platforms.base.Credentials`
        field comes from: ``"login"``, ``"password"`` or ``"extra.<key>"``.
    :ivar required_credentials: credentials fields a connection must set; checked before any call.
    :ivar labels: form label of each credentials field (and of ``"host"``).
    :ivar placeholders: form placeholder of each credentials field (and of ``"host"``).
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

    def __post_init__(self) -> None:
        known = {f.name for f in fields(Credentials)}
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

    # -- credentials ------------------------------------------------------------------------------
    def read_credentials(self, conn: Any) -> Credentials:
        """The credentials in Airflow connection ``conn``. An extra is read under its plain key or
        the form's ``extra__<conn_type>__<key>`` key."""
        extra = conn.extra_dejson or {}
        values: dict[str, Any] = {}
        for name, source in self.credentials.items():
            if source.startswith("extra."):
                key = source.removeprefix("extra.")
                value = extra.get(key, extra.get(f"extra__{self.conn_type}__{key}"))
            else:
                value = getattr(conn, source, None)
            values[name] = value if value not in ("", None) else None
        return Credentials(**values)

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

    def provider_connection_type(self, hooks_module: str) -> dict[str, Any]:
        """This platform's ``connection-types`` entry of ``get_provider_info``."""
        entry: dict[str, Any] = {
            "hook-class-name": f"{hooks_module}.{self.hook_class_name}",
            "connection-type": self.conn_type,
            "hook-name": self.display_name,
            "ui-field-behaviour": {k.replace("_", "-"): v for k, v in self.ui_field_behaviour().items()},
        }
        if conn_fields := self.conn_fields():
            entry["conn-fields"] = conn_fields
        return entry
