"""The local PAI's checks of Alibaba's older signatures agree with Alibaba's own signers: the ROA
HMAC-SHA1 string to sign and signature of ``alibabacloud-tea-openapi`` (what alipai's clients
send), and OSS keys that would leave their bucket's directory are refused."""

from __future__ import annotations

import pytest
from alibabacloud_tea_openapi.utils import Utils
from darabonba.request import DaraRequest

from airflow_training_platform.errors import ApiError
from airflow_training_platform.platforms.pai import oss, roa_v1


@pytest.mark.parametrize(
    "query",
    [
        {},
        {
            "Labels": '{"airflow-run":"r 1"}',
            "StartTime": "2026-12-01T00:00:00Z",
            "PageSize": "5",
            "Empty": "",
        },
    ],
)
def test_tea_openapis_roa_signer_and_the_local_check_agree(query):
    request = DaraRequest()
    request.method, request.pathname, request.query = "GET", "/api/v1/trainingjobs", dict(query)
    request.headers = {
        "date": "Wed, 02 Dec 2026 06:00:00 GMT",
        "host": "127.0.0.1:8765",
        "accept": "application/json",
        "x-acs-signature-nonce": "f00d",
        "x-acs-signature-method": "HMAC-SHA1",
        "x-acs-signature-version": "1.0",
        "x-acs-version": "2022-01-12",
        "x-acs-action": "ListTrainingJobs",
        "user-agent": "AlibabaCloud",
    }
    theirs = Utils.get_string_to_sign(request)
    ours = roa_v1.string_to_sign("GET", request.pathname, list(query.items()), request.headers)
    assert ours == theirs
    assert roa_v1.signature("s3cret", ours) == Utils.get_roasignature(theirs, "s3cret")
    assert roa_v1.signature("wrong", ours) != Utils.get_roasignature(theirs, "s3cret")


def test_only_acs_authorizations_are_read_as_roa_v1():
    assert roa_v1.is_roa_v1("acs LTAI:abc=")
    assert not roa_v1.is_roa_v1("ACS3-HMAC-SHA256 Credential=LTAI,SignedHeaders=host,Signature=00")


@pytest.mark.parametrize("key", ["../escape.py", "a/../../b", "a//b", "./a", ""])
def test_an_oss_key_never_leaves_its_bucket(key, tmp_path):
    with pytest.raises(ApiError) as err:
        oss.object_path(str(tmp_path), "out", key)
    assert err.value.status == 400 and err.value.code == "InvalidObjectName"


def test_an_oss_key_is_a_file_under_its_bucket(tmp_path):
    assert oss.object_path(str(tmp_path), "out", "pai/src/train.py") == str(
        tmp_path / "oss/out/pai/src/train.py"
    )
