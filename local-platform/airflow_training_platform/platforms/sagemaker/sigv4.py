"""Checking AWS Signature Version 4 on the local SageMaker, with botocore's own signer.

The signature is recomputed over exactly what the client said it signed (``SignedHeaders``), at the
time it signed (``X-Amz-Date``), with the configured secret; a wrong access key gets AWS's
``UnrecognizedClientException``, a wrong secret (or a changed request) its
``InvalidSignatureException``, both HTTP 403.
"""

from __future__ import annotations

import hmac
import re

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


def verify(request: Request, body: bytes, key_pair: tuple[str, str] | None) -> None:
    """Check ``request``'s SigV4 signature against ``key_pair`` (access key id, secret).

    Without a key pair only the presence of a well-formed signature is checked.

    :raises ApiError: 403 ``MissingAuthenticationToken``, ``IncompleteSignature``,
        ``UnrecognizedClientException`` or ``InvalidSignatureException``.
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
    if key_pair is None:
        return
    access_key, secret = key_pair
    if match["key"] != access_key:
        raise ApiError(
            403, "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    if not hmac.compare_digest(
        _signature(request, body, match, amz_date, access_key, secret), match["signature"]
    ):
        raise ApiError(403, "InvalidSignatureException", _MISMATCH)


def _signature(
    request: Request, body: bytes, match: re.Match, amz_date: str, access_key: str, secret: str
) -> str:
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    names = match["headers"].split(";")
    headers = {name: request.headers.get(name, "") for name in names}
    aws = AWSRequest(method=request.method, url=str(request.url), data=body, headers=headers)
    aws.context["timestamp"] = amz_date
    token = request.headers.get("x-amz-security-token")
    signer = SigV4Auth(Credentials(access_key, secret, token), match["service"], match["region"])
    canonical = signer.canonical_request(aws)
    return signer.signature(signer.string_to_sign(aws, canonical), aws)
