"""Checking AWS Signature Version 4 on the local SageMaker and S3, with botocore's own signers.

The signature is recomputed over exactly what the client said it signed (``SignedHeaders``), at the
time it signed (``X-Amz-Date``), with the configured secret; a wrong access key gets AWS's
``UnrecognizedClientException``, a wrong secret (or a changed request) its
``InvalidSignatureException``, both HTTP 403 (:mod:`.s3` answers them with S3's own codes).

S3 (:func:`verify_s3`) signs differently (AWS S3 API reference, "Authenticating Requests (AWS
Signature Version 4)"): the path is signed as sent, never normalized (botocore's ``S3SigV4Auth``), and
the payload's hash is the ``x-amz-content-sha256`` header, which may say ``UNSIGNED-PAYLOAD`` or
``STREAMING-…`` (:mod:`.s3_payload` checks the bytes against it).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

from fastapi import Request

from airflow_training_platform.errors import ApiError

_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request,"
    r"\s*SignedHeaders=(?P<headers>[^,]+),\s*Signature=(?P<signature>[0-9a-f]{64})$"
)
_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method."
)


@dataclass(frozen=True)
class Signature:
    """A request's ``Authorization: AWS4-HMAC-SHA256 …`` header, read."""

    access_key: str
    date: str
    region: str
    service: str
    signed_headers: str
    signature: str
    amz_date: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"

    def signing_key(self, secret: str) -> bytes:
        """The key derived for this scope (AWS General Reference, "Create a signed AWS API request",
        step 4)."""
        key = f"AWS4{secret}".encode()
        for part in (self.date, self.region, self.service, "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        return key


def read_signature(request: Request) -> Signature:
    """The request's signature, not yet checked.

    :raises ApiError: 403 ``MissingAuthenticationToken``, ``IncompleteSignature``.
    """
    header = request.headers.get("authorization", "")
    if not header:
        raise ApiError(403, "MissingAuthenticationToken", "Request is missing Authentication Token")
    match = _AUTH.match(header.strip())
    amz_date = request.headers.get("x-amz-date", "")
    if match is None or not amz_date:
        raise ApiError(
            403, "IncompleteSignature", "Authorization header requires Credential, SignedHeaders, Signature"
        )
    return Signature(
        match["key"], match["date"], match["region"], match["service"], match["headers"], match["signature"],
        amz_date,
    )  # fmt: skip


def verify_s3(request: Request, key_pair: tuple[str, str] | None) -> Signature:
    """Check an S3 request's signature (path as sent, payload hash from ``x-amz-content-sha256``).

    :raises ApiError: as :func:`verify`; 400 ``InvalidRequest`` without ``x-amz-content-sha256``.
    """
    from botocore.auth import S3SigV4Auth

    signature = read_signature(request)
    if "x-amz-content-sha256" not in request.headers:
        raise ApiError(
            400, "InvalidRequest", "Missing required header for this request: x-amz-content-sha256"
        )
    if key_pair is not None:
        raw_path = request.scope.get("raw_path") or request.url.path.encode()
        query = request.scope.get("query_string", b"").decode("latin-1")
        url = f"{request.url.scheme}://{request.url.netloc}{raw_path.decode('latin-1')}"
        _check(request, b"", signature, key_pair, S3SigV4Auth, url + (f"?{query}" if query else ""))
    return signature


def verify(request: Request, body: bytes, key_pair: tuple[str, str] | None) -> None:
    """Check ``request``'s SigV4 signature against ``key_pair`` (access key id, secret).

    Without a key pair only the presence of a well-formed signature is checked.

    :raises ApiError: 403 ``MissingAuthenticationToken``, ``IncompleteSignature``,
        ``UnrecognizedClientException`` or ``InvalidSignatureException``.
    """
    from botocore.auth import SigV4Auth

    signature = read_signature(request)
    if key_pair is not None:
        _check(request, body, signature, key_pair, SigV4Auth, str(request.url))


def _check(
    request: Request,
    body: bytes,
    signature: Signature,
    key_pair: tuple[str, str],
    signer_class: type,
    url: str,
) -> None:
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    access_key, secret = key_pair
    if signature.access_key != access_key:
        raise ApiError(
            403, "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    names = signature.signed_headers.split(";")
    headers = {name: request.headers.get(name, "") for name in names}
    aws = AWSRequest(method=request.method, url=url, data=body, headers=headers)
    aws.context["timestamp"] = signature.amz_date
    token = request.headers.get("x-amz-security-token")
    signer = signer_class(Credentials(access_key, secret, token), signature.service, signature.region)
    canonical = signer.canonical_request(aws)
    expected = signer.signature(signer.string_to_sign(aws, canonical), aws)
    if not hmac.compare_digest(expected, signature.signature):
        raise ApiError(403, "InvalidSignatureException", _MISMATCH)
