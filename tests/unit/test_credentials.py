"""The token cache (pure logic on a fake clock), the Credentials fingerprint that keys shared
sessions, and the SDK-backed sources of SageMaker and PAI."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import pytest

from airflow_training_provider.errors import PlatformAuthError, TransientPlatformError
from airflow_training_provider.platforms.credentials import (
    Credentials,
    CredentialSource,
    Expiring,
    SigningKeys,
    TokenCache,
    secret,
)
from tests.unit.canned import FakeClock

HOUR = 3600.0


class Issuer(CredentialSource[str]):
    """Hands out ``token-1``, ``token-2``... each valid ``lifetime`` seconds (``None``: forever);
    ``fail`` is raised instead while set."""

    def __init__(self, clock: FakeClock, lifetime: float | None = HOUR, key: str = "issuer") -> None:
        self.clock, self.lifetime, self._key = clock, lifetime, key
        self.calls = 0
        self.fail: Exception | None = None

    @property
    def key(self) -> str:
        return self._key

    def fetch(self) -> Expiring[str]:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        expires = None if self.lifetime is None else self.clock() + self.lifetime
        return Expiring(f"token-{self.calls}", expires)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000.0)


def test_the_held_token_is_returned_until_refresh_ahead_seconds_before_it_expires(clock):
    cache, issuer = TokenCache(clock), Issuer(clock)
    assert cache.get(issuer) == "token-1"
    clock.now += HOUR - issuer.refresh_ahead - 1  # 1 s before the refresh point
    assert cache.get(issuer) == "token-1" and issuer.calls == 1
    clock.now += 1  # at the refresh point: 300 s before expiry
    assert cache.get(issuer) == "token-2" and issuer.calls == 2
    assert cache.get(issuer) == "token-2" and issuer.calls == 2


def test_a_source_may_lower_refresh_ahead_and_a_short_lived_token_is_refreshed_at_half_life(clock):
    class Eager(Issuer):
        refresh_ahead = 10.0

    eager = Eager(clock, lifetime=60.0)
    cache = TokenCache(clock)
    cache.get(eager)
    clock.now += 49
    assert cache.get(eager) == "token-1"
    clock.now += 1
    assert cache.get(eager) == "token-2"

    short = Issuer(clock, lifetime=120.0, key="short")  # shorter than the default 300 s refresh_ahead
    cache.get(short)
    clock.now += 59
    assert cache.get(short) == "token-1", "not fetched again on every call"
    clock.now += 1
    assert cache.get(short) == "token-2"


def test_a_token_without_expiry_is_never_refreshed(clock):
    cache, issuer = TokenCache(clock), Issuer(clock, lifetime=None)
    cache.get(issuer)
    clock.now += 10 * 365 * 24 * HOUR
    assert cache.get(issuer) == "token-1" and issuer.calls == 1


def test_sources_are_held_apart_by_class_and_key(clock):
    class Other(Issuer):
        pass

    cache = TokenCache(clock)
    a, b, c = Issuer(clock, key="a"), Issuer(clock, key="b"), Other(clock, key="a")
    assert [cache.get(s) for s in (a, b, c)] == ["token-1"] * 3
    assert (a.calls, b.calls, c.calls) == (1, 1, 1)
    twin = Issuer(clock, key="a")  # same class and key: the same credentials, one held value
    assert cache.get(twin) == "token-1" and twin.calls == 0


def test_a_failed_refresh_keeps_serving_a_still_valid_token_with_one_warning(clock, caplog):
    cache, issuer = TokenCache(clock), Issuer(clock)
    cache.get(issuer)
    clock.now += HOUR - 200  # past the refresh point, 200 s before expiry
    issuer.fail = ConnectionResetError("token endpoint down")
    with caplog.at_level(logging.WARNING, logger="airflow_training_provider.platforms.credentials"):
        assert cache.get(issuer) == "token-1"
        assert cache.get(issuer) == "token-1"
        assert issuer.calls == 2, "a failed refresh is not retried on every call"
        clock.now += TokenCache.retry_failed_after
        assert cache.get(issuer) == "token-1" and issuer.calls == 3, "retried after 30 s"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "issuer" in warnings[0].getMessage()
    assert "ConnectionResetError" in warnings[0].getMessage()
    issuer.fail = None
    clock.now += TokenCache.retry_failed_after
    assert cache.get(issuer) == "token-4", "recovers once the issuer answers"


def test_an_expired_token_whose_refresh_fails_is_an_auth_error_naming_the_source(clock):
    cache, issuer = TokenCache(clock), Issuer(clock, key="oauth2:https://login.example/t client=abc")
    cache.get(issuer)
    clock.now += HOUR
    issuer.fail = ValueError("invalid_client")
    with pytest.raises(PlatformAuthError, match=r"oauth2:https://login.example/t client=abc.*invalid_client"):
        cache.get(issuer)
    fresh = Issuer(clock, key="never-fetched")
    fresh.fail = RuntimeError("no credentials")
    with pytest.raises(PlatformAuthError, match="never-fetched"):
        cache.get(fresh)


def test_a_transient_failure_of_the_issuer_stays_transient_and_unsent(clock):
    cache, issuer = TokenCache(clock), Issuer(clock, key="k")
    issuer.fail = TransientPlatformError("503 from the token endpoint")
    with pytest.raises(TransientPlatformError, match="credentials of k") as raised:
        cache.get(issuer)
    assert raised.value.sent is False and not isinstance(raised.value, PlatformAuthError)


def test_many_threads_asking_at_once_fetch_once():
    cache = TokenCache()
    started = threading.Event()

    class Slow(CredentialSource[str]):
        calls = 0
        key = "slow"

        def fetch(self) -> Expiring[str]:
            Slow.calls += 1
            started.set()
            time.sleep(0.2)
            return Expiring("token", time.time() + HOUR)

    source, results = Slow(), []
    threads = [threading.Thread(target=lambda: results.append(cache.get(source))) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert started.is_set() and Slow.calls == 1 and results == ["token"] * 16


# -- the Credentials fingerprint (the async hook's session key) -----------------------------------------
@dataclass(frozen=True)
class WorkspaceCredentials(Credentials):
    workspace: str | None = None
    client_secret: str | None = secret()


def test_the_fingerprint_covers_every_field_of_the_actual_class_and_shows_no_secret(clock):
    one = WorkspaceCredentials(workspace="w", client_secret="s3cr3t-one")
    two = WorkspaceCredentials(workspace="w", client_secret="s3cr3t-two")
    assert one.fingerprint() != two.fingerprint()
    assert one.fingerprint() == WorkspaceCredentials(workspace="w", client_secret="s3cr3t-one").fingerprint()
    assert WorkspaceCredentials(workspace="v", client_secret="s3cr3t-one").fingerprint() != one.fingerprint()
    assert Credentials().fingerprint() != WorkspaceCredentials().fingerprint(), "the class counts"
    assert "s3cr3t" not in one.fingerprint() and "s3cr3t" not in repr(one)
    source = Issuer(clock, key="k1")
    with_source = Credentials(source=source)
    assert with_source.fingerprint() == Credentials(source=Issuer(clock, key="k1")).fingerprint()
    assert with_source.fingerprint() != Credentials(source=Issuer(clock, key="k2")).fingerprint()


def test_signing_keys_are_the_fields_or_the_sources_current_keys(clock, monkeypatch):
    from airflow_training_provider.platforms import credentials

    monkeypatch.setattr(credentials, "TOKEN_CACHE", TokenCache(clock))
    assert Credentials(access_key_id="AK", secret_access_key="SK").signing_keys() == ("AK", "SK", None)

    class Keys(CredentialSource[SigningKeys]):
        key = "keys"

        def fetch(self) -> Expiring[SigningKeys]:
            return Expiring(SigningKeys("AK2", "SK2", "T2"), None)

    keys = Credentials(source=Keys()).signing_keys()
    assert keys == ("AK2", "SK2", "T2") and "SK2" not in repr(keys)


# -- the SDK-backed sources ---------------------------------------------------------------------------
def test_botocore_keys_are_held_300_s_and_asked_again_after_150_s_static_keys_never(monkeypatch):
    from botocore.credentials import Credentials as StaticKeys
    from botocore.credentials import RefreshableCredentials

    from airflow_training_provider.platforms.sagemaker import BotocoreCredentials

    now = [1_700_000_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])  # the source's clock (epoch seconds)

    class Counting(RefreshableCredentials):
        asked = 0

        def get_frozen_credentials(self):
            Counting.asked += 1
            return super().get_frozen_credentials()

    metadata = {"access_key": "ASIA1", "secret_key": "s", "token": "t", "expiry_time": "2099-01-01T00:00:00Z"}
    source = BotocoreCredentials(
        Counting.create_from_metadata(metadata, lambda: metadata, "assume-role"), "k"
    )
    cache = TokenCache(lambda: now[0])
    assert cache.get(source) == SigningKeys("ASIA1", "s", "t") and Counting.asked == 1
    now[0] += 149
    assert cache.get(source) == SigningKeys("ASIA1", "s", "t") and Counting.asked == 1
    now[0] += 1
    cache.get(source)
    assert Counting.asked == 2 and source.fetch().expires_at == now[0] + 300

    static = BotocoreCredentials(StaticKeys("AKIA", "s"), "aws:explicit#y")
    assert static.fetch() == Expiring(SigningKeys("AKIA", "s", None), None)


def test_the_alibaba_chain_is_asked_through_the_cache_and_shared_by_every_connection():
    from types import SimpleNamespace

    from airflow_training_provider.platforms.pai import AlibabaCredentialChain

    class Client:
        asked = 0

        def get_credential(self):
            Client.asked += 1
            return SimpleNamespace(access_key_id="STS.1", access_key_secret="alisecret", security_token="t")

    cache = TokenCache(FakeClock())
    one, two = AlibabaCredentialChain(Client()), AlibabaCredentialChain(Client())
    assert cache.get(one) == cache.get(two) == SigningKeys("STS.1", "alisecret", "t") and Client.asked == 1
    assert one.key == two.key and "alisecret" not in repr(cache.get(one))
