"""The local PAI answers every training-job operation of Alibaba's own client either as PAI does or
with an honest refusal: 501 ``NotImplemented`` for a route it lacks, 400 ``InvalidParameter``
naming a query parameter it does not apply; never ``EntityNotExist`` for a job that exists.
The operations are enumerated from ``alibabacloud_paistudio20220112.client.Client`` itself."""

from __future__ import annotations

import inspect
import time
import uuid

import pytest
from alibabacloud_paistudio20220112 import models
from alibabacloud_paistudio20220112.client import Client
from alibabacloud_tea_openapi import utils_models
from darabonba.runtime import RuntimeOptions

from tests.local_platform.test_pai_api import client, create, wait

SERVED = {
    "create_training_job",  # an empty request: 400 InvalidParameter naming the missing field
    "get_training_job",
    "get_training_job_error_info",
    "get_training_job_latest_metrics",
    "list_training_job_events",
    "list_training_job_logs",
    "list_training_job_metrics",
    "list_training_jobs",
    "stop_training_job",
}
NOT_IMPLEMENTED = {
    "delete_training_job",
    "delete_training_job_labels",
    "update_training_job_labels",
    "list_training_job_instance_events",
    "list_training_job_instance_metrics",
    "list_training_job_output_models",
}


def training_job_operations() -> list[str]:
    """The client's training-job operations (its plain methods, not the ``_with_options``/``_async``
    variants), ``stop_training_job`` last (it ends the job the others read)."""
    names = [
        n
        for n in dir(Client)
        if "training_job" in n and not n.startswith("_") and not n.endswith(("_with_options", "_async"))
    ]
    return sorted(names, key=lambda n: (n == "stop_training_job", n))


def call(pai: Client, name: str, job_id: str, instance_id: str):
    """Call operation ``name`` with the job's id, its instance's id and an empty request model."""
    args = []
    for param in list(inspect.signature(getattr(Client, name)).parameters.values())[1:]:
        if param.name == "training_job_id":
            args.append(job_id)
        elif param.name == "instance_id":
            args.append(instance_id)
        else:  # "main_models.XRequest"
            args.append(getattr(models, str(param.annotation).rsplit(".", 1)[-1])())
    return getattr(pai, name)(*args)


def test_every_training_job_operation_is_served_or_refused_honestly(platform):
    operations = training_job_operations()
    assert set(operations) == SERVED | NOT_IMPLEMENTED, "classify the client's new operations"
    pai = client(platform)
    job_id = create(pai, f"ops-{uuid.uuid4().hex[:8]}", epochs=100)
    job = wait(pai, job_id, lambda j: j.status == "Running")
    instance_id = job.instances[0].name
    outcomes = {}
    for name in operations:
        try:
            call(pai, name, job_id, instance_id)
            outcomes[name] = "ok"
        except Exception as exc:  # Tea's ClientException: .code, .status_code
            outcomes[name] = f"{getattr(exc, 'status_code', '?')} {getattr(exc, 'code', exc)}"
    expected = {name: "501 NotImplemented" for name in NOT_IMPLEMENTED}
    expected.update({name: "ok" for name in SERVED})
    expected["create_training_job"] = "400 InvalidParameter"
    assert outcomes == expected
    assert not any("EntityNotExist" in o for o in outcomes.values())


def test_a_501_is_in_pais_error_format(platform):
    pai = client(platform)
    with pytest.raises(Exception) as err:
        pai.list_training_job_output_models("trainwhatever")
    assert err.value.code == "NotImplemented" and err.value.status_code == 501
    assert "not implemented by the local training platform" in err.value.message
    assert err.value.data["RequestId"]


def list_query(platform, **query: str) -> dict:
    """``GET /api/v1/trainingjobs?<query>`` signed by Alibaba's own client (its generic ``call_api``:
    the request model has no field for a parameter ListTrainingJobs does not document)."""
    pai = client(platform)
    params = utils_models.Params(
        action="ListTrainingJobs",
        version="2022-01-12",
        protocol="HTTP",
        pathname="/api/v1/trainingjobs",
        method="GET",
        auth_type="AK",
        style="ROA",
        req_body_type="json",
        body_type="json",
    )
    return pai.call_api(params, utils_models.OpenApiRequest(query=query), RuntimeOptions())


@pytest.mark.parametrize("parameter", ["IsTempAlgo", "Tags", "NameContains"])  # documented, then not
def test_a_list_filter_the_local_platform_does_not_apply_is_refused_naming_it(platform, parameter):
    with pytest.raises(Exception) as err:
        list_query(platform, **{parameter: "x"})
    assert err.value.code == "InvalidParameter" and err.value.status_code == 400
    assert parameter in err.value.message


def test_list_filters_by_time_algorithm_sorts_and_pages(platform):
    pai, run = client(platform), uuid.uuid4().hex[:8]
    first = create(pai, f"a-{run}", epochs=1, **{"airflow-run": run})
    time.sleep(1.1)  # GmtCreateTime has whole milliseconds; StartTime whole seconds
    middle = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    second = create(pai, f"b-{run}", epochs=1, **{"airflow-run": run})
    labels = {"airflow-run": run}

    def listed(**kw):
        body = pai.list_training_jobs(models.ListTrainingJobsRequest(labels=labels, **kw)).body
        return [j.training_job_id for j in body.training_jobs], int(body.total_count)

    assert listed() == ([second, first], 2)  # newest first by default
    assert listed(order="ASC") == ([first, second], 2)
    assert listed(start_time=middle) == ([second], 1)
    assert listed(end_time=middle) == ([first], 1)
    assert listed(sort_by="TrainingJobName", order="ASC", page_size=1, page_number=2) == ([second], 2)
    assert listed(algorithm_name="nope") == ([], 0)  # the jobs have an AlgorithmSpec, no AlgorithmName
    with pytest.raises(Exception) as err:
        listed(sort_by="Nope")
    assert err.value.code == "InvalidParameter" and "SortBy" in err.value.message


def test_events_and_metrics_honour_their_time_window(platform):
    pai = client(platform)
    job_id = create(pai, f"win-{uuid.uuid4().hex[:8]}", epochs=2)
    wait(pai, job_id, lambda j: j.status == "Succeed")
    future = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    events = pai.list_training_job_events(job_id, models.ListTrainingJobEventsRequest()).body
    assert int(events.total_count) > 0
    later = pai.list_training_job_events(job_id, models.ListTrainingJobEventsRequest(start_time=future)).body
    assert later.events == [] and int(later.total_count) == 0
    metrics = pai.list_training_job_metrics(job_id, models.ListTrainingJobMetricsRequest()).body
    assert metrics.metrics
    none = pai.list_training_job_metrics(job_id, models.ListTrainingJobMetricsRequest(start_time=future)).body
    assert none.metrics == []


def test_latest_metrics_refuses_names_it_cannot_read(platform):
    pai = client(platform)
    job_id = create(pai, f"names-{uuid.uuid4().hex[:8]}", epochs=1)
    with pytest.raises(Exception) as err:
        pai.get_training_job_latest_metrics(job_id, models.GetTrainingJobLatestMetricsRequest(names="loss"))
    assert err.value.code == "InvalidParameter" and "Names" in err.value.message
