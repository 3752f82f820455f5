"""Just enough Huawei Cloud OBS for a training job's code: ``PutObject``, so that the provider (a
portable spec's ``source_dir``) or ``esdk-obs-python`` can upload a job's ``code_dir``
(``docs/platforms/modelarts.md``, "OBS"). ``obs://bucket/key`` (ModelArts' ``/bucket/key``) is
``<data_dir>/obs/bucket/key`` (:func:`.wire.obs_path`).

The wire, as ``esdk-obs-python`` (Huawei's OBS SDK) speaks it to an IP endpoint (path style):
``PUT /<bucket>/<key>``, ``Authorization: OBS <AK>:<base64 HMAC-SHA1>`` with the ``x-obs-*``
headers signed (OBS API reference, "Authentication of Signature in a Header"), or — what the SDK
sends on a path-style endpoint — the S3-compatible ``AWS <AK>:<signature>`` with the ``x-amz-*``
headers; errors are OBS's XML documents with ``x-obs-request-id``. Every other operation is
answered 501. The store itself is
:class:`~airflow_training_platform.platforms.object_put.ObjectStore`.
"""

from __future__ import annotations

from airflow_training_platform.platforms.object_put import ObjectStore

OBS = ObjectStore(
    title="Huawei Cloud OBS",
    scheme="obs",
    auth_schemes=(("OBS", "x-obs-"), ("AWS", "x-amz-")),
    request_id_header="x-obs-request-id",
    vendor_date_signed_as_date=False,
)
is_obs = OBS.is_request
build_app = OBS.build_app
