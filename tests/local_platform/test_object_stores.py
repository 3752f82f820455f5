"""The local platform's OSS and OBS ``PutObject``, driven by each vendor's own SDK (``oss2``,
``esdk-obs-python``): an object written lands as a file under ``<data_dir>/<scheme>/<bucket>/``,
a wrong secret is refused as the cloud refuses it, and what is not implemented says so."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import oss2
import pytest
from obs import ObsClient

from tests.conftest import API_KEY, MODELARTS_ACCESS_KEY, PAI_ACCESS_KEY_ID


def obs_client(platform, secret: str = API_KEY) -> ObsClient:
    return ObsClient(
        access_key_id=MODELARTS_ACCESS_KEY, secret_access_key=secret, server=platform.url, path_style=True
    )


def test_obs_put_object_with_huaweis_client_writes_the_file(platform):
    key = f"code/{uuid.uuid4().hex[:8]}/train.py"
    client = obs_client(platform)
    answer = client.putContent("bucket-a", key, b"print('hi')\n")
    client.close()
    assert answer.status == 200, (answer.errorCode, answer.errorMessage)
    assert answer.body.etag.strip('"').lower() == hashlib.md5(b"print('hi')\n").hexdigest()
    assert (Path(platform.data_dir) / "obs" / "bucket-a" / key).read_bytes() == b"print('hi')\n"


def test_obs_refuses_a_wrong_secret_and_says_what_it_does_not_implement(platform):
    client = obs_client(platform, secret="wrong-secret")
    refused = client.putContent("bucket-a", "x/y.txt", b"x")
    assert (refused.status, refused.errorCode) == (403, "SignatureDoesNotMatch")
    assert not (Path(platform.data_dir) / "obs" / "bucket-a" / "x" / "y.txt").exists()
    client.close()
    client = obs_client(platform)
    read = client.getObject("bucket-a", "x/y.txt", loadStreamInMemory=True)
    client.close()
    assert (read.status, read.errorCode) == (501, "NotImplemented")


@pytest.mark.parametrize(("secret", "code"), [(API_KEY, None), ("wrong-secret", "SignatureDoesNotMatch")])
def test_oss_put_object_with_alibabas_client(platform, secret, code):
    key = f"code/{uuid.uuid4().hex[:8]}/train.py"
    bucket = oss2.Bucket(oss2.Auth(PAI_ACCESS_KEY_ID, secret), platform.url, "bucket-b")
    path = Path(platform.data_dir) / "oss" / "bucket-b" / key
    if code is None:
        assert bucket.put_object(key, b"x = 1\n").status == 200
        assert path.read_bytes() == b"x = 1\n"
        return
    with pytest.raises(oss2.exceptions.OssError) as info:
        bucket.put_object(key, b"x = 1\n")
    assert (info.value.status, info.value.code) == (403, code) and not path.exists()
