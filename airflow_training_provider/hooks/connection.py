"""An Airflow connection read once, the same way for the worker and the triggerer.

:class:`PlatformConnection` holds everything a driver needs: the platform (from the connection
type), the API base URL (one rule for both hooks, :func:`base_url_of`), the credentials (as the
platform's descriptor reads them) and the connection as the HTTP provider's hooks should see it —
without the credentials, so that the HTTP provider neither turns them into Basic auth nor sends
credential extras as headers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from airflow_training_provider.budget import AccountBudget, ApiRates, account_budget
from airflow_training_provider.errors import PlatformAuthError
from airflow_training_provider.platforms import get_platform
from airflow_training_provider.platforms.base import Credentials, Dialect
from airflow_training_provider.platforms.descriptor import PlatformDescriptor, base_url_of

__all__ = ["PlatformConnection", "base_url_of"]


@cache
def _dialect_of(dialect: type[Dialect]) -> Dialect:
    return dialect()


@dataclass(frozen=True)
class PlatformConnection:
    """A resolved training-platform connection.

    :ivar conn_id: the Airflow connection id.
    :ivar platform: the platform its type names.
    :ivar base_url: API base URL (:func:`base_url_of`).
    :ivar credentials: what the dialect authenticates with (never logged: secrets are kept out of repr).
    :ivar transport_extra: the connection extras minus the credentials the platform reads from them
        (proxies, ``verify``, extra headers... as the HTTP provider interprets them).
    :ivar service_urls: base URL of each companion service (:attr:`ApiRequest.service`).
    :ivar api_rates: the account's requests per hour (the platform's documented rates, the
        connection's ``api_budget`` extra over them).
    :ivar storage_root: the ``storage_root`` extra: where a portable spec's relative locations are
        (``s3://my-bucket/ml/``, ending in ``/``), or ``None``.
    """

    conn_id: str
    platform: PlatformDescriptor
    base_url: str
    credentials: Credentials = field(repr=False)
    transport_extra: dict[str, Any] = field(default_factory=dict)
    service_urls: dict[str, str] = field(default_factory=dict)
    api_rates: ApiRates = ApiRates()
    storage_root: str | None = None

    @classmethod
    def resolve(cls, conn: Any) -> PlatformConnection:
        """Read Airflow connection ``conn`` the way its platform says (:meth:`PlatformDescriptor.connect`).

        :raises ValueError: its type is not a training platform.
        :raises PlatformAuthError: it lacks a credential the platform needs (named).
        """
        platform = get_platform(conn.conn_type)
        parts = platform.connect(conn)
        return cls(
            conn.conn_id,
            platform,
            parts.base_url,
            parts.credentials,
            parts.transport_extra,
            parts.service_urls,
            parts.api_rates,
            platform.storage_root_of(conn),
        )

    @property
    def account_key(self) -> tuple[str, str]:
        """The account, without a secret: the endpoint and the credentials' digest — or, for
        credentials with a source (an assumed AWS role, an OAuth exchange), the source's key, which
        stays the same when the keys it gives rotate."""
        source = self.credentials.source
        return self.base_url, source.key if source is not None else self.credentials.fingerprint()

    def budget(self) -> AccountBudget:
        """This process's budget of the connection's account (:func:`account_budget`): one per
        endpoint and credentials, whichever connection names them."""
        return account_budget(
            self.account_key,
            self.api_rates,
            f"connection {self.conn_id!r} ({self.platform.display_name})",
        )

    @property
    def dialect(self) -> Dialect:
        """The platform's dialect: one instance per process (dialects hold no state)."""
        return _dialect_of(self.platform.dialect)

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
        """``exc`` with a hint naming this connection and what to check (for 401/403 answers); its
        ``message`` stays the platform's own (a refused auxiliary read is reported without the hint)."""
        exc.hint = (
            f"the platform refused the credentials of connection {self.conn_id!r} "
            f"({self.platform.display_name}); check its {self.platform.credential_hint}"
        )
        return exc
