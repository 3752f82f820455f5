"""Checking Alibaba Cloud's older ROA signature (HMAC-SHA1, signature version 1.0) on the local PAI.

Alibaba's gateway still accepts it, and it is what the ``alipai`` SDK sends: its ``ClientFactory``
builds every client with ``signature_algorithm="v2"``, which ``alibabacloud-tea-openapi`` signs
the ROA way (``docs/platforms/pai.md``, "Signatures"). The request carries
``Authorization: acs <AccessKey id>:<base64 HMAC-SHA1>``, ``date`` (RFC 1123),
``x-acs-signature-method: HMAC-SHA1``, ``x-acs-signature-version: 1.0`` and
``x-acs-signature-nonce``. The string to sign is ``METHOD\\nAccept\\nContent-MD5\\nContent-Type\\nDate\\n``,
then every ``x-acs-*`` header as a lower-case ``name:value`` line, sorted by name, then the path
and, when there is a query, ``?`` and its ``key=value`` pairs sorted by key (unencoded; a key with
an empty value alone). The scheme does not cover the body (no ``Content-MD5`` is sent).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Mapping

from fastapi import Request

from airflow_training_platform.errors import ApiError

SIGNATURE_METHOD = "HMAC-SHA1"
_AUTH = re.compile(r"^acs\s+(?P<key>[^:\s]+):(?P<signature>[A-Za-z0-9+/=]+)$")
_REQUIRED = ("date", "x-acs-signature-nonce", "x-acs-signature-method", "x-acs-signature-version")


def is_roa_v1(authorization: str) -> bool:
    """Does this ``Authorization`` header use the ROA v1 scheme (``acs <id>:<signature>``)?"""
    return authorization.strip().startswith("acs ")


def string_to_sign(method: str, path: str, query: list[tuple[str, str]], headers: Mapping[str, str]) -> str:
    """The ROA v1 string to sign (``headers``: lower-case names → values, as received).

    The same construction as ``alibabacloud_tea_openapi.utils.Utils.get_string_to_sign``."""
    head = "\n".join(
        [method, *(headers.get(name, "") for name in ("accept", "content-md5", "content-type", "date"))]
    )
    acs = "".join(
        f"{name}:{headers[name]}\n" for name in sorted(h for h in headers if h.startswith("x-acs-"))
    )
    resource = path
    if query:
        resource += "?" + "&".join(f"{k}={v}" if v != "" else k for k, v in sorted(query))
    return f"{head}\n{acs}{resource}"


def signature(secret: str, to_sign: str) -> str:
    """Base64 HMAC-SHA1 of ``to_sign`` with the AccessKey secret."""
    return base64.b64encode(hmac.new(secret.encode(), to_sign.encode(), hashlib.sha1).digest()).decode()


def verify(request: Request, key_pair: tuple[str, str] | None) -> None:
    """Check ``request``'s ROA v1 signature against ``key_pair`` (AccessKey id, secret); without a
    key pair only a well-formed signed request is required.

    :raises ApiError: 400 ``IncompleteSignature`` (malformed header, a signature header missing, a
        method other than HMAC-SHA1), ``InvalidAccessKeyId.NotFound``, ``SignatureDoesNotMatch``.
    """
    match = _AUTH.match(request.headers.get("authorization", "").strip())
    headers = {name.lower(): value for name, value in request.headers.items()}
    if (
        match is None
        or any(not headers.get(name) for name in _REQUIRED)
        or headers["x-acs-signature-method"] != SIGNATURE_METHOD
        or headers["x-acs-signature-version"] != "1.0"
    ):
        raise ApiError(
            400, "IncompleteSignature", "The request signature does not conform to Aliyun standards."
        )
    if key_pair is None:
        return
    key_id, secret = key_pair
    if match["key"] != key_id:
        raise ApiError(400, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")
    to_sign = string_to_sign(
        request.method, request.url.path, list(request.query_params.multi_items()), headers
    )
    if not hmac.compare_digest(signature(secret, to_sign), match["signature"]):
        raise ApiError(
            400,
            "SignatureDoesNotMatch",
            "Specified signature is not matched with our calculation. server string to sign is:"
            + to_sign.replace("\n", "#"),
        )
