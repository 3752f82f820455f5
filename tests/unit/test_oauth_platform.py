"""A platform with OAuth client credentials plugs in without editing a shared module.

Everything of the toy platform "Acme ML" is defined in this file, as a new platform module would
define it: a :class:`Credentials` subclass (tenant, client id and secret, workspace), a
:class:`CredentialSource` doing the client-credentials exchange, a dialect whose ``authenticate``
sends the bearer token from the token cache (the TensorOne wire format otherwise), and a
descriptor. A tiny HTTP server on 127.0.0.1 is both its token endpoint and its job API.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import pytest
from airflow.sdk.definitions.connection import Connection

from airflow_training_provider.errors import PlatformAuthError, TransientPlatformError
from airflow_training_provider.hooks.connection import PlatformConnection
from airflow_training_provider.hooks.transport import PreparedRequests
from airflow_training_provider.platforms import PLATFORMS
from airflow_training_provider.platforms.base import HttpRequest
from airflow_training_provider.platforms.credentials import (
    TOKEN_CACHE,
    Credentials,
    CredentialSource,
    Expiring,
    secret,
    secret_digest,
)
from airflow_training_provider.platforms.descriptor import PlatformDescriptor
from airflow_training_provider.platforms.tensorone import TensorOneDialect
from tests.unit.canned import FakeClock

CLOCK = FakeClock(1_700_000_000.0)  # the token cache's and the exchange's clock in these tests
TOKEN_LIFETIME = 3600


# -- the toy platform, as its module would define it --------------------------------------------------
@dataclass(frozen=True)
class AcmeCredentials(Credentials):
    """An Acme connection: an app registration in a tenant, and the workspace jobs run in."""

    tenant_id: str | None = None
    client_id: str | None = None
    client_secret: str | None = secret()
    authority: str | None = None  # the login service's URL
    workspace: str | None = None


class ClientCredentials(CredentialSource[str]):
    """OAuth 2.0 client-credentials grant: ``POST {authority}/{tenant}/oauth2/token``."""

    def __init__(self, authority: str, tenant_id: str, client_id: str, client_secret: str) -> None:
        self.url = f"{authority.rstrip('/')}/{tenant_id}/oauth2/token"
        self.client_id, self._secret = client_id, client_secret

    @property
    def key(self) -> str:
        return f"oauth2:{self.url} client={self.client_id} secret#{secret_digest(self._secret)}"

    def fetch(self) -> Expiring[str]:
        form = {
            "grant_type": "client_credentials",
            "client_id": self.client_id,
            "client_secret": self._secret,
        }
        request = urllib.request.Request(self.url, data=urllib.parse.urlencode(form).encode(), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:
                raise TransientPlatformError(f"token endpoint answered {exc.code}", sent=False) from exc
            raise ValueError(f"token endpoint refused: {json.load(exc).get('error')}") from None
        return Expiring(body["access_token"], CLOCK() + float(body["expires_in"]))


class AcmeDialect(TensorOneDialect):
    """The TensorOne wire format behind an OAuth bearer token."""

    name = "acme"

    def authenticate(self, request: HttpRequest, credentials: Credentials) -> dict[str, str]:
        assert credentials.source is not None
        return {"Authorization": f"Bearer {TOKEN_CACHE.get(credentials.source)}"}


@dataclass(frozen=True)
class AcmeDescriptor(PlatformDescriptor):
    def credential_source(self, credentials: Credentials, conn: Any) -> CredentialSource[Any] | None:
        c = cast(AcmeCredentials, credentials)
        return ClientCredentials(
            c.authority or "", c.tenant_id or "", c.client_id or "", c.client_secret or ""
        )


ACME = AcmeDescriptor(
    conn_type="acme",
    display_name="Acme ML",
    class_name="Acme",
    dialect=AcmeDialect,
    default_base_url="https://ml.acme.example",
    docs_url="https://acme.example/docs",
    credentials_class=AcmeCredentials,
    credentials={
        "client_id": "login",
        "client_secret": "password",
        "tenant_id": "extra.tenant_id",
        "authority": "extra.authority",
        "workspace": "extra.workspace",
    },
    required_credentials=("client_id", "client_secret", "tenant_id", "authority"),
    labels={"client_id": "Client ID", "client_secret": "Client secret", "tenant_id": "Tenant"},
)


# -- the server: token endpoint and job API --------------------------------------------------------------
class AcmeServer:
    def __init__(self) -> None:
        self.apps = {"app-1": "s3cr3t-one", "app-2": "s3cr3t-two"}
        self.token_requests: list[dict[str, str]] = []
        self.issued: set[str] = set()
        self.token_status = 200
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # the token endpoint
                form = dict(
                    urllib.parse.parse_qsl(self.rfile.read(int(self.headers["Content-Length"])).decode())
                )
                server.token_requests.append({"path": self.path, **form})
                if server.token_status != 200:
                    return self.answer(server.token_status, {"error": "temporarily_unavailable"})
                if form.get("grant_type") != "client_credentials" or server.apps.get(
                    form.get("client_id", "")
                ) != form.get("client_secret"):
                    return self.answer(401, {"error": "invalid_client"})
                token = f"tok-{len(server.token_requests)}"
                server.issued.add(token)
                self.answer(
                    200, {"access_token": token, "token_type": "Bearer", "expires_in": TOKEN_LIFETIME}
                )

            def do_GET(self) -> None:  # the job API: GET /v2/training/jobs/{id}
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                if token not in server.issued:
                    return self.answer(401, {"error": "UNAUTHORIZED", "message": "bad token"})
                self.answer(
                    200,
                    {"jobId": urllib.parse.urlsplit(self.path).path.rsplit("/", 1)[-1], "status": "running"},
                )

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, args=(0.05,), daemon=True).start()

    def connection(self, client_id: str = "app-1", secret_value: str = "s3cr3t-one") -> Connection:
        extra = {"tenant_id": "contoso", "authority": self.url, "workspace": "ws-1", "timeout": 5}
        return Connection(
            conn_id="acme_test",
            conn_type="acme",
            host=self.url,
            login=client_id,
            password=secret_value,
            extra=json.dumps(extra),
        )


@pytest.fixture
def acme(monkeypatch) -> Iterator[AcmeServer]:
    monkeypatch.setitem(PLATFORMS, "acme", ACME)  # what one line in platforms/__init__.py does
    monkeypatch.setattr(TOKEN_CACHE, "clock", CLOCK)
    TOKEN_CACHE.clear()
    server = AcmeServer()
    yield server
    server.http.shutdown()
    server.http.server_close()
    TOKEN_CACHE.clear()


def test_the_descriptor_reads_the_connection_into_the_platforms_credentials_class(acme):
    resolved = PlatformConnection.resolve(acme.connection())
    credentials = resolved.credentials
    assert isinstance(credentials, AcmeCredentials)
    assert (
        credentials.client_id,
        credentials.client_secret,
        credentials.tenant_id,
        credentials.workspace,
    ) == (
        "app-1",
        "s3cr3t-one",
        "contoso",
        "ws-1",
    )
    assert isinstance(credentials.source, ClientCredentials)
    assert resolved.transport_extra == {"timeout": 5}, "credential extras are not sent as headers"
    assert "s3cr3t" not in repr(credentials) and "s3cr3t" not in repr(resolved)
    assert "s3cr3t" not in credentials.source.key and "s3cr3t" not in repr(credentials.source)
    assert set(ACME.conn_fields()) == {"tenant_id", "authority", "workspace"}
    assert ACME.ui_field_behaviour()["relabeling"]["password"] == "Client secret"
    with pytest.raises(PlatformAuthError, match="Tenant"):
        ACME.connect(Connection(conn_id="bare", conn_type="acme", login="app-1", password="x"))
    with pytest.raises(ValueError, match="unknown credentials field 'tenant'"):
        PlatformDescriptor(
            conn_type="bad",
            display_name="Bad",
            class_name="Bad",
            dialect=AcmeDialect,
            default_base_url="",
            docs_url="",
            credentials={"tenant": "extra.tenant"},
            credentials_class=AcmeCredentials,
        )


def test_the_session_key_differs_per_client_secret_and_never_holds_it(acme):
    one = PlatformConnection.resolve(acme.connection()).credentials
    again = PlatformConnection.resolve(acme.connection()).credentials
    two = PlatformConnection.resolve(acme.connection(secret_value="s3cr3t-two")).credentials
    assert one.fingerprint() == again.fingerprint(), "the same connection shares one session"
    assert one.fingerprint() != two.fingerprint()
    assert "s3cr3t" not in one.fingerprint() + two.fingerprint()


def test_the_token_is_fetched_once_for_many_signings_and_again_at_the_refresh_point(acme):
    resolved = PlatformConnection.resolve(acme.connection())
    prepare = PreparedRequests(resolved.dialect, resolved.base_url, resolved.credentials)
    headers = [prepare(resolved.dialect.get_request("j1")).headers["Authorization"] for _ in range(5)]
    assert headers == ["Bearer tok-1"] * 5 and len(acme.token_requests) == 1
    assert acme.token_requests[0] == {
        "path": "/contoso/oauth2/token",
        "grant_type": "client_credentials",
        "client_id": "app-1",
        "client_secret": "s3cr3t-one",
    }
    CLOCK.now += TOKEN_LIFETIME - 300 - 1
    assert prepare(resolved.dialect.get_request("j1")).headers["Authorization"] == "Bearer tok-1"
    CLOCK.now += 1  # refresh_ahead (300 s) before expiry
    assert prepare(resolved.dialect.get_request("j1")).headers["Authorization"] == "Bearer tok-2"
    assert len(acme.token_requests) == 2


def test_both_hooks_send_the_bearer_token_and_share_it(acme, monkeypatch):
    from airflow_training_provider.hooks.training import TrainingPlatformHook
    from airflow_training_provider.hooks.training_async import AsyncTrainingPlatformHook

    monkeypatch.setenv("AIRFLOW_CONN_ACME_TEST", acme.connection().as_json())
    hook = TrainingPlatformHook("acme_test")
    assert hook.get_job("j1").state.value == "running"
    assert hook.get_job("j2").id == "j2"

    async def poll() -> str:
        async with AsyncTrainingPlatformHook("acme_test").client() as client:
            return (await client.get_job("j3")).id

    assert asyncio.run(poll()) == "j3"
    assert len(acme.token_requests) == 1, "one token for the process, whichever hook signs"


def test_a_refused_client_secret_fails_the_call_naming_the_source_and_the_connection(acme, monkeypatch):
    from airflow_training_provider.hooks.training import TrainingPlatformHook

    monkeypatch.setenv("AIRFLOW_CONN_ACME_TEST", acme.connection(secret_value="wrong").as_json())
    with pytest.raises(PlatformAuthError) as raised:
        TrainingPlatformHook("acme_test").get_job("j1")
    text = str(raised.value)
    assert "oauth2:" in text and "invalid_client" in text and "acme_test" in text and "wrong" not in text


def test_a_token_endpoint_outage_serves_the_held_token_until_it_expires(acme):
    resolved = PlatformConnection.resolve(acme.connection())
    prepare = PreparedRequests(resolved.dialect, resolved.base_url, resolved.credentials)
    assert prepare(resolved.dialect.get_request("j1")).headers["Authorization"] == "Bearer tok-1"
    acme.token_status = 503
    CLOCK.now += TOKEN_LIFETIME - 60
    assert prepare(resolved.dialect.get_request("j1")).headers["Authorization"] == "Bearer tok-1"
    CLOCK.now += 60
    with pytest.raises(TransientPlatformError, match="token endpoint answered 503"):
        prepare(resolved.dialect.get_request("j1"))
