"""Paths the local platform does not serve are refused with 501 in the error format of the platform
they belong to, never answered "not found": the rest of Together's API (the CLI's ``files upload``
comes before a fine-tune), and any API it emulates none of."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import API_KEY


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/files"), ("POST", "/v1/files/upload"), ("GET", "/v1/models"), ("GET", "/v3/projects")],
)
def test_the_rest_of_togethers_api_is_refused_in_togethers_format(platform, method, path):
    answer = httpx.request(method, platform.url + path, headers={"Authorization": f"Bearer {API_KEY}"})
    assert answer.status_code == 501, answer.text
    error = answer.json()["error"]
    assert error["code"] == "not_implemented" and path in error["message"], error


def test_an_api_no_platform_emulates_is_refused_not_found_for_jobs_stays(platform):
    answer = httpx.get(platform.url + "/2010-05-08/roles")
    assert answer.status_code == 501, answer.text
    assert answer.json()["error"] == "NOT_IMPLEMENTED"
    missing = httpx.get(platform.url + "/_local/jobs/job_train_000000000000")
    assert missing.status_code == 404 and missing.json()["error"] == "RESOURCE_NOT_FOUND"
