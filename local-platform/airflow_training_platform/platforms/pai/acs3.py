"""Checking Alibaba Cloud ACS3-HMAC-SHA256 signatures on the local PAI.

The signature is recomputed over exactly what the client said it signed (``SignedHeaders``) with
the configured AccessKey secret, the way Alibaba's API gateway does: canonical request =
method, path, sorted percent-encoded query, the signed headers (lower-case ``name:value`` lines),
their names, and the body's SHA-256 (``x-acs-content-sha256``); string to sign =
``ACS3-HMAC-SHA256\\n`` + hex SHA-256 of the canonical request. A wrong AccessKey id answers
``InvalidAccessKeyId.NotFound``, a wrong secret (or a changed request) ``SignatureDoesNotMatch``,
both HTTP 400 as Alibaba answers them. A test drives Alibaba's own client against this check.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from urllib.parse import quote

from fastapi import Request

from airflow_training_platform.errors import ApiError

ALGORITHM = "ACS3-HMAC-SHA256"
_AUTH = re.compile(
    r"^ACS3-HMAC-SHA256\s+Credential=(?P<key>[^,]+),\s*SignedHeaders=(?P<headers>[^,]+),"
    r"\s*Signature=(?P<signature>[0-9a-f]{64})$"
)


def canonical_request(method: str, path: str, query: list[tuple[str, str]], headers: dict[str, str],
                      signed: list[str], payload_hash: str) -> str:  # fmt: skip
    """The canonical request ACS3 signs (``headers``: lower-case names → values)."""
    pairs = sorted((k, v) for k, v in query)
    canonical_query = "&".join(f"{k}={quote(v, safe='~')}" for k, v in pairs)
    canonical_headers = "".join(f"{name}:{headers.get(name, '').strip()}\n" for name in signed)
    return (
        f"{method}\n{path or '/'}\n{canonical_query}\n{canonical_headers}\n{';'.join(signed)}\n{payload_hash}"
    )


def signature(secret: str, canonical: str) -> str:
    """Hex HMAC-SHA256 of the string to sign."""
    to_sign = f"{ALGORITHM}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    return hmac.new(secret.encode(), to_sign.encode(), hashlib.sha256).hexdigest()


def verify(request: Request, body: bytes, key_pair: tuple[str, str] | None) -> None:
    """Check ``request``'s ACS3 signature against ``key_pair`` (AccessKey id, secret); without a
    key pair only a well-formed signature over the right body hash is required.

    :raises ApiError: 400 ``MissingAuthorization``/``IncompleteSignature``/``InvalidAccessKeyId.NotFound``/
        ``SignatureDoesNotMatch`` (``ContentSHA256Mismatch`` when the body is not what was hashed).
    """
    header = request.headers.get("authorization", "")
    if not header:
        raise ApiError(400, "MissingAuthorization", "Authorization is mandatory for this action.")
    match = _AUTH.match(header.strip())
    if match is None or not request.headers.get("x-acs-date"):
        raise ApiError(
            400, "IncompleteSignature", "The request signature does not conform to Aliyun standards."
        )
    payload_hash = request.headers.get("x-acs-content-sha256", "")
    if payload_hash != hashlib.sha256(body).hexdigest():
        raise ApiError(
            400, "ContentSHA256Mismatch", "The x-acs-content-sha256 header does not match the body."
        )
    if key_pair is None:
        return
    key_id, secret = key_pair
    if match["key"] != key_id:
        raise ApiError(400, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")
    signed = match["headers"].split(";")
    headers = {name: request.headers.get(name, "") for name in signed}
    canonical = canonical_request(
        request.method,
        request.url.path,
        list(request.query_params.multi_items()),
        headers,
        signed,
        payload_hash,
    )
    if not hmac.compare_digest(signature(secret, canonical), match["signature"]):
        raise ApiError(
            400,
            "SignatureDoesNotMatch",
            "Specified signature is not matched with our calculation. server string to sign is:"
            + canonical.replace("\n", "#"),
        )
