"""The local platform's S3, driven by the clients users bring: boto3 (``upload_file`` with and without
multipart, ``download_file``, lists with delimiter and pages), the Amazon provider's ``S3Hook`` and
``SageMakerHook.check_training_config``. Objects are the files SageMaker jobs read and write:
``s3://bucket/key`` is ``<data_dir>/s3/bucket/key``."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import boto3
import botocore.exceptions
import pytest
from boto3.s3.transfer import TransferConfig

from tests.conftest import API_KEY, AWS_ACCESS_KEY_ID, aws_connection

MIB = 1024 * 1024
SMALL_PARTS = TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB, max_concurrency=2)


def client(url: str, secret: str = API_KEY, key: str = AWS_ACCESS_KEY_ID):
    return boto3.client(
        "s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id=key, aws_secret_access_key=secret
    )


@pytest.fixture(scope="module")
def s3(platform):
    return client(platform.url)


@pytest.fixture
def bucket(s3) -> str:
    name = f"bucket-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=name)
    return name


def error_of(call) -> tuple[str, int]:
    with pytest.raises(botocore.exceptions.ClientError) as err:
        call()
    return err.value.response["Error"]["Code"], err.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_upload_file_lands_in_the_bucket_directory_and_downloads_back(s3, bucket, platform, tmp_path):
    small = tmp_path / "small.txt"
    small.write_bytes(b"hello, s3")
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(range(256)) * (6 * MIB // 256) + b"tail")  # 2 parts: 5 MiB + the rest

    s3.upload_file(str(small), bucket, "code/small.txt")
    s3.upload_file(str(big), bucket, "models/big.bin", Config=SMALL_PARTS)

    root = Path(platform.data_dir) / "s3" / bucket
    assert (root / "code" / "small.txt").read_bytes() == small.read_bytes()
    assert (root / "models" / "big.bin").read_bytes() == big.read_bytes()
    assert (
        s3.head_object(Bucket=bucket, Key="code/small.txt")["ETag"]
        == f'"{hashlib.md5(b"hello, s3").hexdigest()}"'
    )
    head = s3.head_object(Bucket=bucket, Key="models/big.bin")
    md5s = (
        hashlib.md5(big.read_bytes()[: 5 * MIB]).digest() + hashlib.md5(big.read_bytes()[5 * MIB :]).digest()
    )
    assert head["ETag"] == f'"{hashlib.md5(md5s).hexdigest()}-2"'  # S3's multipart ETag
    assert head["ContentLength"] == big.stat().st_size

    back = tmp_path / "back.bin"
    s3.download_file(bucket, "models/big.bin", str(back), Config=SMALL_PARTS)  # ranged GETs
    assert back.read_bytes() == big.read_bytes()
    assert not list((Path(platform.data_dir) / "s3-uploads").glob("mpu-*")), "parts are cleared"


def test_files_in_the_directory_are_listed_and_read(s3, bucket, platform):
    root = Path(platform.data_dir) / "s3" / bucket
    for key in ("data/iris/train.csv", "data/iris/val.csv", "data/wine/train.csv", "data/readme", "top.txt"):
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_text(key)
    (root / "empty" / "dir").mkdir(parents=True)  # no key: no prefix

    listed = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in listed["CommonPrefixes"]] == ["data/"]
    assert [c["Key"] for c in listed["Contents"]] == ["top.txt"]
    under = s3.list_objects_v2(Bucket=bucket, Prefix="data/", Delimiter="/")
    assert [p["Prefix"] for p in under["CommonPrefixes"]] == ["data/iris/", "data/wine/"]
    assert [c["Key"] for c in under["Contents"]] == ["data/readme"]

    pages = list(
        s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, PaginationConfig={"PageSize": 2})
    )
    assert [len(p.get("Contents", [])) for p in pages] == [2, 2, 1]
    assert [c["Key"] for p in pages for c in p["Contents"]] == [
        "data/iris/train.csv", "data/iris/val.csv", "data/readme", "data/wine/train.csv", "top.txt"
    ]  # fmt: skip
    rolled = s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="data/", Delimiter="/", PaginationConfig={"PageSize": 1}
    )
    assert [p["Prefix"] for page in rolled for p in page.get("CommonPrefixes", [])] == [
        "data/iris/",
        "data/wine/",
    ]
    after = s3.list_objects_v2(Bucket=bucket, StartAfter="data/readme")
    assert [c["Key"] for c in after["Contents"]] == ["data/wine/train.csv", "top.txt"]

    assert s3.get_object(Bucket=bucket, Key="data/iris/train.csv")["Body"].read() == b"data/iris/train.csv"
    ranged = s3.get_object(Bucket=bucket, Key="data/iris/train.csv", Range="bytes=5-8")
    assert (ranged["Body"].read(), ranged["ContentRange"]) == (b"iris", "bytes 5-8/19")
    assert bucket in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_missing_buckets_and_keys_are_s3_errors(s3, bucket):
    assert error_of(lambda: s3.head_bucket(Bucket="no-such-bucket-here")) == ("404", 404)  # HEAD: no body
    assert error_of(lambda: s3.head_object(Bucket=bucket, Key="nothing")) == ("404", 404)
    assert error_of(lambda: s3.get_object(Bucket=bucket, Key="nothing")) == ("NoSuchKey", 404)
    assert error_of(lambda: s3.get_object(Bucket="no-such-bucket-here", Key="k")) == ("NoSuchBucket", 404)
    assert error_of(lambda: s3.list_objects_v2(Bucket="no-such-bucket-here")) == ("NoSuchBucket", 404)
    assert error_of(lambda: s3.put_object(Bucket=bucket, Key="a/../../escape", Body=b"x")) == (
        "InvalidArgument",
        400,
    )
    s3.put_object(Bucket=bucket, Key="file", Body=b"x")
    assert error_of(lambda: s3.put_object(Bucket=bucket, Key="file/under", Body=b"x"))[0] == "InvalidArgument"
    assert error_of(lambda: s3.create_bucket(Bucket="Not_Valid"))[0] == "InvalidBucketName"


def test_copy_and_delete(s3, bucket, platform):
    s3.put_object(Bucket=bucket, Key="a/b/one", Body=b"1")
    s3.copy_object(Bucket=bucket, Key="copy/one", CopySource={"Bucket": bucket, "Key": "a/b/one"})
    assert s3.get_object(Bucket=bucket, Key="copy/one")["Body"].read() == b"1"
    s3.delete_object(Bucket=bucket, Key="a/b/one")
    s3.delete_object(Bucket=bucket, Key="a/b/one")  # a missing key's delete is done too
    assert not (Path(platform.data_dir) / "s3" / bucket / "a").exists(), "an emptied prefix is gone"
    deleted = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "copy/one"}]})["Deleted"]
    assert deleted == [{"Key": "copy/one"}]
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    s3.delete_bucket(Bucket=bucket)
    assert error_of(lambda: s3.head_bucket(Bucket=bucket)) == ("404", 404)


def test_signatures_are_checked(platform, bucket):
    assert error_of(lambda: client(platform.url, secret="wrong").head_object(Bucket=bucket, Key="k")) == (
        "403",
        403,
    )
    assert error_of(lambda: client(platform.url, secret="wrong").list_objects_v2(Bucket=bucket)) == (
        "SignatureDoesNotMatch",
        403,
    )
    assert error_of(lambda: client(platform.url, key="AKIDSOMEONEELSE").list_buckets()) == (
        "InvalidAccessKeyId",
        403,
    )


@pytest.fixture
def aws_conn(platform, monkeypatch) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_AWS_S3_LOCAL", aws_connection(platform.url))
    return "aws_s3_local"


def test_the_amazon_providers_s3_hook(aws_conn, bucket, platform, tmp_path):
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    hook = S3Hook(aws_conn_id=aws_conn)
    source = tmp_path / "train.csv"
    source.write_text("x,y\n1,2\n")
    hook.load_file(str(source), key="datasets/iris/train.csv", bucket_name=bucket)

    assert (
        Path(platform.data_dir) / "s3" / bucket / "datasets" / "iris" / "train.csv"
    ).read_text() == "x,y\n1,2\n"
    assert hook.check_for_bucket(bucket) and not hook.check_for_bucket("no-such-bucket-here")
    assert hook.check_for_key("datasets/iris/train.csv", bucket_name=bucket)
    assert not hook.check_for_key("datasets/iris/missing.csv", bucket_name=bucket)
    assert hook.check_for_prefix("datasets/iris", delimiter="/", bucket_name=bucket)
    assert not hook.check_for_prefix("datasets/wine", delimiter="/", bucket_name=bucket)


def test_sagemaker_hooks_s3_pre_check_of_a_training_config(aws_conn, s3, bucket):
    from airflow.providers.amazon.aws.hooks.sagemaker import SageMakerHook
    from airflow.sdk.exceptions import AirflowException

    s3.put_object(Bucket=bucket, Key="data/iris/train.csv", Body=b"x,y\n")

    def config(uri: str) -> dict:
        source = {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": uri}}
        return {"InputDataConfig": [{"ChannelName": "train", "DataSource": source}]}

    hook = SageMakerHook(aws_conn_id=aws_conn)
    hook.check_training_config(config(f"s3://{bucket}/data/iris/"))
    assert hook.check_s3_url(f"s3://{bucket}/data/iris/train.csv")
    with pytest.raises(AirflowException, match="The input S3 Bucket no-such-bucket-here does not exist"):
        hook.check_training_config(config("s3://no-such-bucket-here/data/iris/"))
    with pytest.raises(AirflowException, match="does not exist in the Bucket"):
        hook.check_training_config(config(f"s3://{bucket}/data/wine/"))


def chunked_put(url: str, body: bytes, decoded_length: int):
    """A PUT with an ``aws-chunked`` body and a trailing checksum, signed as botocore signs one over
    TLS (``STREAMING-UNSIGNED-PAYLOAD-TRAILER``); boto3 over plain HTTP signs the whole body instead."""
    import requests
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest("PUT", url, data=body, headers={
        "Content-Encoding": "aws-chunked",
        "X-Amz-Decoded-Content-Length": str(decoded_length),
        "X-Amz-Trailer": "x-amz-checksum-crc32",
    })  # fmt: skip
    request.context["checksum"] = {"request_algorithm": {"in": "trailer", "algorithm": "crc32",
                                                         "name": "x-amz-checksum-crc32"}}  # fmt: skip
    S3SigV4Auth(Credentials(AWS_ACCESS_KEY_ID, API_KEY), "s3", "us-east-1").add_auth(request)
    assert request.headers["X-Amz-Content-SHA256"] == "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
    prepared = request.prepare()
    return requests.put(prepared.url, data=prepared.body, headers=dict(prepared.headers), timeout=10)


def test_an_aws_chunked_upload_is_decoded_and_its_trailing_checksum_checked(s3, bucket, platform):
    import base64
    import zlib

    crc = base64.b64encode(zlib.crc32(b"hello world").to_bytes(4, "big")).decode()
    body = b"6\r\nhello \r\n5\r\nworld\r\n0\r\nx-amz-checksum-crc32:" + crc.encode() + b"\r\n\r\n"
    assert chunked_put(f"{platform.url}/{bucket}/chunked", body, 11).status_code == 200
    assert (Path(platform.data_dir) / "s3" / bucket / "chunked").read_bytes() == b"hello world"

    wrong = chunked_put(f"{platform.url}/{bucket}/wrong", body.replace(b"world", b"W0rld"), 11)
    assert (wrong.status_code, "<Code>BadDigest</Code>" in wrong.text) == (400, True)
    assert error_of(lambda: s3.head_object(Bucket=bucket, Key="wrong")) == ("404", 404)


def test_multipart_refusals_and_abort(s3, bucket, platform):
    upload = s3.create_multipart_upload(Bucket=bucket, Key="parts")["UploadId"]
    etags = [s3.upload_part(Bucket=bucket, Key="parts", UploadId=upload, PartNumber=n, Body=b"x")["ETag"]
             for n in (1, 2)]  # fmt: skip

    def complete(parts):
        return lambda: s3.complete_multipart_upload(
            Bucket=bucket, Key="parts", UploadId=upload, MultipartUpload={"Parts": parts}
        )

    both = [{"PartNumber": n, "ETag": e} for n, e in zip((1, 2), etags, strict=True)]
    assert error_of(complete(both)) == ("EntityTooSmall", 400)  # part 1 is under 5 MiB
    assert error_of(complete([{"PartNumber": 1, "ETag": '"0"'}])) == ("InvalidPart", 400)
    assert error_of(complete(both[::-1])) == ("InvalidPartOrder", 400)
    assert s3.complete_multipart_upload(
        Bucket=bucket, Key="parts", UploadId=upload, MultipartUpload={"Parts": both[1:]}
    )["ETag"].endswith('-1"')  # one part: it may be small
    assert s3.get_object(Bucket=bucket, Key="parts")["Body"].read() == b"x"

    aborted = s3.create_multipart_upload(Bucket=bucket, Key="gone")["UploadId"]
    s3.abort_multipart_upload(Bucket=bucket, Key="gone", UploadId=aborted)
    assert error_of(
        lambda: s3.upload_part(Bucket=bucket, Key="gone", UploadId=aborted, PartNumber=1, Body=b"")
    ) == (
        "NoSuchUpload",
        404,
    )
    assert not list((Path(platform.data_dir) / "s3-uploads").glob("put-*")), "nothing staged is left behind"
