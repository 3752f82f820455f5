"""Checking Huawei Cloud SDK-HMAC-SHA256 signatures on the local ModelArts.

The signature is recomputed over exactly what the client said it signed (``SignedHeaders``) with
the configured secret key, the way Huawei's API gateway does: canonical request = method, the path
with each segment percent-encoded and a trailing ``/``, the sorted percent-encoded query, the signed
headers (lower-case ``name:value`` lines), their names, and the body's hex SHA-256; string to sign =
``SDK-HMAC-SHA256\\n<X-Sdk-Date>\\n`` + hex SHA-256 of the canonical request. A wrong access key, a
wrong secret key or a changed request is refused with the gateway's ``APIGW.0301`` (HTTP 401).
A test drives Huawei's own client against this check.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from urllib.parse import quote, unquote

from fastapi import Request

from airflow_training_platform.errors import ApiError

ALGORITHM = "SDK-HMAC-SHA256"
_AUTH = re.compile(
    r"^SDK-HMAC-SHA256\s+Access=(?P<key>[^,]+),\s*SignedHeaders=(?P<headers>[^,]+),"
    r"\s*Signature=(?P<signature>[0-9a-f]{64})$"
)


def canonical_request(method: str, path: str, query: list[tuple[str, str]], headers: dict[str, str],
                      signed: list[str], payload_hash: str) -> str:  # fmt: skip
    """The canonical request SDK-HMAC-SHA256 signs (``headers``: lower-case names → values)."""
    uri = "/".join(quote(segment, safe="~") for segment in unquote(path).split("/"))
    uri = uri if uri.endswith("/") else uri + "/"
    canonical_query = "&".join(f"{quote(k, safe='~')}={quote(v, safe='~')}" for k, v in sorted(query))
    canonical_headers = "".join(f"{name}:{headers.get(name, '').strip()}\n" for name in signed)
    return (
        f"{method.upper()}\n{uri}\n{canonical_query}\n{canonical_headers}\n{';'.join(signed)}\n{payload_hash}"
    )


def signature(secret: str, date: str, canonical: str) -> str:
    """Hex HMAC-SHA256 of the string to sign."""
    to_sign = f"{ALGORITHM}\n{date}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    return hmac.new(secret.encode(), to_sign.encode(), hashlib.sha256).hexdigest()


def _refused(why: str) -> ApiError:
    return ApiError(401, "APIGW.0301", f"Incorrect IAM authentication information: {why}")


def verify(request: Request, body: bytes, key_pair: tuple[str, str] | None, token: str | None = None) -> None:
    """Check ``request``'s signature against ``key_pair`` (access key, secret key), or its
    ``X-Auth-Token`` against ``token``. Without either configured, a well-formed signature (or any
    token) is enough.

    :raises ApiError: 401 ``APIGW.0301`` (missing, malformed or wrong authentication).
    """
    header = request.headers.get("authorization", "")
    if not header:
        given = request.headers.get("x-auth-token")
        if given and (token is None or hmac.compare_digest(given, token)):
            return
        raise _refused("token missing or invalid" if given or token else "no Authorization header")
    match = _AUTH.match(header.strip())
    date = request.headers.get("x-sdk-date", "")
    if match is None or not date:
        raise _refused("the Authorization header or X-Sdk-Date is malformed")
    if key_pair is None:
        return
    access_key, secret = key_pair
    if match["key"] != access_key:
        raise _refused("verify aksk signature fail: the access key is unknown")
    signed = match["headers"].split(";")
    headers = {name: request.headers.get(name, "") for name in signed}
    if request.headers.get("x-sdk-content-sha256") == "UNSIGNED-PAYLOAD":
        payload_hash = "UNSIGNED-PAYLOAD"
    else:
        payload_hash = hashlib.sha256(body).hexdigest()
    canonical = canonical_request(
        request.method,
        request.url.path,
        list(request.query_params.multi_items()),
        headers,
        signed,
        payload_hash,
    )
    if not hmac.compare_digest(signature(secret, date, canonical), match["signature"]):
        raise _refused("verify aksk signature fail")
