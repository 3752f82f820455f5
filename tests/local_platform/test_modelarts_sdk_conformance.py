"""Huawei's ModelArts SDK (``huaweicloudsdkmodelarts`` 3.1.219, ``v1.ModelArtsClient``) as its users drive
it against the local platform: the job search's pages (``offset`` a page number), ``count``/``total``,
sort, filters and TMS ``tags``; the events' ``pattern``/``level``/time filters; delete; and every
training-job method of the client, enumerated from the client itself, served or refused honestly
(501 ``ModelArts.2858`` UnsupportedOperation, or the route's own 400) — never a not-found for a job that exists.

Parameters the SDK cannot send (an unknown one) go as plain HTTP with an IAM token (any token: the
server sets none). One server for the module; each test works in its own project.
"""

from __future__ import annotations

import inspect
import re
import time
import uuid
from typing import Any

import httpx
import pytest
from huaweicloudsdkcore.exceptions.exceptions import ClientRequestException, ServiceResponseException
from huaweicloudsdkmodelarts.v1 import ModelArtsClient
from huaweicloudsdkmodelarts.v1 import model as m

from airflow_training_platform.server import LocalPlatformServer
from tests.conftest import server_options
from tests.local_platform.test_modelarts_api import client, create, wait

ENDED = ("Completed", "Failed", "Terminated")
TRAINING_API = re.compile(r"^/v2/\{project_id\}/(training-[^/]+|modelarts-training-job)(/|$)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalPlatformServer(
        str(tmp_path_factory.mktemp("ma-sdk")),
        gpus=3,
        seconds_per_epoch=0.2,
        log_level="warning",
        **server_options(),
    ) as srv:
        yield srv


def project() -> str:
    return uuid.uuid4().hex[:12]


def raw(server, method: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(method, server.url + path, headers={"X-Auth-Token": "any"}, timeout=10, **kwargs)


def searched(ma: ModelArtsClient, **body: Any):
    return ma.list_training_jobs(m.ListTrainingJobsRequest(body=m.JobSearches(**body)))


def test_search_pages_counts_sorts_filters_and_tags(server):
    proj = project()
    ma = client(server, project=proj)
    names = [f"page-{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    ids = []
    for name in names:  # distinct create_time (ms)
        ids.append(create(ma, name, epochs=1))
        time.sleep(0.01)
    for job_id in ids:
        wait(ma, job_id, lambda j: j.status.phase in ENDED)

    newest_first = list(reversed(ids))
    first, second = searched(ma, offset=0, limit=2), searched(ma, offset=1, limit=2)
    assert [j.metadata.id for j in first.items] == newest_first[:2]  # default: create_time desc
    assert [j.metadata.id for j in second.items] == newest_first[2:]  # offset is a page number
    assert (first.total, first.count, second.offset, second.limit) == (3, 3, 1, 2)
    assert searched(ma, offset=1, limit=3).items == []
    asc = searched(ma, order="asc", limit=50)
    assert [j.metadata.id for j in asc.items] == ids and (asc.sort_by, asc.order) == ("create_time", "asc")

    two = searched(ma, limit=1, filters=[m.Filter(key="name", operator="in", value=names[:2])])
    assert (two.total, two.count, len(two.items)) == (3, 2, 1)  # count: all matches; total: the project's
    created = [j.metadata.create_time for j in asc.items]
    between = m.Filter(key="create_time", operator="between", value=[str(created[1]), str(created[2])])
    assert [j.metadata.id for j in searched(ma, order="asc", filters=[between]).items] == ids[1:]

    ma.create_train_job_tags(
        m.CreateTrainJobTagsRequest(
            training_job_id=ids[0],
            body=m.CreateTmsTagsRequest(
                tags=[m.TmsTag(key="team", value="vision"), m.TmsTag(key="tier", value="gold")]
            ),
        )
    )
    ma.create_train_job_tags(
        m.CreateTrainJobTagsRequest(
            training_job_id=ids[1], body=m.CreateTmsTagsRequest(tags=[m.TmsTag(key="team", value="nlp")])
        )
    )
    shown = ma.show_train_job_tags(m.ShowTrainJobTagsRequest(training_job_id=ids[0]))
    assert [(t.key, t.value) for t in shown.tags] == [("team", "vision"), ("tier", "gold")]

    def by_tags(*tags: m.ListTagFilter) -> list[str]:
        return [j.metadata.id for j in searched(ma, order="asc", tags=list(tags)).items]

    assert by_tags(m.ListTagFilter(key="team", values=["vision"])) == [ids[0]]
    assert by_tags(m.ListTagFilter(key="team", values=["vision", "nlp"])) == ids[:2]  # values: OR
    assert by_tags(m.ListTagFilter(key="team")) == ids[:2]  # no values: the key is set
    assert by_tags(m.ListTagFilter(key="team"), m.ListTagFilter(key="tier", values=["gold"])) == [
        ids[0]
    ]  # AND
    assert by_tags(m.ListTagFilter(key="team", values=["audio"])) == []
    ma.delete_train_job_tags(
        m.DeleteTrainJobTagsRequest(
            training_job_id=ids[0], body=m.DeleteTmsTagsRequest(tags=[m.TmsTag(key="tier")])
        )
    )
    assert by_tags(m.ListTagFilter(key="tier")) == []


@pytest.mark.parametrize(
    ("body", "named", "code"),
    [
        ({"filters": [{"key": "algorithm_name", "operator": "in", "value": ["x"]}]}, "filters.0.key", "2807"),
        (
            {"filters": [{"key": "phase", "operator": "between", "value": ["a", "b"]}]},
            "filters.0.operator",
            "2808",
        ),
        (
            {"filters": [{"key": "create_time", "operator": "between", "value": ["1"]}]},
            "filters.0.value",
            "2809",
        ),
        ({"host_ips": ["10.0.0.1"]}, "host_ips", "2858"),
        ({"group_by": "phase"}, "group_by", "2858"),
        ({"sort_by": "duration"}, "sort_by", "2790"),
        ({"limit": 51}, "limit", "0101"),
        ({"offset": -1}, "offset", "0101"),
        ({"tags": [{"key": "a"}, {"key": "a"}]}, "tags.1.key", "0101"),
        ({"page": 2}, "page", "0101"),
    ],
)
def test_a_search_parameter_it_cannot_apply_is_refused_naming_it(server, body, named, code):
    answer = raw(server, "POST", f"/v2/{project()}/training-job-searches", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error_code"] == f"ModelArts.{code}", answer.text
    assert f"Invalid parameter {named}:" in answer.json()["error_msg"]


def test_events_filter_by_pattern_level_and_time_and_refuse_unknown_parameters(server):
    proj = project()
    ma = client(server, project=proj)
    job_id = create(ma, f"ev-{uuid.uuid4().hex[:6]}", epochs=3)
    wait(ma, job_id, lambda j: j.status.phase in ENDED)

    def listed(**query: Any):
        return ma.list_training_job_events(m.ListTrainingJobEventsRequest(training_job_id=job_id, **query))

    everything = listed(limit=100, order="asc")
    epochs = listed(limit=100, order="asc", pattern="Epoch 2 complete")
    assert [e.message for e in epochs.events] == [
        e.message for e in everything.events if "Epoch 2 complete" in e.message
    ]
    assert epochs.total == len(epochs.events) == 1
    assert listed(pattern="no such text anywhere").events == []
    assert listed(level="Error").total == 0
    page = listed(limit=2, offset=1, order="asc")
    assert [e.message for e in page.events] == [e.message for e in everything.events[1:3]]

    times = sorted(e.time for e in everything.events)
    stamp = [
        int(time.mktime(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone) * 1000 for t in times
    ]
    windowed = listed(limit=100, start_time=str(stamp[0]), end_time=str(stamp[-1] + 999))
    assert windowed.total == everything.total
    assert listed(limit=100, start_time="0", end_time="1000").total == 0

    path = f"/v2/{proj}/training-jobs/{job_id}/events"
    for query, named in (({"pattern": "x", "regex": "y"}, "regex"), ({"start_time": "0"}, "end_time"),
                         ({"level": "Debug"}, "level"), ({"pattern": "p" * 257}, "pattern")):  # fmt: skip
        answer = raw(server, "GET", path, params=query)
        assert answer.status_code == 400 and f"Invalid parameter {named}:" in answer.json()["error_msg"], (
            answer.text
        )


def test_delete_refuses_a_running_job_and_really_deletes_an_ended_one(server):
    proj = project()
    ma = client(server, project=proj)
    job_id = create(ma, f"del-{uuid.uuid4().hex[:6]}", epochs=200)
    wait(ma, job_id, lambda j: j.status.phase == "Running")
    with pytest.raises(ClientRequestException) as err:
        ma.delete_training_job(m.DeleteTrainingJobRequest(training_job_id=job_id))
    assert (err.value.status_code, err.value.error_code) == (400, "ModelArts.2768")

    ma.stop_training_job(
        m.StopTrainingJobRequest(training_job_id=job_id, body=m.JobActionType(action_type="terminate"))
    )
    wait(ma, job_id, lambda j: j.status.phase == "Terminated")
    assert raw(server, "DELETE", f"/v2/{proj}/training-jobs/{job_id}").status_code == 202
    with pytest.raises(ClientRequestException) as err:
        ma.show_training_job_details(m.ShowTrainingJobDetailsRequest(training_job_id=job_id))
    assert (err.value.status_code, err.value.error_code) == (404, "ModelArts.2762")
    assert searched(ma, limit=50).total == 0
    assert raw(server, "GET", f"/_local/jobs/{job_id}").status_code == 404


#: the training-API methods of ModelArtsClient the local platform serves; every other one is 501
SERVED = {
    "create_train_job_tags", "create_training_job", "delete_train_job_tags", "delete_training_job",
    "list_training_job_events", "list_training_job_tags", "list_training_jobs", "show_train_job_tags",
    "show_training_job_details", "show_training_job_logs_from_aom", "show_training_job_logs_preview",
    "show_training_job_metrics", "stop_training_job",
}  # fmt: skip


def _request_class(method: str) -> type:
    return getattr(m, "".join(part.capitalize() for part in method.split("_")) + "Request")


def training_api_methods() -> dict[str, dict[str, Any]]:
    """``{method name: its http info}`` for every ``ModelArtsClient`` method on a training-API path,
    read from the client's own ``_<method>_http_info`` builders."""
    found = {}
    for name, builder in inspect.getmembers(ModelArtsClient):
        if not (name.startswith("_") and name.endswith("_http_info")):
            continue
        method = name[1 : -len("_http_info")]
        try:
            info = builder(_request_class(method)())
        except AttributeError:  # a method without a request class of that name: not a training one
            continue
        if TRAINING_API.match(info["resource_path"]):
            found[method] = info
    return found


def test_every_training_job_method_of_the_client_is_served_or_refused_honestly(server):
    proj = project()
    ma = client(server, project=proj)
    job_id = create(ma, f"enum-{uuid.uuid4().hex[:6]}", epochs=1)
    wait(ma, job_id, lambda j: j.status.phase in ENDED)
    bodies: dict[str, Any] = {
        "list_training_jobs": m.JobSearches(offset=0, limit=10),
        "stop_training_job": m.JobActionType(action_type="terminate"),
        "create_train_job_tags": m.CreateTmsTagsRequest(tags=[m.TmsTag(key="k", value="v")]),
        "delete_train_job_tags": m.DeleteTmsTagsRequest(tags=[m.TmsTag(key="k")]),
    }
    methods = training_api_methods()
    assert SERVED < set(methods) and len(methods) > 30, sorted(methods)
    outcome: dict[str, str] = {}
    for method in sorted(methods, key=lambda name: name == "delete_training_job"):  # the job is used before
        request = _request_class(method)()
        for param in re.findall(r"\{(\w+)\}", methods[method]["resource_path"]):
            if param != "project_id":
                setattr(request, param, {"training_job_id": job_id, "task_id": "worker-0"}.get(param, "x"))
        if method == "create_training_job":
            outcome[method] = "served"  # create() above
            continue
        if method in bodies:
            request.body = bodies[method]
        try:
            getattr(ma, method)(request)
            outcome[method] = "served"
        except ServiceResponseException as exc:
            assert exc.status_code != 404 and exc.error_code != "ModelArts.2762", f"{method}: {exc.error_msg}"
            if exc.status_code == 501:
                assert exc.error_code == "ModelArts.2858", f"{method}: {exc.error_code}"
            outcome[method] = "501" if exc.status_code == 501 else "served"
    assert {name for name, how in outcome.items() if how == "served"} == SERVED, outcome
