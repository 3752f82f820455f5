"""Just enough Alibaba Cloud OSS for a training job's code: ``PutObject``, so that alipai's
``Estimator.fit()`` and the provider (a portable spec's ``source_dir``) can upload code
(``docs/platforms/pai.md``, "Alibaba's alipai SDK against the local PAI"). ``oss://bucket/key`` is
``<data_dir>/oss/bucket/key``, the files a PAI job's ``CodeDir`` and channels name (:func:`.wire.oss_path`).

The wire, as ``oss2`` (Alibaba's OSS SDK) speaks it to an IP endpoint: path style
``PUT /<bucket>/<key>``, ``Authorization: OSS <AccessKey id>:<base64 HMAC-SHA1>`` (OSS signature
version 1, ``oss2.auth.ProviderAuth``), the ``x-oss-*`` headers signed; errors are OSS's XML
documents with ``x-oss-request-id``. Version 4 signatures (``OSS4-HMAC-SHA256``) are answered 501,
as is every other operation: uploads of 10 MB or more (oss2's multipart threshold) are out of reach.
The store itself is :class:`~airflow_training_platform.platforms.object_put.ObjectStore`.
"""

from __future__ import annotations

from airflow_training_platform.platforms.object_put import ObjectStore

OSS = ObjectStore(
    title="Alibaba Cloud OSS",
    scheme="oss",
    auth_schemes=(("OSS", "x-oss-"),),
    request_id_header="x-oss-request-id",
    unsupported_auth=("oss4-hmac-sha256",),
)
is_oss = OSS.is_request
object_path = OSS.object_path
build_app = OSS.build_app
