"""A training connection's object storage: where a portable spec's relative locations are, and
where the operator uploads its ``source_dir``.

The connection's ``storage_root`` extra names it (``s3://my-bucket/ml/`` on an ``aws`` connection,
``oss://…`` on ``pai``, ``obs://…`` on ``modelarts``); objects are written with each cloud's own
SDK and the connection's credentials: boto3 through the Amazon provider's ``S3Hook`` (the ``aws``
connection's whole credential chain and its ``endpoint_url``), ``oss2`` for OSS and
``esdk-obs-python`` for OBS (the access key pair and session token the connection signs its API
calls with). On a connection to the local training platform (a loopback host) the object
endpoint is the platform itself, which stores the objects as files.

:func:`source_files`, :func:`source_digest` and :func:`pack_source` prepare a ``source_dir``;
:meth:`PlatformStorage.upload_source` puts it where the compiled job reads it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import logging
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from airflow_training_provider.errors import InvalidJobSpecError, TrainingPlatformError
from airflow_training_provider.hooks.connection import PlatformConnection
from airflow_training_provider.platforms.base import TRANSIENT_STATUSES
from airflow_training_provider.platforms.credentials import SigningKeys
from airflow_training_provider.portable import bucket_key, check_storage_root
from airflow_training_provider.spec_secrets import mask

log = logging.getLogger(__name__)

#: what a code upload leaves out of ``source_dir``
_SKIPPED_PARTS = frozenset({"__pycache__", ".git", ".ipynb_checkpoints", ".venv"})
_SKIPPED_SUFFIXES = (".pyc", ".pyo")
#: the archive SageMaker script mode downloads and unpacks (``sagemaker_submit_directory``)
SOURCE_ARCHIVE = "sourcedir.tar.gz"
#: attempts of one object's upload when the store fails transiently (no answer, 429, 5xx), and the
#: first wait between them (seconds, doubled each time)
UPLOAD_ATTEMPTS, UPLOAD_BACKOFF = 3, 1.0
#: a ``source_dir`` larger than this is refused (bytes): code, not data, belongs there
MAX_SOURCE_BYTES = 50 * 1024 * 1024


def source_files(source_dir: str | Path) -> dict[str, Path]:
    """The files of ``source_dir`` by their path in it (``src/train.py``), sorted, without caches
    (``__pycache__``, ``*.pyc``) and VCS directories.

    :raises InvalidJobSpecError: naming ``source_dir``: not a directory, empty, or over
        :data:`MAX_SOURCE_BYTES`."""
    root = Path(source_dir)
    if not root.is_dir():
        raise InvalidJobSpecError("source_dir", f"'{root}' is not a directory on this worker")
    files = {
        path.relative_to(root).as_posix(): path
        for path in sorted(root.rglob("*"))
        if path.is_file()
        and not _SKIPPED_PARTS & set(path.relative_to(root).parts)
        and not path.name.endswith(_SKIPPED_SUFFIXES)
    }
    if not files:
        raise InvalidJobSpecError("source_dir", f"'{root}' holds no files")
    size = sum(p.stat().st_size for p in files.values())
    if size > MAX_SOURCE_BYTES:
        raise InvalidJobSpecError(
            "source_dir",
            f"'{root}' holds {size / 1e6:.1f} MB, over {MAX_SOURCE_BYTES / 1e6:.0f} MB: "
            "keep data out of the code directory (give it as an input)",
        )
    return files


def source_digest(files: Mapping[str, Path]) -> str:
    """16 hex characters of SHA-256 over the files' names and contents: the uploaded code's name
    (``<storage_root>/code/<digest>/``), the same for the same code on every worker."""
    digest = hashlib.sha256()
    for name, path in sorted(files.items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def pack_source(files: Mapping[str, Path]) -> bytes:
    """``files`` as a gzipped tar, each at its path in ``source_dir`` (as the SageMaker Python SDK
    packs ``sourcedir.tar.gz``): the same bytes for the same files (no times, owners)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, path in sorted(files.items()):
            data = path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755 if path.stat().st_mode & 0o111 else 0o644
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


class PlatformStorage:
    """The object storage of a training connection (its ``storage_root``).

    :param connection: the resolved connection (:attr:`TrainingPlatformHook.platform_connection`).
    :raises InvalidJobSpecError: the connection's platform has no object storage, or the connection
        has no ``storage_root`` extra (naming the extra to set).
    """

    def __init__(self, connection: PlatformConnection) -> None:
        self.connection = connection
        scheme = connection.dialect.storage_scheme
        if scheme is None:
            raise InvalidJobSpecError(
                "storage_root", f"{connection.platform.display_name} has no object storage", parameter=True
            )
        if not connection.storage_root:
            raise InvalidJobSpecError(
                "storage_root",
                f"connection {connection.conn_id!r} has no storage_root extra (e.g. {scheme}://my-bucket/ml/)",
                parameter=True,
            )
        check_storage_root(connection.storage_root, scheme, connection.conn_id)
        self.scheme = scheme
        self.root: str = connection.storage_root

    def uri(self, key: str) -> str:
        """The URI of ``key`` (relative to the storage root)."""
        return self.root + key.lstrip("/")

    def put(self, key: str, data: bytes) -> str:
        """Write ``data`` at ``key`` (relative to the storage root); returns its URI.

        :raises TrainingPlatformError: the store refused it (its message names the bucket and key)."""
        uri = self.uri(key)
        bucket, object_key = bucket_key(uri)

        def write() -> None:
            try:
                _WRITERS[self.scheme](self.connection, bucket, object_key, data)
            except TrainingPlatformError:
                raise
            except Exception as exc:  # noqa: BLE001 - the cloud SDK's own (botocore, oss2, OBS: a socket error)
                status, code = _sdk_error(exc)
                raise TrainingPlatformError(
                    f"the upload of {uri} (connection {self.connection.conn_id!r}) failed: "
                    f"{type(exc).__name__}: {getattr(exc, 'message', None) or exc}",
                    status=status,
                    code=code,
                ) from exc

        # the same bytes to the same key: a transient failure (no answer, 429, 5xx) is tried again
        Retrying(
            stop=stop_after_attempt(UPLOAD_ATTEMPTS),
            wait=wait_exponential(multiplier=UPLOAD_BACKOFF, max=2 * UPLOAD_BACKOFF),
            retry=retry_if_exception(
                lambda e: (
                    isinstance(e, TrainingPlatformError)
                    and (e.status is None or e.status in TRANSIENT_STATUSES)
                )
            ),
            before_sleep=lambda state: log.warning(
                "Upload of %s failed (%s); trying again (%d of %d)",
                uri,
                state.outcome.exception() if state.outcome else None,
                state.attempt_number + 1,
                UPLOAD_ATTEMPTS,
            ),
            reraise=True,
        )(write)
        return uri

    def upload_source(self, files: Mapping[str, Path], code_uri: str, packed: bool) -> list[str]:
        """Upload ``source_dir``'s ``files`` under ``code_uri`` (a directory URI in this storage):
        as one :data:`SOURCE_ARCHIVE` when ``packed``, else file by file. Returns the URIs written."""
        key = code_uri.removeprefix(self.root)
        if packed:
            return [self.put(key + SOURCE_ARCHIVE, pack_source(files))]
        return [self.put(key + name, path.read_bytes()) for name, path in files.items()]

    def ensure_bucket(self) -> None:
        """Create the storage root's bucket when it does not exist (S3 only: for the local
        training platform, where buckets start empty; OSS and OBS buckets are left as they are)."""
        if self.scheme != "s3":
            return
        hook = _s3_hook(self.connection)
        bucket, _ = bucket_key(self.root)
        if not hook.check_for_bucket(bucket):
            hook.create_bucket(bucket)


def _sdk_error(exc: BaseException) -> tuple[int | None, str | None]:
    """The HTTP status and error code a cloud SDK's exception carries (botocore ``ClientError``,
    ``oss2.exceptions.OssError``), if any."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):  # botocore
        error = response.get("Error") or {}
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        return status, error.get("Code")
    status = getattr(exc, "status", None)  # oss2 (-2: no answer)
    return (status if isinstance(status, int) and status > 0 else None), getattr(exc, "code", None) or None


def _s3_hook(connection: PlatformConnection) -> Any:
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    return S3Hook(aws_conn_id=connection.conn_id)


def _put_s3(connection: PlatformConnection, bucket: str, key: str, data: bytes) -> None:
    _s3_hook(connection).get_conn().put_object(Bucket=bucket, Key=key, Body=data)


def _local_endpoint(connection: PlatformConnection) -> str | None:
    """The connection's base URL when it is the local training platform (a loopback host), which
    serves the object store too."""
    host = urlsplit(connection.base_url).hostname
    return connection.base_url if host in ("127.0.0.1", "localhost", "::1") else None


def _access_keys(connection: PlatformConnection) -> SigningKeys:
    """The connection's access key pair (and session token) for its object store, registered with
    the secrets masker first (the stores' SDKs log signed headers at debug level).

    :raises InvalidJobSpecError: the connection has no access key (a ModelArts IAM token signs no
        OBS request)."""
    keys = connection.credentials.signing_keys()
    if not keys.access_key_id or not keys.secret_access_key:
        raise InvalidJobSpecError(
            "source_dir",
            f"uploading needs an access key pair on connection {connection.conn_id!r} "
            f"({connection.platform.display_name}); it has none (an IAM token cannot sign object uploads)",
        )
    mask([v for v in (keys.secret_access_key, keys.session_token) if v])
    return keys


def _put_oss(connection: PlatformConnection, bucket: str, key: str, data: bytes) -> None:
    import oss2

    keys = _access_keys(connection)
    if keys.session_token:
        auth: Any = oss2.StsAuth(keys.access_key_id, keys.secret_access_key, keys.session_token)
    else:
        auth = oss2.Auth(keys.access_key_id, keys.secret_access_key)
    endpoint = _local_endpoint(connection) or f"https://oss-{connection.credentials.region}.aliyuncs.com"
    oss2.Bucket(auth, endpoint, bucket).put_object(key, data)


def _put_obs(connection: PlatformConnection, bucket: str, key: str, data: bytes) -> None:
    from obs import ObsClient

    keys = _access_keys(connection)
    local = _local_endpoint(connection)
    server = local or f"https://obs.{connection.credentials.region}.myhuaweicloud.com"
    client = ObsClient(
        access_key_id=keys.access_key_id,
        secret_access_key=keys.secret_access_key,
        security_token=keys.session_token,
        server=server,
        path_style=local is not None,
        signature="obs",
    )
    try:
        answer = client.putContent(bucket, key, data)
    finally:
        client.close()
    if answer.status >= 300:
        raise TrainingPlatformError(
            f"OBS refused the upload of obs://{bucket}/{key}: {answer.errorCode} {answer.errorMessage}",
            status=answer.status,
            code=answer.errorCode,
        )


_WRITERS = {"s3": _put_s3, "oss": _put_oss, "obs": _put_obs}
