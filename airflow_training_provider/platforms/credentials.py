"""What a dialect authenticates with: :class:`Credentials` (read from the connection by the
platform's descriptor, open to a subclass with fields of its own) and, for credentials that expire,
a :class:`CredentialSource` asked through the one process-wide :data:`TOKEN_CACHE`.

A source is anything that hands out a secret with an expiry: an OAuth client-credentials exchange
(a bearer token of about an hour), a cloud SDK's refreshable keys (botocore's, Alibaba's credential
client), an IAM token. The dialect asks ``TOKEN_CACHE.get(credentials.source)`` while it signs a
request; the cache returns the value it holds until :attr:`CredentialSource.refresh_ahead` seconds
before that value expires, then asks the source again, once, however many threads sign at that
moment. A refresh that fails while the held value is still valid keeps it in use (a warning, once);
one that fails after it expired is a :class:`~airflow_training_provider.errors.PlatformAuthError`.

All times are epoch seconds (``time.time()``), durations are seconds.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

from airflow_training_provider.errors import PlatformAuthError, TransientPlatformError

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Expiring(Generic[T]):
    """A secret value and when it stops being accepted.

    :ivar value: the secret (a bearer token, a key triple...); kept out of ``repr``.
    :ivar expires_at: epoch seconds after which the platform refuses ``value``; ``None`` when it
        never expires (static keys).
    """

    value: T = field(repr=False)
    expires_at: float | None = None


class CredentialSource(ABC, Generic[T]):
    """Where a platform's current secret comes from, asked at signing time through
    :data:`TOKEN_CACHE` (never directly: the cache keeps one value per :attr:`key` for the process).

    A subclass implements :meth:`fetch` (may do I/O: it is called from a thread by the async hook)
    and :attr:`key`, and may lower :attr:`refresh_ahead`. Put it in :attr:`Credentials.source`
    (``PlatformDescriptor.credential_source`` does that for a connection).
    """

    #: seconds before ``expires_at`` the cache asks for a new value (never later than half the
    #: value's remaining life when it was fetched). A source whose values live shorter lowers it.
    refresh_ahead: ClassVar[float] = 300.0

    @property
    @abstractmethod
    def key(self) -> str:
        """A non-secret, stable name of what this source hands out: two sources with the same key
        (and class) give the same credentials, so they share one cached value and one HTTP session.
        It appears in log lines and errors: hash any secret part (:func:`secret_digest`)."""

    @abstractmethod
    def fetch(self) -> Expiring[T]:
        """The current value with its expiry (epoch seconds), asking the issuer if needed.

        :raises TransientPlatformError: the issuer is unreachable for now (retried by the caller
            like a failed call; the request was not sent).
        :raises Exception: anything else is reported as a
            :class:`~airflow_training_provider.errors.PlatformAuthError` naming :attr:`key`.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key!r})"


def secret_digest(*values: Any, length: int = 12) -> str:
    """The first ``length`` hex characters of the SHA-256 of ``values``: a secret (or a set of
    connection fields) made fit for a :attr:`CredentialSource.key` or a log line."""
    return hashlib.sha256(repr(values).encode()).hexdigest()[:length]


class SigningKeys(NamedTuple):
    """An access key pair and its session token, as signed cloud APIs use them (AWS SigV4, Alibaba
    ACS3, Huawei SDK-HMAC-SHA256). A source of refreshable keys hands these out."""

    access_key_id: str
    secret_access_key: str
    session_token: str | None = None

    def __repr__(self) -> str:
        return f"SigningKeys(access_key_id={self.access_key_id!r})"


class SelfRefreshingSource(CredentialSource[SigningKeys]):
    """Keys from a cloud SDK's credentials object that refreshes itself ahead of expiry (botocore's
    refreshable credentials, Alibaba's credential client) and does not say when its keys expire
    without private attributes.

    The SDK hands out keys valid for at least 10 more minutes (botocore refreshes before the last
    10, Alibaba's client before the last 15): a value is therefore held as valid for
    :attr:`hold_seconds` (300 s) and the SDK asked again after ``hold_seconds - refresh_ahead``
    (150 s) — a cheap call while its own keys are fresh. If that call fails, the held keys serve at
    most 150 s more, well inside the SDK's guarantee. A subclass implements :meth:`current`.
    """

    #: seconds a value is held as valid (well inside the SDK's own 10-minute margin).
    hold_seconds: ClassVar[float] = 300.0
    refresh_ahead: ClassVar[float] = 150.0

    def __init__(self, key: str) -> None:
        self._key = key

    @property
    def key(self) -> str:
        return self._key

    @abstractmethod
    def current(self) -> SigningKeys | Expiring[SigningKeys]:
        """The SDK's current keys (it refreshes them if due); an :class:`Expiring` to say they never
        expire (static keys) or when they do."""

    def fetch(self) -> Expiring[SigningKeys]:
        keys = self.current()
        return keys if isinstance(keys, Expiring) else Expiring(keys, time.time() + self.hold_seconds)


@dataclass
class _Held:
    value: Any = field(repr=False)
    expires_at: float | None
    refresh_at: float | None  # when to ask the source again; None: never
    warned: bool = False  # a failed refresh was logged (once per held value)


class TokenCache:
    """The process's credential values, one per source (class and :attr:`CredentialSource.key`).

    :meth:`get` is thread-safe: the sync hook may sign from several threads, the async hook signs
    from threads of the event loop's executor; a refresh is done by one caller while the others
    for the same source wait for it (other sources are not held up).

    :param clock: epoch seconds now (``time.time``); tests pass a fake one.
    :ivar retry_failed_after: seconds a failed refresh is not retried while the held value is valid.
    """

    retry_failed_after: ClassVar[float] = 30.0

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._held: dict[tuple[str, str], _Held] = {}
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def get(self, source: CredentialSource[T]) -> T:
        """The current value of ``source``: the held one until ``refresh_ahead`` seconds before its
        expiry, else a newly fetched one.

        :raises PlatformAuthError: the refresh failed and no valid value is held (names the source).
        :raises TransientPlatformError: the same, when the source said the failure is transient.
        """
        name = (f"{type(source).__module__}.{type(source).__qualname__}", source.key)
        held = self._held.get(name)
        if held is not None and _fresh(held, self.clock()):
            return held.value
        with self._lock(name):
            now = self.clock()
            held = self._held.get(name)
            if held is not None and _fresh(held, now):  # another thread refreshed it meanwhile
                return held.value
            try:
                fetched = source.fetch()
            except Exception as exc:  # noqa: BLE001 - any failure of the issuer is reported alike
                if held is not None and (held.expires_at is None or now < held.expires_at):
                    if not held.warned:
                        held.warned = True
                        log.warning(
                            "Could not refresh the credentials of %s (%s); using the held ones until "
                            "they expire in %.0f s",
                            source.key,
                            exc.__class__.__name__,
                            (held.expires_at or now) - now,
                        )
                    held.refresh_at = min(now + self.retry_failed_after, held.expires_at or float("inf"))
                    return held.value
                if isinstance(exc, TransientPlatformError):
                    raise TransientPlatformError(
                        f"credentials of {source.key} could not be fetched: {exc}", sent=False
                    ) from exc
                raise PlatformAuthError(
                    f"credentials of {source.key} could not be fetched: {exc.__class__.__name__}: {exc}"
                ) from exc
            self._held[name] = _Held(fetched.value, fetched.expires_at, _refresh_at(fetched, source, now))
            return fetched.value

    def clear(self) -> None:
        """Forget every held value (tests; a process that rotated its credentials)."""
        self._held.clear()

    def _lock(self, name: tuple[str, str]) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(name, threading.Lock())


def _fresh(held: _Held, now: float) -> bool:
    return held.refresh_at is None or now < held.refresh_at


def _refresh_at(fetched: Expiring[Any], source: CredentialSource[Any], now: float) -> float | None:
    """``refresh_ahead`` seconds before the expiry, but not before half of the remaining life (a
    token of 2 minutes with a 5-minute ``refresh_ahead`` is not fetched again on every call)."""
    if fetched.expires_at is None:
        return None
    life = fetched.expires_at - now
    return fetched.expires_at - min(source.refresh_ahead, max(life, 0.0) / 2)


#: the process's one token cache: every dialect gets the current value of a source from it.
TOKEN_CACHE = TokenCache()


def secret(**kwargs: Any) -> Any:
    """A :class:`Credentials` field holding a secret: ``None`` by default and kept out of ``repr``
    (``client_secret: str | None = secret()``)."""
    return field(default=None, repr=False, **kwargs)


@dataclass(frozen=True)
class Credentials:
    """What a dialect may use to authenticate, read from the connection by its platform descriptor.

    Secrets are kept out of ``repr``. A platform uses the fields it needs; one that needs others
    subclasses this (a frozen dataclass, every field with a default; secrets declared with
    :func:`secret`) and names the class in its descriptor (``credentials_class``):

    .. code-block:: python

        @dataclass(frozen=True)
        class AzureCredentials(Credentials):
            tenant_id: str | None = None
            client_id: str | None = None
            client_secret: str | None = secret()

    :ivar api_key: bearer-style API key (TensorOne, Together).
    :ivar access_key_id: access key id of a signed cloud API (AWS, Huawei, Alibaba).
    :ivar secret_access_key: the matching secret.
    :ivar session_token: temporary-credential token (STS), when there is one.
    :ivar region: cloud region, e.g. ``us-east-1``.
    :ivar project: project or workspace id the API's paths or headers carry.
    :ivar source: where expiring credentials come from, asked at signing time through
        :data:`TOKEN_CACHE` (AWS: botocore's refreshable keys; an OAuth platform: its token
        exchange); ``None`` for static ones.
    """

    api_key: str | None = secret()
    access_key_id: str | None = None
    secret_access_key: str | None = secret()
    session_token: str | None = secret()
    region: str | None = None
    project: str | None = None
    source: CredentialSource[Any] | None = field(default=None, repr=False, compare=False)

    def signing_keys(self) -> SigningKeys:
        """The access key triple to sign with now: the source's current keys (through
        :data:`TOKEN_CACHE`) when there is a source, else the fields (missing ones as ``""``).

        :raises PlatformAuthError: the source's keys could not be refreshed (see :meth:`TokenCache.get`).
        """
        if self.source is None:
            return SigningKeys(self.access_key_id or "", self.secret_access_key or "", self.session_token)
        keys = TOKEN_CACHE.get(self.source)
        if not isinstance(keys, SigningKeys):
            raise TypeError(f"{self.source!r} hands out {type(keys).__name__}, not SigningKeys")
        return keys

    def fingerprint(self) -> str:
        """A SHA-256 hex digest of every field of the actual class (secrets included, so credentials
        that differ only in a secret differ here; the digest shows none of them) and of the source's
        :attr:`~CredentialSource.key`: what tells apart the HTTP sessions the async hook shares."""
        parts: list[Any] = [f"{type(self).__module__}.{type(self).__qualname__}"]
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, CredentialSource):
                value = (f"{type(value).__module__}.{type(value).__qualname__}", value.key)
            parts.append((f.name, value))
        return hashlib.sha256(repr(parts).encode()).hexdigest()


def connection_fields(credentials_class: type[Credentials]) -> frozenset[str]:
    """The fields of ``credentials_class`` a connection may fill (all but ``source``)."""
    return frozenset(f.name for f in fields(credentials_class) if f.name != "source")
