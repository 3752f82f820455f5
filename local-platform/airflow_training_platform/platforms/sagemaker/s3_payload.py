"""An S3 upload's bytes, received and checked the way S3 checks them, into a staging file.

* ``x-amz-content-sha256`` (AWS S3 API reference, "Common Request Headers"): a hex SHA-256 must be
  the body's (else 400 ``XAmzContentSHA256Mismatch``); ``UNSIGNED-PAYLOAD`` is taken as it is.
  boto3 over ``http://`` signs the body's hash, over ``https://`` it streams (below).
* ``Content-Encoding: aws-chunked`` ("Signature Calculations for the Authorization Header:
  Transferring Payload in Multiple Chunks (Chunked Upload) (AWS Signature Version 4)", and "…
  Including Trailing Headers"): ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD`` (each chunk signed, chained
  from the request's signature; checked when the server has a key pair),
  ``STREAMING-UNSIGNED-PAYLOAD-TRAILER`` and ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`` (a
  checksum in a trailer; the trailer's own signature is not checked). The chunks are decoded to the
  object's bytes.
* Checksums ("Checking object integrity"): ``Content-MD5``, ``x-amz-checksum-crc32``, ``-sha1`` and
  ``-sha256`` (header or trailer) must match (else 400 ``BadDigest``); CRC32C and CRC64NVME are not
  checked (no implementation in the standard library), and nothing is stored or echoed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import Request

from airflow_training_platform.errors import ApiError
from airflow_training_platform.platforms.sagemaker.sigv4 import Signature

UNSIGNED = "UNSIGNED-PAYLOAD"
SIGNED_CHUNKS = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class _Crc32:
    """``hashlib``-like CRC32, as S3 encodes it: the 4 big-endian bytes."""

    def __init__(self) -> None:
        self.value = 0

    def update(self, data: bytes) -> None:
        self.value = zlib.crc32(data, self.value)

    def digest(self) -> bytes:
        return self.value.to_bytes(4, "big")


class _Digests:
    """The hashes of the bytes received: SHA-256 (the payload hash), MD5, and each checksum asked."""

    def __init__(self, checksums: list[str]) -> None:
        self.sha256 = hashlib.sha256()
        self.md5 = hashlib.md5()
        factories: dict[str, Callable[[], Any]] = {
            "crc32": _Crc32,
            "sha1": hashlib.sha1,
            "sha256": hashlib.sha256,
        }
        self.checksums: dict[str, Any] = {n: factories[n]() for n in checksums if n in factories}

    def update(self, data: bytes) -> None:
        self.sha256.update(data)
        self.md5.update(data)
        for h in self.checksums.values():
            h.update(data)


class AwsChunkedDecoder:
    """Decodes an ``aws-chunked`` body fed in pieces: ``<hex size>[;chunk-signature=<sig>]\\r\\n
    <data>\\r\\n`` … a zero-size chunk, then trailer lines ``name:value\\r\\n`` and an empty line.

    :ivar chunks: each chunk's signature (``None`` if unsigned) and the SHA-256 of its data.
    :ivar trailers: the trailer headers, names lower-cased.
    """

    def __init__(self) -> None:
        self.chunks: list[tuple[str | None, Any]] = []
        self.trailers: dict[str, str] = {}
        self.done = False
        self._buf = bytearray()
        self._state = "size"
        self._remaining = 0

    def feed(self, data: bytes) -> bytes:
        """The object bytes decoded so far from ``data`` (with what was held back before).

        :raises ApiError: 400 ``IncompleteBody`` for a malformed body.
        """
        self._buf += data
        out = bytearray()
        while not self.done:
            if self._state == "data":
                piece = bytes(self._buf[: self._remaining])
                if not piece:
                    break
                del self._buf[: len(piece)]
                out += piece
                self.chunks[-1][1].update(piece)
                self._remaining -= len(piece)
                if self._remaining:
                    break
                self._state = "crlf"
                continue
            if self._state == "crlf":
                if len(self._buf) < 2:
                    break
                if self._buf[:2] != b"\r\n":
                    raise _malformed()
                del self._buf[:2]
                self._state = "size"
                continue
            end = self._buf.find(b"\r\n")
            if end < 0:
                break
            line = bytes(self._buf[:end]).decode("latin-1")
            del self._buf[: end + 2]
            if self._state == "size":
                size_hex, _, extension = line.partition(";")
                try:
                    size = int(size_hex, 16)
                except ValueError:
                    raise _malformed() from None
                name, _, value = extension.partition("=")
                self.chunks.append((value if name == "chunk-signature" else None, hashlib.sha256()))
                self._remaining = size
                self._state = "data" if size else "trailer"
            elif not line:
                self.done = True
            else:
                name, _, value = line.partition(":")
                self.trailers[name.strip().lower()] = value.strip()
        return bytes(out)

    def verify(self, signature: Signature, secret: str) -> None:
        """Check the chain of chunk signatures, seeded with the request's.

        :raises ApiError: 403 ``SignatureDoesNotMatch``.
        """
        key = signature.signing_key(secret)
        previous = signature.signature
        for chunk_signature, digest in self.chunks:
            to_sign = "\n".join(("AWS4-HMAC-SHA256-PAYLOAD", signature.amz_date, signature.scope, previous,
                                 _EMPTY_SHA256, digest.hexdigest()))  # fmt: skip
            previous = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
            if chunk_signature is None or not hmac.compare_digest(previous, chunk_signature):
                raise ApiError(
                    403,
                    "SignatureDoesNotMatch",
                    "The request signature we calculated does not match the signature you provided.",
                )


async def receive(
    request: Request, staged: Path, signature: Signature, key_pair: tuple[str, str] | None
) -> str:
    """Write the request's object bytes into ``staged``, checking them; their MD5 (hex).

    :raises ApiError: 400 ``XAmzContentSHA256Mismatch``, ``BadDigest``, ``IncompleteBody``; 403
        ``SignatureDoesNotMatch`` (a signed chunk).
    """
    content_sha256 = request.headers.get("x-amz-content-sha256", UNSIGNED)
    chunked = content_sha256.startswith("STREAMING-") or "aws-chunked" in request.headers.get(
        "content-encoding", ""
    )
    trailer = request.headers.get("x-amz-trailer", "").lower()
    asked = [
        name.removeprefix("x-amz-checksum-")
        for name in (*request.headers.keys(), trailer)
        if name.startswith("x-amz-checksum-") and name != "x-amz-checksum-algorithm"
    ]
    digests = _Digests(asked)
    decoder = AwsChunkedDecoder() if chunked else None
    try:
        with staged.open("wb") as out:
            async for piece in request.stream():
                data = decoder.feed(piece) if decoder is not None else piece
                digests.update(data)
                out.write(data)
        if decoder is not None:
            if not decoder.done:
                raise _malformed()
            if content_sha256.startswith(SIGNED_CHUNKS) and key_pair is not None:
                decoder.verify(signature, key_pair[1])
            expected_length = request.headers.get("x-amz-decoded-content-length")
            if expected_length is not None and int(expected_length) != staged.stat().st_size:
                raise _malformed()
        elif content_sha256 != UNSIGNED and content_sha256 != digests.sha256.hexdigest():
            raise ApiError(
                400,
                "XAmzContentSHA256Mismatch",
                "The provided 'x-amz-content-sha256' header does not match what was computed.",
            )
        given = {**request.headers, **(decoder.trailers if decoder is not None else {})}
        if "content-md5" in given and given["content-md5"] != _b64(digests.md5.digest()):
            raise _bad_digest("Content-MD5")
        for name, h in digests.checksums.items():
            if given.get(f"x-amz-checksum-{name}") not in (None, _b64(h.digest())):
                raise _bad_digest(name.upper())
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return digests.md5.hexdigest()


async def read_small(request: Request) -> bytes:
    """A small request body (an XML document), checked against ``x-amz-content-sha256``."""
    body = await request.body()
    claimed = request.headers.get("x-amz-content-sha256", UNSIGNED)
    if (
        claimed != UNSIGNED
        and not claimed.startswith("STREAMING-")
        and claimed != hashlib.sha256(body).hexdigest()
    ):
        raise ApiError(
            400,
            "XAmzContentSHA256Mismatch",
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
        )
    return body


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


def _bad_digest(what: str) -> ApiError:
    return ApiError(400, "BadDigest", f"The {what} you specified did not match the calculated checksum.")


def _malformed() -> ApiError:
    return ApiError(
        400,
        "IncompleteBody",
        "You did not provide the number of bytes specified by the Content-Length HTTP header.",
    )
