"""Just enough Alibaba Cloud OSS for a training job's code: ``PutObject``, so that alipai's
``Estimator.fit()`` can upload a local ``source_dir`` (``docs/platforms/pai.md``, "Alibaba's alipai
SDK against the local PAI"). ``oss://bucket/key`` is ``<data_dir>/oss/bucket/key``, the files a
PAI job's ``CodeDir`` and channels name (:func:`.wire.oss_path`).

The wire, as ``oss2`` (Alibaba's OSS SDK, what alipai uploads with) speaks it to an IP endpoint:
path style ``PUT /<bucket>/<key>``, ``Authorization: OSS <AccessKey id>:<base64 HMAC-SHA1>`` (OSS
signature version 1) over ``VERB\\nContent-MD5\\nContent-Type\\nDate\\n``, the ``x-oss-*`` headers as
sorted lower-case ``name:value`` lines, and the resource ``/<bucket>/<key>`` (``oss2.auth.ProviderAuth``).
The answer: 200 with the object's ``ETag`` (its MD5, upper-case hex, quoted) and ``x-oss-request-id``;
errors are OSS's XML ``<Error><Code>…`` documents. Every other OSS operation (a query such as
``?uploads``, ``GET``, ``DELETE`` …) is 501 ``NotImplemented``: uploads of 10 MB or more (oss2's
multipart threshold) are out of reach.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import uuid
from collections.abc import Mapping
from typing import Any
from xml.sax.saxutils import escape

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response

from airflow_training_platform.errors import ApiError, request_id
from airflow_training_platform.faults import FaultInjector
from airflow_training_platform.platforms.base import platform_app
from airflow_training_platform.platforms.pai import roa_v1

_PREFIXES = (b"oss ", b"oss4-hmac-sha256")
_CODES = {400: "InvalidArgument", 403: "AccessDenied", 404: "NoSuchKey", 501: "NotImplemented"}


def is_oss(scope: Mapping[str, Any]) -> bool:
    """Is this an OSS request: an ``Authorization: OSS <id>:<signature>`` header (version 1), or
    ``OSS4-HMAC-SHA256 …`` (version 4, refused by :func:`verify`)?"""
    headers = dict(scope.get("headers", []))
    return headers.get(b"authorization", b"").lower().startswith(_PREFIXES)


def string_to_sign(method: str, headers: Mapping[str, str], bucket: str, key: str) -> str:
    """OSS signature version 1's string to sign (``headers``: lower-case names → values), as
    ``oss2.auth.ProviderAuth`` builds it for a request without subresources."""
    oss_headers = "".join(f"{k}:{headers[k]}\n" for k in sorted(h for h in headers if h.startswith("x-oss-")))
    date = headers.get("x-oss-date") or headers.get("date", "")
    head = "\n".join([method, headers.get("content-md5", ""), headers.get("content-type", ""), date])
    return f"{head}\n{oss_headers}/{bucket}/{key}"


def verify(request: Request, bucket: str, key: str, key_pair: tuple[str, str] | None) -> None:
    """Check the request's OSS v1 signature against ``key_pair`` (AccessKey id, secret); without a
    key pair only a well-formed ``Authorization`` is required.

    :raises ApiError: 403 ``InvalidArgument`` (malformed), ``InvalidAccessKeyId``,
        ``SignatureDoesNotMatch`` (HTTP 403, as OSS answers them); 501 ``NotImplemented`` for a
        version 4 signature.
    """
    auth = request.headers.get("authorization", "")
    if auth.upper().startswith("OSS4-"):
        raise ApiError(
            501, "NotImplemented", "OSS signature version 4 is not implemented locally: sign with version 1."
        )
    key_id, _, given = auth[4:].strip().partition(":")
    if not key_id or not given or not request.headers.get("date"):
        raise ApiError(403, "InvalidArgument", "Authorization header is invalid.")
    if key_pair is None:
        return
    if key_id != key_pair[0]:
        raise ApiError(
            403, "InvalidAccessKeyId", "The OSS Access Key Id you provided does not exist in our records."
        )
    headers = {name.lower(): value for name, value in request.headers.items()}
    to_sign = string_to_sign(request.method, headers, bucket, key)
    if not hmac.compare_digest(roa_v1.signature(key_pair[1], to_sign), given):
        raise ApiError(
            403,
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided.",
        )


def object_path(data_dir: str, bucket: str, key: str) -> str:
    """The file standing in for ``oss://bucket/key``; a key never leaves its bucket's directory.

    :raises ApiError: 400 ``InvalidObjectName`` for an empty, ``.`` or ``..`` segment (a directory
        tree cannot keep such a key).
    """
    parts = key.split("/")
    if not bucket or bucket in (".", "..") or any(p in ("", ".", "..") for p in parts):
        raise ApiError(
            400, "InvalidObjectName", f"The local platform keeps objects as files: cannot keep '{key}'."
        )
    return os.path.join(data_dir, "oss", bucket, *parts)


def render_error(request: Request, err: ApiError) -> Response:
    """OSS's XML error document, ``x-oss-request-id`` header."""
    rid = request_id(request)
    own = err.code and not err.code.isupper()  # the local platform's generic codes become OSS's
    code = err.code if own else _CODES.get(err.status, "InternalError")
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error>'
        f"<Code>{escape(code)}</Code><Message>{escape(err.message)}</Message>"
        f"<RequestId>{rid}</RequestId><HostId>{escape(request.url.hostname or '')}</HostId></Error>"
    )
    return Response(
        body, status_code=err.status, media_type="application/xml", headers={"x-oss-request-id": rid}
    )


def build_app(data_dir: str, key_pair: tuple[str, str] | None, faults: FaultInjector) -> FastAPI:
    """The OSS sub-application: ``PutObject`` into ``<data_dir>/oss``, every other request 501."""
    router = APIRouter(tags=["oss"])

    @router.put("/{bucket}/{key:path}")
    async def put_object(request: Request, bucket: str, key: str) -> Response:
        if request.query_params:  # a subresource (?uploads, ?acl, ?append …): another operation
            raise ApiError(
                501, "NotImplemented", f"PUT with ?{request.url.query} is not implemented locally."
            )
        verify(request, bucket, key, key_pair)
        path = object_path(data_dir, bucket, key)
        body = await request.body()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        staged = f"{path}.{uuid.uuid4().hex}.uploading"  # written whole, then moved in: never half read
        with open(staged, "wb") as out:
            out.write(body)
        os.replace(staged, path)
        etag = f'"{hashlib.md5(body).hexdigest().upper()}"'
        return Response(status_code=200, headers={"ETag": etag, "x-oss-request-id": request_id(request)})

    return platform_app("Alibaba Cloud OSS (local)", router, render_error, faults, "NotImplemented")
