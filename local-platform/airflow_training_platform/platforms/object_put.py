"""Just enough of an object store for a training job's code: ``PutObject`` into a directory, for the
clouds whose object APIs sign as S3's version 2 did — Alibaba Cloud OSS (signature version 1,
``Authorization: OSS <AccessKey id>:<signature>``) and Huawei Cloud OBS (its own signature,
``Authorization: OBS <AK>:<signature>``). ``<scheme>://bucket/key`` is ``<data_dir>/<scheme>/bucket/key``,
the files a job's code directory and channels name.

The wire, as each vendor's SDK (``oss2``, ``esdk-obs-python``) speaks it to an IP endpoint: path
style ``PUT /<bucket>/<key>``; the signature is the base64 HMAC-SHA1, with the secret, of
``VERB\\nContent-MD5\\nContent-Type\\nDate\\n``, the vendor's ``x-oss-*`` / ``x-obs-*`` headers as
sorted lower-case ``name:value`` lines, and the resource ``/<bucket>/<key>`` (``oss2.auth.ProviderAuth``;
OBS API reference, "Authentication of Signature in a Header"). The answer: 200 with the object's
``ETag`` (its MD5, quoted) and the vendor's request id header; errors are the vendor's XML
``<Error><Code>…`` documents. Every other operation (a query such as ``?uploads``, ``GET``,
``DELETE`` …) is 501 ``NotImplemented``: multipart uploads are out of reach.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response

from airflow_training_platform.errors import ApiError, request_id
from airflow_training_platform.faults import FaultInjector
from airflow_training_platform.json_answers import RawJSONRoute
from airflow_training_platform.platforms.base import platform_app

_CODES = {400: "InvalidArgument", 403: "AccessDenied", 404: "NoSuchKey", 501: "NotImplemented"}


@dataclass(frozen=True)
class ObjectStore:
    """One vendor's object store.

    :ivar title: its name (``"Alibaba Cloud OSS"``).
    :ivar scheme: its URI scheme and the data directory's subdirectory (``oss``, ``obs``).
    :ivar auth_schemes: each ``Authorization`` scheme word it takes (``OSS``; OBS takes ``OBS`` and
        the S3 version 2 ``AWS`` its SDK signs with on a path-style endpoint) → the headers signed
        with it (``x-oss-``, ``x-obs-``, ``x-amz-``).
    :ivar request_id_header: the answer's request id header (``x-oss-request-id``).
    :ivar unsupported_auth: ``Authorization`` prefixes of signature versions not implemented
        locally (answered 501), lower case.
    :ivar vendor_date_signed_as_date: a vendor date header (``x-oss-date``) takes the ``Date``
        line's place in the string to sign (OSS, ``oss2``); else that line is empty when one is
        sent (OBS and S3 version 2: the header is signed among the vendor headers only).
    """

    title: str
    scheme: str
    auth_schemes: tuple[tuple[str, str], ...]
    request_id_header: str
    unsupported_auth: tuple[str, ...] = ()
    vendor_date_signed_as_date: bool = True

    def is_request(self, scope: Mapping[str, Any]) -> bool:
        """Is this a request to the store: signed ``<scheme word> <id>:<signature>`` (or with a
        signature version answered 501)?"""
        headers = dict(scope.get("headers", []))
        auth = headers.get(b"authorization", b"").lower()
        prefixes = (*(f"{word.lower()} " for word, _ in self.auth_schemes), *self.unsupported_auth)
        return auth.startswith(tuple(p.encode() for p in prefixes))

    def string_to_sign(
        self, method: str, headers: Mapping[str, str], bucket: str, key: str, prefix: str
    ) -> str:
        """The string to sign (``headers``: lower-case names → values) of a request without
        subresources; ``prefix``: the vendor headers signed (``x-oss-``)."""
        vendor = "".join(f"{k}:{headers[k]}\n" for k in sorted(h for h in headers if h.startswith(prefix)))
        vendor_date = headers.get(f"{prefix}date")
        if vendor_date is not None:
            date = vendor_date if self.vendor_date_signed_as_date else ""
        else:
            date = headers.get("date", "")
        head = "\n".join([method, headers.get("content-md5", ""), headers.get("content-type", ""), date])
        return f"{head}\n{vendor}/{bucket}/{key}"

    def verify(self, request: Request, bucket: str, key: str, key_pair: tuple[str, str] | None) -> None:
        """Check the request's signature against ``key_pair`` (key id, secret); without a key pair
        only a well-formed ``Authorization`` is required.

        :raises ApiError: 403 ``InvalidArgument`` (malformed), ``InvalidAccessKeyId``,
            ``SignatureDoesNotMatch`` (as the vendors answer them); 501 ``NotImplemented`` for a
            signature version not implemented locally."""
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith(self.unsupported_auth):
            raise ApiError(
                501, "NotImplemented", f"This {self.title} signature version is not implemented locally."
            )
        word, _, credential = auth.partition(" ")
        prefix = {w.lower(): p for w, p in self.auth_schemes}.get(word.lower(), "")
        key_id, _, given = credential.strip().partition(":")
        if (
            not key_id
            or not given
            or not (request.headers.get("date") or request.headers.get(f"{prefix}date"))
        ):
            raise ApiError(403, "InvalidArgument", "Authorization header is invalid.")
        if key_pair is None:
            return
        if key_id != key_pair[0]:
            raise ApiError(
                403, "InvalidAccessKeyId", "The Access Key Id you provided does not exist in our records."
            )
        headers = {name.lower(): value for name, value in request.headers.items()}
        to_sign = self.string_to_sign(request.method, headers, bucket, key, prefix)
        if not hmac.compare_digest(signature(key_pair[1], to_sign), given):
            raise ApiError(
                403,
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided.",
            )

    def object_path(self, data_dir: str, bucket: str, key: str) -> str:
        """The file standing in for ``<scheme>://bucket/key``; a key never leaves its bucket's directory.

        :raises ApiError: 400 ``InvalidObjectName`` for an empty, ``.`` or ``..`` segment (a
            directory tree cannot keep such a key)."""
        parts = key.split("/")
        if not bucket or bucket in (".", "..") or any(p in ("", ".", "..") for p in parts):
            raise ApiError(
                400, "InvalidObjectName", f"The local platform keeps objects as files: cannot keep '{key}'."
            )
        return os.path.join(data_dir, self.scheme, bucket, *parts)

    def render_error(self, request: Request, err: ApiError) -> Response:
        """The vendor's XML error document and request id header."""
        rid = request_id(request)
        own = err.code and not err.code.isupper()  # the local platform's generic codes become the store's
        code = err.code if own else _CODES.get(err.status, "InternalError")
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Error>'
            f"<Code>{escape(code)}</Code><Message>{escape(err.message)}</Message>"
            f"<RequestId>{rid}</RequestId><HostId>{escape(request.url.hostname or '')}</HostId></Error>"
        )
        return Response(
            body, status_code=err.status, media_type="application/xml", headers={self.request_id_header: rid}
        )

    def build_app(self, data_dir: str, key_pair: tuple[str, str] | None, faults: FaultInjector) -> FastAPI:
        """The store's sub-application: ``PutObject`` into ``<data_dir>/<scheme>``, every other request 501."""
        router = APIRouter(route_class=RawJSONRoute, tags=[self.scheme])

        @router.put("/{bucket}/{key:path}")
        async def put_object(request: Request, bucket: str, key: str) -> Response:
            if request.query_params:  # a subresource (?uploads, ?acl, ?append …): another operation
                raise ApiError(
                    501, "NotImplemented", f"PUT with ?{request.url.query} is not implemented locally."
                )
            self.verify(request, bucket, key, key_pair)
            path = self.object_path(data_dir, bucket, key)
            body = await request.body()
            md5 = request.headers.get("content-md5")
            if md5 is not None and md5 != base64.b64encode(hashlib.md5(body).digest()).decode():
                # signed, so it is what the signer meant to send: another body is refused (OSS and OBS)
                raise ApiError(
                    400, "InvalidDigest", "The Content-MD5 you specified did not match what we received."
                )
            os.makedirs(os.path.dirname(path), exist_ok=True)
            staged = f"{path}.{uuid.uuid4().hex}.uploading"  # written whole, then moved in: never half read
            with open(staged, "wb") as out:
                out.write(body)
            os.replace(staged, path)
            etag = f'"{hashlib.md5(body).hexdigest().upper()}"'
            return Response(
                status_code=200, headers={"ETag": etag, self.request_id_header: request_id(request)}
            )

        return platform_app(f"{self.title} (local)", router, self.render_error, faults, "NotImplemented")


def signature(secret: str, to_sign: str) -> str:
    """Base64 HMAC-SHA1 of ``to_sign`` with the secret."""
    return base64.b64encode(hmac.new(secret.encode(), to_sign.encode(), hashlib.sha1).digest()).decode()
