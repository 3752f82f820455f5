"""The S3 object API over the local SageMaker's directories (:mod:`.s3_store`), as boto3, the Amazon
provider's ``S3Hook`` and the SageMaker SDK call it: path-style addressing
(``http://<server>/<bucket>/<key>``), the REST-XML wire format, SigV4 signed for the service ``s3``
(:func:`is_s3` tells these requests apart from SageMaker's ``POST /``: their signature's scope says
``s3``). Wire contract: ``docs/platforms/sagemaker.md`` (S3).

Operations (AWS S3 API reference, "Actions"): ``ListBuckets``, ``CreateBucket``, ``HeadBucket``,
``DeleteBucket``, ``GetBucketLocation``, ``ListObjectsV2`` and ``ListObjects``, ``HeadObject``,
``GetObject`` (``Range``, ``If-Match``, ``If-None-Match``), ``PutObject``, ``CopyObject``,
``DeleteObject``, ``DeleteObjects``, ``CreateMultipartUpload``, ``UploadPart``,
``CompleteMultipartUpload``, ``AbortMultipartUpload``. Any other sub-resource (``?acl``,
``?tagging``, ``?versioning``…) is answered 501 ``NotImplemented``, as S3 answers what it does not do.

Errors are S3's XML ``<Error><Code>…</Code><Message>…</Message>…</Error>`` with the status S3 uses;
a ``HEAD``'s error has no body (botocore then reports the status as the code: ``"404"``, which is what
``S3Hook.check_for_bucket`` reads).
"""

from __future__ import annotations

import base64
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from email.utils import formatdate
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from airflow_training_platform.errors import ApiError, request_id
from airflow_training_platform.json_answers import RawJSONRoute
from airflow_training_platform.platforms.sagemaker import s3_payload
from airflow_training_platform.platforms.sagemaker.s3_store import ObjectInfo, S3Store
from airflow_training_platform.platforms.sagemaker.sigv4 import Signature, verify_s3

OPERATIONS = ("ListBuckets", "CreateBucket", "HeadBucket", "DeleteBucket", "GetBucketLocation", "ListObjectsV2",
              "ListObjects", "HeadObject", "GetObject", "PutObject", "CopyObject", "DeleteObject", "DeleteObjects",
              "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "AbortMultipartUpload")  # fmt: skip
"""The S3 operations served (AWS S3 API reference names); any other is 501 ``NotImplemented``."""
XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"
OWNER_ID = "local"
MAX_KEYS = 1000
_READ_CHUNK = 1 << 20
_AUTH_CODES = {
    # sigv4's awsJson codes → S3's (S3 API reference, "Error responses")
    "MissingAuthenticationToken": (403, "AccessDenied", "Access Denied"),
    "IncompleteSignature": (400, "AuthorizationHeaderMalformed", "The authorization header is malformed."),
    "UnrecognizedClientException": (
        403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."
    ),
    "InvalidSignatureException": (
        403,
        "SignatureDoesNotMatch",
        "The request signature we calculated does not match the signature you provided. Check your key "
        "and signing method.",
    ),
}  # fmt: skip


def is_s3(scope: Mapping[str, Any]) -> bool:
    """A request signed (SigV4) for the service ``s3``: its ``Authorization`` scope ends ``/s3/aws4_request``."""
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            return b"/s3/aws4_request" in value
    return False


def render_error(request: Request, err: ApiError) -> Response:
    """S3's error document (``<Error>`` with ``Code``, ``Message``, the resource, ``RequestId``);
    body-less for ``HEAD``."""
    rid = request_id(request)
    headers = {**err.headers, "x-amz-request-id": rid}
    if request.method == "HEAD":
        return Response(status_code=err.status, headers=headers)
    code = err.code if err.code and err.code[0].isupper() and "_" not in err.code else _CODES.get(err.status)
    extra = "".join(f"<{k}>{escape(str(v))}</{k}>" for k, v in err.details.items() if k.isalnum())
    body = (
        f"<Error><Code>{escape(code or 'InternalError')}</Code><Message>{escape(err.message)}</Message>"
        f"{extra}<RequestId>{escape(rid)}</RequestId><HostId>local</HostId></Error>"
    )
    return _xml(body, status=err.status, headers=headers, namespace=False)


_CODES = {
    400: "InvalidRequest",
    403: "AccessDenied",
    404: "NoSuchKey",
    405: "MethodNotAllowed",
    409: "OperationAborted",
    429: "SlowDown",
    500: "InternalError",
    503: "ServiceUnavailable",
}


def build_s3_router(data_dir: str, region: str, key_pair: tuple[str, str] | None) -> APIRouter:
    """The S3 routes over ``<data_dir>/s3``: ``GET /`` and every ``/<bucket>[/<key>]``.

    :param key_pair: (access key id, secret) signatures are checked against; ``None``: any
        well-formed SigV4 signature.
    """
    store = S3Store(data_dir)
    router = APIRouter(route_class=RawJSONRoute, tags=["s3"])

    def signed(request: Request) -> Signature:
        try:
            return verify_s3(request, key_pair)
        except ApiError as err:
            if err.code in _AUTH_CODES:
                status, code, message = _AUTH_CODES[err.code]
                raise ApiError(status, code, message) from None
            raise

    @router.get("/")
    async def list_buckets(request: Request) -> Response:
        """``ListBuckets`` (``Prefix`` only; no pagination: every bucket in one page)."""
        signed(request)
        prefix = request.query_params.get("prefix", "")
        rows = "".join(
            f"<Bucket><Name>{escape(name)}</Name><CreationDate>{_iso(created)}</CreationDate>"
            f"<BucketRegion>{region}</BucketRegion></Bucket>"
            for name, created in await run_in_threadpool(store.buckets)
            if name.startswith(prefix)
        )
        return _xml(
            f"<ListAllMyBucketsResult{{ns}}><Owner><ID>{OWNER_ID}</ID><DisplayName>{OWNER_ID}</DisplayName>"
            f"</Owner><Buckets>{rows}</Buckets></ListAllMyBucketsResult>"
        )

    @router.api_route("/{bucket}", methods=["GET", "HEAD", "PUT", "DELETE", "POST"])
    @router.api_route("/{bucket}/", methods=["GET", "HEAD", "PUT", "DELETE", "POST"])
    async def bucket_operation(request: Request, bucket: str) -> Response:
        """A bucket's actions, told apart by method and sub-resource as S3 does (API reference,
        "Actions"): ``HeadBucket``, ``GetBucketLocation`` (``?location``), ``ListObjectsV2`` /
        ``ListObjects``, ``CreateBucket``, ``DeleteBucket``, ``DeleteObjects`` (``POST ?delete``)."""
        signed(request)
        query = request.query_params
        method = request.method
        if method == "HEAD" and not query:
            await run_in_threadpool(store.bucket_dir, bucket)
            return Response(headers={"x-amz-bucket-region": region})
        if method == "GET" and "location" in query:
            await run_in_threadpool(store.bucket_dir, bucket)
            constraint = "" if region == "us-east-1" else escape(region)
            return _xml(f"<LocationConstraint{{ns}}>{constraint}</LocationConstraint>")
        if method == "GET" and _only(query, _LIST_PARAMETERS):
            return await run_in_threadpool(_list_objects, store, bucket, dict(query))
        if method == "PUT" and not query:
            await s3_payload.read_small(request)  # CreateBucketConfiguration: one region here
            created = await run_in_threadpool(store.create_bucket, bucket)
            if not created and region != "us-east-1":  # us-east-1 answers 200 to the owner, as AWS
                raise ApiError(409, "BucketAlreadyOwnedByYou", "Your previous request to create the named "
                               "bucket succeeded and you already own it.", {"BucketName": bucket})  # fmt: skip
            return Response(headers={"Location": f"/{bucket}"})
        if method == "DELETE" and not query:
            await run_in_threadpool(store.delete_bucket, bucket)
            return Response(status_code=204)
        if method == "POST" and set(query) == {"delete"}:
            return await _delete_objects(store, bucket, await s3_payload.read_small(request))
        raise _not_implemented(method, query)

    @router.api_route("/{bucket}/{key:path}", methods=["GET", "HEAD", "PUT", "DELETE", "POST"])
    async def object_operation(request: Request, bucket: str, key: str) -> Response:
        """An object's actions: ``HeadObject``, ``GetObject``, ``UploadPart`` (``?partNumber&uploadId``),
        ``CopyObject`` (``x-amz-copy-source``), ``PutObject``, ``AbortMultipartUpload`` (``DELETE
        ?uploadId``), ``DeleteObject``, ``CreateMultipartUpload`` (``POST ?uploads``),
        ``CompleteMultipartUpload`` (``POST ?uploadId``). ``key`` is the path after the bucket, decoded."""
        signature = signed(request)
        query = request.query_params
        method = request.method
        upload_id = query.get("uploadId")
        if method in ("GET", "HEAD") and _only(query, _GET_PARAMETERS):
            return await run_in_threadpool(_get_object, store, request, bucket, key)
        if method == "PUT" and upload_id is not None and set(query) == {"uploadId", "partNumber"}:
            if "x-amz-copy-source" in request.headers:
                raise _not_implemented("UploadPartCopy", query)
            number = _int(query["partNumber"], "partNumber")
            await run_in_threadpool(store.upload_dir, bucket, key, upload_id)
            staged = store.new_upload_file()
            await s3_payload.receive(request, staged, signature, key_pair)
            etag = await run_in_threadpool(store.put_part, bucket, key, upload_id, number, staged)
            return Response(headers={"ETag": etag})
        if method == "PUT" and not query and "x-amz-copy-source" in request.headers:
            source_bucket, source_key = _copy_source(request.headers["x-amz-copy-source"])
            info = await run_in_threadpool(store.copy, source_bucket, source_key, bucket, key)
            return _xml(
                f"<CopyObjectResult{{ns}}><ETag>{escape(info.etag)}</ETag>"
                f"<LastModified>{_iso(info.mtime)}</LastModified></CopyObjectResult>"
            )
        if method == "PUT" and not query:
            await run_in_threadpool(store.bucket_dir, bucket)
            staged = store.new_upload_file()
            md5 = await s3_payload.receive(request, staged, signature, key_pair)
            info = await run_in_threadpool(store.put_file, bucket, key, staged, f'"{md5}"')
            return Response(headers={"ETag": info.etag})
        if method == "DELETE" and upload_id is not None and set(query) == {"uploadId"}:
            await run_in_threadpool(store.abort_upload, bucket, key, upload_id)
            return Response(status_code=204)
        if method == "DELETE" and not query:
            await run_in_threadpool(store.delete, bucket, key)
            return Response(status_code=204)
        if method == "POST" and set(query) == {"uploads"}:
            upload_id = await run_in_threadpool(store.start_upload, bucket, key)
            return _xml(
                f"<InitiateMultipartUploadResult{{ns}}><Bucket>{escape(bucket)}</Bucket>"
                f"<Key>{escape(key)}</Key><UploadId>{upload_id}</UploadId></InitiateMultipartUploadResult>"
            )
        if method == "POST" and upload_id is not None and set(query) == {"uploadId"}:
            parts = _completed_parts(await s3_payload.read_small(request))
            info = await run_in_threadpool(store.complete_upload, bucket, key, upload_id, parts)
            return _xml(
                f"<CompleteMultipartUploadResult{{ns}}><Location>/{escape(bucket)}/{escape(key)}</Location>"
                f"<Bucket>{escape(bucket)}</Bucket><Key>{escape(key)}</Key><ETag>{escape(info.etag)}</ETag>"
                "</CompleteMultipartUploadResult>"
            )
        raise _not_implemented(method, query)

    return router


_LIST_PARAMETERS = {"list-type", "prefix", "delimiter", "max-keys", "continuation-token", "start-after",
                    "encoding-type", "fetch-owner", "marker"}  # fmt: skip
_GET_PARAMETERS = {"partNumber", "versionId"} | {f"response-{h}" for h in
                   ("content-type", "content-language", "expires", "cache-control", "content-disposition",
                    "content-encoding")}  # fmt: skip


def _only(query: Any, allowed: set[str]) -> bool:
    return set(query) <= allowed


def _not_implemented(method: str, query: Any) -> ApiError:
    asked = ", ".join(sorted(query)) or "this request"
    return ApiError(
        501,
        "NotImplemented",
        f"A header you provided implies functionality that is not implemented (the local platform's S3 "
        f"does not serve {method} with {asked})",
    )


def _int(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ApiError(400, "InvalidArgument", f"{name} must be an integer", {"ArgumentName": name}) from None


def _iso(epoch: float) -> str:
    """S3's XML timestamps: ``2026-01-01T12:00:00.000Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch * 1000) % 1000:03d}Z"


def _xml(
    body: str, status: int = 200, headers: dict[str, str] | None = None, namespace: bool = True
) -> Response:
    text = '<?xml version="1.0" encoding="UTF-8"?>\n' + body.replace(
        "{ns}", f' xmlns="{XMLNS}"' if namespace else "", 1
    )
    return Response(text, status_code=status, headers=headers, media_type="application/xml")


def _object_headers(info: ObjectInfo) -> dict[str, str]:
    return {
        "ETag": info.etag,
        "Last-Modified": formatdate(info.mtime, usegmt=True),
        "Accept-Ranges": "bytes",
        "Content-Type": "binary/octet-stream",
    }


def _get_object(store: S3Store, request: Request, bucket: str, key: str) -> Response:
    """``HeadObject`` / ``GetObject``: ``If-Match`` (412 ``PreconditionFailed``), ``If-None-Match``
    (304), one ``Range`` (``bytes=a-b``, ``a-``, ``-n``: 206, else 416 ``InvalidRange``)."""
    info, path = store.open(bucket, key)
    headers = _object_headers(info)
    if_match = request.headers.get("if-match")
    if (
        if_match is not None
        and if_match not in ("*", info.etag)
        and if_match.strip('"') != info.etag.strip('"')
    ):
        raise ApiError(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold",
                       {"Condition": "If-Match"})  # fmt: skip
    if_none_match = request.headers.get("if-none-match")
    if if_none_match is not None and if_none_match.strip('"') in ("*", info.etag.strip('"')):
        return Response(status_code=304, headers=headers)
    start, end, status = 0, info.size - 1, 200
    if (spec := request.headers.get("range")) is not None:
        start, end = _range(spec, info.size)
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end}/{info.size}"
    length = max(0, end - start + 1)
    headers["Content-Length"] = str(length)
    if request.method == "HEAD":
        return Response(status_code=status, headers=headers)
    return StreamingResponse(_read(path, start, length), status_code=status, headers=headers)


def _range(spec: str, size: int) -> tuple[int, int]:
    unit, _, ranges = spec.partition("=")
    first, _, last = ranges.strip().partition("-")
    try:
        if unit.strip() != "bytes" or "," in ranges:
            raise ValueError
        if not first:  # the last N bytes
            start, end = max(0, size - int(last)), size - 1
        else:
            start, end = int(first), min(int(last), size - 1) if last else size - 1
    except ValueError:
        raise ApiError(400, "InvalidArgument", f"Invalid range header: {spec}") from None
    if start >= size or start > end:
        raise ApiError(416, "InvalidRange", "The requested range is not satisfiable",
                       {"RangeRequested": spec, "ActualObjectSize": str(size)})  # fmt: skip
    return start, end


def _read(path: Path, start: int, length: int) -> Iterator[bytes]:
    with path.open("rb") as f:
        f.seek(start)
        while length > 0 and (chunk := f.read(min(_READ_CHUNK, length))):
            length -= len(chunk)
            yield chunk


def _list_objects(store: S3Store, bucket: str, query: dict[str, str]) -> Response:
    """``ListObjectsV2`` (``list-type=2``: ``continuation-token``, ``start-after``) or ``ListObjects``
    (``marker``): ``prefix``, ``delimiter`` (keys past it rolled into ``CommonPrefixes``), ``max-keys``
    (≤ 1000, counting keys and common prefixes), ``encoding-type=url`` (boto3 asks for it)."""
    v2 = query.get("list-type") == "2"
    prefix, delimiter = query.get("prefix", ""), query.get("delimiter", "")
    max_keys = min(_int(query.get("max-keys", str(MAX_KEYS)), "max-keys"), MAX_KEYS)
    if max_keys < 0:
        raise ApiError(400, "InvalidArgument", "max-keys cannot be negative", {"ArgumentName": "max-keys"})
    token = query.get("continuation-token") if v2 else None
    after = query.get("start-after", "") if v2 else query.get("marker", "")
    skip_prefix = ""
    if token is not None:
        try:
            kind, after = _untoken(token)
        except ValueError:
            raise ApiError(400, "InvalidArgument", "The continuation token provided is incorrect",
                           {"ArgumentName": "continuation-token"}) from None  # fmt: skip
        skip_prefix = after if kind == "p" else ""
    contents: list[str] = []
    prefixes: list[str] = []
    last, truncated = "", False
    for key in store.keys(bucket, prefix):
        if key <= after or (skip_prefix and key.startswith(skip_prefix)):
            continue
        rest = key[len(prefix) :]
        common = (
            prefix + rest[: rest.index(delimiter) + len(delimiter)]
            if delimiter and delimiter in rest
            else None
        )
        if common is not None and prefixes and prefixes[-1] == common:
            continue
        if len(contents) + len(prefixes) >= max_keys:
            truncated = max_keys > 0  # max-keys=0 asks for no page at all
            break
        if common is not None:
            prefixes.append(common)
            last = "p" + common
        else:
            info = store.head(bucket, key)
            contents.append(
                f"<Contents><Key>{_enc(key, query)}</Key><LastModified>{_iso(info.mtime)}</LastModified>"
                f"<ETag>{escape(info.etag)}</ETag><Size>{info.size}</Size>"
                f"{_owner(query)}<StorageClass>STANDARD</StorageClass></Contents>"
            )
            last = "k" + key
    head = [f"<Name>{escape(bucket)}</Name>", f"<Prefix>{_enc(prefix, query)}</Prefix>"]
    if delimiter:
        head.append(f"<Delimiter>{_enc(delimiter, query)}</Delimiter>")
    head += [f"<MaxKeys>{max_keys}</MaxKeys>", f"<IsTruncated>{str(truncated).lower()}</IsTruncated>"]
    if query.get("encoding-type") == "url":
        head.append("<EncodingType>url</EncodingType>")
    if v2:
        head.append(f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount>")
        if token is not None:
            head.append(f"<ContinuationToken>{escape(token)}</ContinuationToken>")
        if query.get("start-after"):
            head.append(f"<StartAfter>{_enc(query['start-after'], query)}</StartAfter>")
        if truncated:
            head.append(f"<NextContinuationToken>{_token(last)}</NextContinuationToken>")
    else:
        head.append(f"<Marker>{_enc(query.get('marker', ''), query)}</Marker>")
        if truncated:
            head.append(f"<NextMarker>{_enc(last[1:], query)}</NextMarker>")
    rolled = "".join(f"<CommonPrefixes><Prefix>{_enc(p, query)}</Prefix></CommonPrefixes>" for p in prefixes)
    return _xml(f"<ListBucketResult{{ns}}>{''.join(head)}{''.join(contents)}{rolled}</ListBucketResult>")


def _enc(text: str, query: dict[str, str]) -> str:
    return quote(text, safe="/") if query.get("encoding-type") == "url" else escape(text)


def _owner(query: dict[str, str]) -> str:
    # ListObjects (v1) always names the owner; ListObjectsV2 only with fetch-owner=true
    if query.get("list-type") == "2" and query.get("fetch-owner") != "true":
        return ""
    return f"<Owner><ID>{OWNER_ID}</ID><DisplayName>{OWNER_ID}</DisplayName></Owner>"


def _token(last: str) -> str:
    """An opaque continuation token: what the page ended on (``k<key>`` or ``p<common prefix>``)."""
    return base64.urlsafe_b64encode(last.encode()).decode()


def _untoken(token: str) -> tuple[str, str]:
    text = base64.urlsafe_b64decode(token.encode()).decode()
    if not text or text[0] not in "kp":
        raise ValueError(token)
    return text[0], text[1:]


def _copy_source(header: str) -> tuple[str, str]:
    """``x-amz-copy-source``: ``[/]<bucket>/<url-encoded key>[?versionId=…]``."""
    source = unquote(header.partition("?")[0]).lstrip("/")
    bucket, _, key = source.partition("/")
    if not bucket or not key:
        raise ApiError(400, "InvalidArgument", "Copy Source must mention the source bucket and key: "
                       "sourcebucket/sourcekey", {"ArgumentName": "x-amz-copy-source"})  # fmt: skip
    return bucket, key


def _children(body: bytes, what: str) -> list[ET.Element]:
    """The elements named ``what`` under the root of an S3 request document, namespace or not."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        raise ApiError(400, "MalformedXML", "The XML you provided was not well-formed or did not "
                       "validate against our published schema") from None  # fmt: skip
    return [child for child in root if child.tag.rpartition("}")[2] == what]


def _text(element: ET.Element, name: str) -> str | None:
    for child in element:
        if child.tag.rpartition("}")[2] == name:
            return child.text or ""
    return None


def _completed_parts(body: bytes) -> list[tuple[int, str]]:
    """``<CompleteMultipartUpload><Part><PartNumber/><ETag/></Part>…`` → (number, ETag) pairs."""
    return [
        (_int(_text(p, "PartNumber") or "", "PartNumber"), _text(p, "ETag") or "")
        for p in _children(body, "Part")
    ]


async def _delete_objects(store: S3Store, bucket: str, body: bytes) -> Response:
    """``DeleteObjects``: ``<Delete><Object><Key/></Object>…<Quiet/></Delete>`` (≤ 1000 keys)."""
    keys = [_text(o, "Key") or "" for o in _children(body, "Object")]
    quiet = any((q.text or "").strip() == "true" for q in _children(body, "Quiet"))
    if len(keys) > MAX_KEYS:
        raise ApiError(400, "MalformedXML", "The XML you provided was not well-formed or did not "
                       "validate against our published schema")  # fmt: skip
    rows = []
    for key in keys:
        try:
            await run_in_threadpool(store.delete, bucket, key)
        except ApiError as err:
            rows.append(f"<Error><Key>{escape(key)}</Key><Code>{err.code}</Code>"
                        f"<Message>{escape(err.message)}</Message></Error>")  # fmt: skip
            continue
        if not quiet:
            rows.append(f"<Deleted><Key>{escape(key)}</Key></Deleted>")
    return _xml(f"<DeleteResult{{ns}}>{''.join(rows)}</DeleteResult>")
