"""The local platform's S3 checks ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD`` chunk signatures as AWS
computes them: the worked example of AWS's S3 API reference, "Signature Calculations for the
Authorization Header: Transferring Payload in Multiple Chunks (Chunked Upload)" (66,560 bytes of
``a`` in chunks of 64 KiB, 1 KiB and 0, its seed and chunk signatures)."""

from __future__ import annotations

import pytest

from airflow_training_platform.errors import ApiError
from airflow_training_platform.platforms.sagemaker.s3_payload import AwsChunkedDecoder
from airflow_training_platform.platforms.sagemaker.sigv4 import Signature

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SEED = Signature(
    access_key="AKIAIOSFODNN7EXAMPLE",
    date="20130524",
    region="us-east-1",
    service="s3",
    signed_headers="content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
    "x-amz-decoded-content-length;x-amz-storage-class",
    signature="4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
    amz_date="20130524T000000Z",
)
CHUNKS = [
    (65536, "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"),
    (1024, "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497"),
    (0, "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"),
]


def body(chunks) -> bytes:
    return b"".join(f"{n:x};chunk-signature={s}\r\n".encode() + b"a" * n + b"\r\n" for n, s in chunks)


def decode(raw: bytes, piece: int) -> tuple[AwsChunkedDecoder, bytes]:
    decoder = AwsChunkedDecoder()
    return decoder, b"".join(decoder.feed(raw[i : i + piece]) for i in range(0, len(raw), piece))


@pytest.mark.parametrize("piece", [1, 7, 1000, 100_000])
def test_awss_worked_example_decodes_and_verifies_fed_in_any_pieces(piece):
    decoder, data = decode(body(CHUNKS), piece)
    assert decoder.done and data == b"a" * 66560
    decoder.verify(SEED, SECRET)


@pytest.mark.parametrize(
    ("chunks", "secret"),
    [
        ([(65536, CHUNKS[0][1]), (1023, CHUNKS[1][1]), CHUNKS[2]], SECRET),  # a byte less
        (CHUNKS, "another secret"),
    ],
)
def test_a_changed_chunk_or_secret_is_refused(chunks, secret):
    decoder, _ = decode(body(chunks), 1000)
    with pytest.raises(ApiError) as err:
        decoder.verify(SEED, secret)
    assert (err.value.status, err.value.code) == (403, "SignatureDoesNotMatch")
