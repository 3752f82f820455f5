"""S3 buckets and objects kept as directories and files: ``s3://bucket/key`` is
``<data_dir>/s3/bucket/key``, the very files SageMaker training jobs read (channels) and write
(checkpoints) on the local platform (:func:`.wire.s3_path`). No I/O of HTTP here: :mod:`.s3` speaks the
wire format.

What a directory tree cannot be, S3 can, so a few things are refused (400 ``InvalidArgument``) rather
than stood in for: keys with an empty, ``.`` or ``..`` segment (``a//b``, ``../x``: a key never leaves
its bucket's directory), and a key under another key (``a`` and ``a/b`` cannot both be files). A bucket
is any directory under ``s3/``; a prefix exists while a file is under it (empty directories list as
nothing, as S3 has no directories).

Writes are atomic: an object is written under ``<data_dir>/s3-uploads/`` (multipart parts too) and
moved into place, so a job never reads half an object and a listing never shows one.

ETags are the MD5 of the content (``"<hex>"``), computed when first asked and kept per (size, mtime);
a completed multipart upload's is the MD5 of its parts' MD5s with ``-<parts>``, as S3's, kept in
memory only (after a restart the object's ETag is its plain MD5).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from airflow_training_platform.errors import ApiError

MIN_PART_SIZE = 5 * 1024 * 1024
"""S3's smallest part but the last (``CompleteMultipartUpload``: ``EntityTooSmall``)."""
MAX_PART_NUMBER = 10_000
MAX_KEY_BYTES = 1024
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_EXISTING_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class ObjectInfo:
    """One object: its ``key``, ``size`` (bytes), ``mtime`` (epoch seconds) and quoted ``etag``."""

    key: str
    size: int
    mtime: float
    etag: str


def no_such_bucket(bucket: str) -> ApiError:
    return ApiError(
        404, "NoSuchBucket", "The specified bucket does not exist", details={"BucketName": bucket}
    )


def no_such_key(key: str) -> ApiError:
    return ApiError(404, "NoSuchKey", "The specified key does not exist.", details={"Key": key})


def _invalid(message: str, **details: str) -> ApiError:
    return ApiError(400, "InvalidArgument", message, details=details)


class S3Store:
    """The buckets under ``<data_dir>/s3``; thread-safe (each write is a rename; the ETag cache is
    guarded)."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.root = Path(data_dir) / "s3"
        self.staging = Path(data_dir) / "s3-uploads"
        self._etags: dict[str, tuple[int, int, str]] = {}
        self._lock = threading.Lock()

    # -- buckets ---------------------------------------------------------------------------

    def bucket_dir(self, bucket: str) -> Path:
        """The directory of an existing bucket. :raises ApiError: 404 ``NoSuchBucket``."""
        path = self.root / bucket
        if not _EXISTING_BUCKET.match(bucket) or not path.is_dir():
            raise no_such_bucket(bucket)
        return path

    def buckets(self) -> list[tuple[str, float]]:
        """Every bucket's name and creation time (the directory's mtime), by name."""
        if not self.root.is_dir():
            return []
        return sorted(
            (entry.name, entry.stat().st_mtime)
            for entry in os.scandir(self.root)
            if entry.is_dir() and _EXISTING_BUCKET.match(entry.name)
        )

    def create_bucket(self, bucket: str) -> bool:
        """Create ``bucket``; ``False`` when it already existed.

        :raises ApiError: 400 ``InvalidBucketName`` (S3's naming rules: 3–63 characters, lower-case
            letters, digits, ``.`` and ``-``, starting and ending with a letter or digit).
        """
        if not _BUCKET_NAME.match(bucket) or ".." in bucket:
            raise ApiError(
                400, "InvalidBucketName", "The specified bucket is not valid.", details={"BucketName": bucket}
            )
        path = self.root / bucket
        if path.is_dir():
            return False
        path.mkdir(parents=True, exist_ok=True)
        return True

    def delete_bucket(self, bucket: str) -> None:
        """:raises ApiError: 404 ``NoSuchBucket``, 409 ``BucketNotEmpty`` while a file is in it."""
        path = self.bucket_dir(bucket)
        if any(files for _, _, files in os.walk(path)):
            raise ApiError(
                409,
                "BucketNotEmpty",
                "The bucket you tried to delete is not empty",
                details={"BucketName": bucket},
            )
        shutil.rmtree(path)

    # -- objects ---------------------------------------------------------------------------

    def object_path(self, bucket: str, key: str) -> Path:
        """Where ``key`` of an existing ``bucket`` is kept; the key is checked never to leave it.

        :raises ApiError: 404 ``NoSuchBucket``; 400 ``KeyTooLongError``, ``InvalidArgument``.
        """
        base = self.bucket_dir(bucket)
        if len(key.encode()) > MAX_KEY_BYTES:
            raise ApiError(400, "KeyTooLongError", "Your key is too long", details={"Key": key})
        parts = key.split("/")
        if key.endswith("/"):
            parts = parts[:-1]  # a "folder" marker names its directory
        if not key or any(p in ("", ".", "..") or "\0" in p for p in parts):
            raise _invalid(
                "The local platform keeps objects as files: a key may not have an empty, '.' or '..' segment",
                Key=key,
            )
        return base.joinpath(*parts)

    def head(self, bucket: str, key: str) -> ObjectInfo:
        """:raises ApiError: 404 ``NoSuchBucket`` / ``NoSuchKey``."""
        path = self.object_path(bucket, key)
        if key.endswith("/") or not path.is_file():
            raise no_such_key(key)
        stat = path.stat()
        return ObjectInfo(key, stat.st_size, stat.st_mtime, self._etag(path, stat))

    def open(self, bucket: str, key: str) -> tuple[ObjectInfo, Path]:
        """The object and its file (to read)."""
        info = self.head(bucket, key)
        return info, self.object_path(bucket, key)

    def new_upload_file(self) -> Path:
        """A fresh file in the staging directory, to write an object's bytes into before
        :meth:`put_file` moves it into place."""
        self.staging.mkdir(parents=True, exist_ok=True)
        return self.staging / f"put-{uuid.uuid4().hex}"

    def put_file(self, bucket: str, key: str, staged: Path, etag: str | None = None) -> ObjectInfo:
        """Move the ``staged`` file in as ``key`` (replacing it). A key ending in ``/`` with no bytes
        makes its directory (how consoles and the SDKs make "folders").

        :raises ApiError: 404 ``NoSuchBucket``; 400 ``InvalidArgument`` (a bad key, or a key that is
            a prefix of another here, or under one).
        """
        try:
            path = self.object_path(bucket, key)
            if key.endswith("/"):
                if staged.stat().st_size:
                    raise _invalid("The local platform keeps a key ending in '/' as a directory: it "
                                   "cannot hold bytes", Key=key)  # fmt: skip
                self._make_parents(path, key, including_self=True)
                return ObjectInfo(key, 0, path.stat().st_mtime, f'"{hashlib.md5(b"").hexdigest()}"')
            if path.is_dir():
                raise _invalid("The local platform keeps objects as files: other keys are under this "
                               "one", Key=key)  # fmt: skip
            self._make_parents(path, key)
            os.replace(staged, path)
        finally:
            staged.unlink(missing_ok=True)
        stat = path.stat()
        if etag is not None:
            with self._lock:
                self._etags[str(path)] = (stat.st_size, stat.st_mtime_ns, etag)
        return ObjectInfo(key, stat.st_size, stat.st_mtime, self._etag(path, stat))

    def copy(self, src_bucket: str, src_key: str, bucket: str, key: str) -> ObjectInfo:
        """``CopyObject``: the source's bytes (and ETag) as ``key``."""
        info, src = self.open(src_bucket, src_key)
        staged = self.new_upload_file()
        shutil.copyfile(src, staged)
        return self.put_file(bucket, key, staged, etag=info.etag)

    def delete(self, bucket: str, key: str) -> None:
        """Remove ``key`` if it is there (S3 answers a missing key's delete as done), and the
        directories it leaves empty up to the bucket's (a prefix exists only while keys do)."""
        path = self.object_path(bucket, key)
        base = self.root / bucket
        if path.is_file():
            path.unlink()
        elif not (key.endswith("/") and path.is_dir()):
            return
        for parent in [path, *path.parents] if key.endswith("/") else path.parents:
            if parent == base or base not in parent.parents:
                break
            try:
                parent.rmdir()
            except OSError:  # not empty
                break

    def _make_parents(self, path: Path, key: str, including_self: bool = False) -> None:
        base = path
        while not base.exists():
            base = base.parent
        if base.is_file() and base != path:
            raise _invalid("The local platform keeps objects as files: a key that is a prefix of this "
                           "one is an object", Key=key)  # fmt: skip
        (path if including_self else path.parent).mkdir(parents=True, exist_ok=True)

    def _etag(self, path: Path, stat: os.stat_result) -> str:
        with self._lock:
            cached = self._etags.get(str(path))
        if cached is not None and cached[:2] == (stat.st_size, stat.st_mtime_ns):
            return cached[2]
        digest = hashlib.md5()
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        etag = f'"{digest.hexdigest()}"'
        with self._lock:
            self._etags[str(path)] = (stat.st_size, stat.st_mtime_ns, etag)
        return etag

    # -- listing ---------------------------------------------------------------------------

    def keys(self, bucket: str, prefix: str = "") -> Iterator[str]:
        """Every key of ``bucket`` starting with ``prefix``, in S3's order (UTF-8 bytes, which is
        code-point order), walking only the directory the prefix points into."""
        base = self.bucket_dir(bucket)
        head, _, _ = prefix.rpartition("/")
        segments = [p for p in head.split("/") if p] if head else []
        if any(p in (".", "..") for p in segments):
            return
        start = base.joinpath(*segments)
        if not start.is_dir():
            return
        for key in _walk(start, "/".join(segments) + "/" if segments else ""):
            if key.startswith(prefix):
                yield key

    # -- multipart uploads -----------------------------------------------------------------

    def start_upload(self, bucket: str, key: str) -> str:
        """``CreateMultipartUpload``: a new upload id (its parts are kept in staging)."""
        self.object_path(bucket, key)  # the bucket exists and the key is one we can keep
        upload_id = uuid.uuid4().hex
        directory = self.staging / f"mpu-{upload_id}"
        directory.mkdir(parents=True)
        (directory / "target").write_text(f"{bucket}\n{key}", encoding="utf-8")
        return upload_id

    def upload_dir(self, bucket: str, key: str, upload_id: str) -> Path:
        """The staging directory of an upload of ``key`` in ``bucket``.

        :raises ApiError: 404 ``NoSuchUpload`` (unknown, completed, aborted, or of another key).
        """
        directory = self.staging / f"mpu-{upload_id}"
        target = directory / "target"
        if (
            not re.fullmatch(r"[0-9a-f]{32}", upload_id)
            or not target.is_file()
            or (target.read_text(encoding="utf-8") != f"{bucket}\n{key}")
        ):
            raise ApiError(
                404,
                "NoSuchUpload",
                "The specified upload does not exist. The upload ID may be invalid, or the upload may "
                "have been aborted or completed.",
                details={"UploadId": upload_id},
            )
        return directory

    def put_part(self, bucket: str, key: str, upload_id: str, number: int, staged: Path) -> str:
        """``UploadPart``: keep part ``number`` (1–10,000; a new one replaces it); its quoted ETag."""
        try:
            directory = self.upload_dir(bucket, key, upload_id)
            if not 1 <= number <= MAX_PART_NUMBER:
                raise _invalid("Part number must be an integer between 1 and 10000, inclusive",
                               ArgumentName="partNumber", ArgumentValue=str(number))  # fmt: skip
            digest = hashlib.md5()
            with staged.open("rb") as f:
                while chunk := f.read(1 << 20):
                    digest.update(chunk)
            os.replace(staged, directory / f"part-{number:05d}")
        finally:
            staged.unlink(missing_ok=True)
        return f'"{digest.hexdigest()}"'

    def complete_upload(
        self, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]]
    ) -> ObjectInfo:
        """``CompleteMultipartUpload``: the listed ``(part number, ETag)`` joined in order.

        :raises ApiError: 400 ``InvalidPartOrder`` (not ascending), ``InvalidPart`` (missing, or
            another ETag), ``EntityTooSmall`` (a part but the last under 5 MiB); 404 ``NoSuchUpload``.
        """
        directory = self.upload_dir(bucket, key, upload_id)
        numbers = [n for n, _ in parts]
        if not parts or numbers != sorted(set(numbers)):
            raise ApiError(400, "InvalidPartOrder", "The list of parts was not in ascending order. "
                           "Parts must be ordered by part number.")  # fmt: skip
        staged = self.new_upload_file()
        try:
            md5s = b""
            with staged.open("wb") as out:
                for index, (number, etag) in enumerate(parts):
                    part = directory / f"part-{number:05d}"
                    if not part.is_file():
                        raise _invalid_part(number)
                    digest = hashlib.md5()
                    with part.open("rb") as f:
                        while chunk := f.read(1 << 20):
                            digest.update(chunk)
                            out.write(chunk)
                    if etag.strip('"') != digest.hexdigest():
                        raise _invalid_part(number)
                    if index < len(parts) - 1 and part.stat().st_size < MIN_PART_SIZE:
                        raise ApiError(
                            400,
                            "EntityTooSmall",
                            "Your proposed upload is smaller than the minimum allowed size",
                            details={"PartNumber": str(number), "MinSizeAllowed": str(MIN_PART_SIZE)},
                        )
                    md5s += digest.digest()
        except BaseException:
            staged.unlink(missing_ok=True)
            raise
        etag = f'"{hashlib.md5(md5s).hexdigest()}-{len(parts)}"'
        info = self.put_file(bucket, key, staged, etag=etag)
        shutil.rmtree(directory, ignore_errors=True)
        return info

    def abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        """``AbortMultipartUpload``: drop its parts."""
        shutil.rmtree(self.upload_dir(bucket, key, upload_id))


def _invalid_part(number: int) -> ApiError:
    return ApiError(
        400,
        "InvalidPart",
        "One or more of the specified parts could not be found. The part might not have been uploaded, "
        "or the specified entity tag might not have matched the part's entity tag.",
        details={"PartNumber": str(number)},
    )


def _walk(directory: Path, prefix: str) -> Iterator[str]:
    """Keys of the files under ``directory`` (named ``prefix`` + relative path), in key order: an
    entry sorts as its name, with ``/`` after a directory's, which is where its keys fall."""
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:  # removed while listing
        return
    named = sorted((e.name + "/" if e.is_dir() else e.name, e) for e in entries)
    for name, entry in named:
        if name.endswith("/"):
            yield from _walk(Path(entry.path), prefix + name)
        elif entry.is_file():
            yield prefix + name
