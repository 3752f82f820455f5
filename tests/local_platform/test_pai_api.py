"""The local platform's PAI, driven by Alibaba's own client (``alibabacloud-paistudio20220112``):
if its models accept our answers and our ACS3 check accepts its signed requests, the wire format
is right. Sync and asyncio clients both."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest
from alibabacloud_paistudio20220112 import models
from alibabacloud_paistudio20220112.client import Client
from alibabacloud_tea_openapi.models import Config

from tests.conftest import API_KEY, PAI_ACCESS_KEY_ID, PAI_WORKSPACE_ID


def client(
    platform, secret: str = API_KEY, key_id: str = PAI_ACCESS_KEY_ID, signature_algorithm: str | None = None
) -> Client:
    """Alibaba's client for the local PAI; ``signature_algorithm="v2"``: the older ROA HMAC-SHA1
    signature (what alipai configures), else ACS3-HMAC-SHA256 (the client's default)."""
    host = platform.url.split("://", 1)[1]
    config = Config(
        access_key_id=key_id,
        access_key_secret=secret,
        region_id="cn-hangzhou",
        endpoint=host,
        protocol="http",
        signature_algorithm=signature_algorithm,
    )
    return Client(config)


def create(pai: Client, name: str, epochs: int = 20, checkpoints: str | None = None, **labels: str) -> str:
    request = models.CreateTrainingJobRequest(
        training_job_name=name,
        workspace_id=PAI_WORKSPACE_ID,
        algorithm_spec=models.AlgorithmSpec(image="local/digits-mlp:1", command=["python", "train.py"]),
        compute_resource=models.CreateTrainingJobRequestComputeResource(
            ecs_spec="ecs.gn7i-c8g1.2xlarge", ecs_count=1
        ),
        hyper_parameters=[
            models.CreateTrainingJobRequestHyperParameters(name="epochs", value=str(epochs)),
            models.CreateTrainingJobRequestHyperParameters(name="seconds_per_epoch", value="0.3"),
        ],
        input_channels=[
            models.CreateTrainingJobRequestInputChannels(name="train", input_uri="oss://b/iris/")
        ],
        output_channels=[
            models.CreateTrainingJobRequestOutputChannels(name="model", output_uri="oss://b/model/"),
            models.CreateTrainingJobRequestOutputChannels(
                name="checkpoints", output_uri=checkpoints or f"oss://b/checkpoints/{name}/"
            ),
        ],
        labels=[models.CreateTrainingJobRequestLabels(key=k, value=v) for k, v in labels.items()],
    )
    job_id = pai.create_training_job(request).body.training_job_id
    assert job_id.startswith("train")
    return job_id


def wait(pai: Client, job_id: str, until, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while True:
        job = pai.get_training_job(job_id).body
        if until(job):
            return job
        assert time.monotonic() < deadline, f"{job_id} stayed {job.status}"
        time.sleep(0.3)


def test_create_get_list_by_labels_events_metrics_with_the_official_client(platform):
    pai = client(platform)
    run = uuid.uuid4().hex[:8]
    job_id = create(pai, f"sdk-{run}", epochs=3, **{"airflow-run": run, "team": "ml"})
    create(pai, f"sdk-other-{run}", epochs=1, **{"airflow-run": f"other-{run}"})
    job = wait(pai, job_id, lambda j: j.status == "Succeed")
    assert job.reason_code == "TrainingJobSucceed" and job.training_job_name == f"sdk-{run}"
    assert {m.name for m in job.latest_metrics} >= {"loss", "validation_accuracy"}
    assert [t.status for t in job.status_transitions][-2:] == ["Running", "Succeed"]
    assert job.duration >= 1 and job.request_id

    found = pai.list_training_jobs(models.ListTrainingJobsRequest(labels={"airflow-run": run})).body
    assert [j.training_job_id for j in found.training_jobs] == [job_id] and int(found.total_count) == 1

    events = pai.list_training_job_events(
        job_id, models.ListTrainingJobEventsRequest(page_size=100)
    ).body.events
    assert any("[epoch_complete] Epoch 3 complete" in line for line in events)
    metrics = pai.list_training_job_metrics(job_id, models.ListTrainingJobMetricsRequest(page_size=100)).body
    epochs = sorted(m.value for m in metrics.metrics if m.name == "epoch")
    assert epochs == [1.0, 2.0, 3.0]
    latest = pai.get_training_job_latest_metrics(job_id, models.GetTrainingJobLatestMetricsRequest()).body
    assert {m.name for m in latest.metrics} == {m.name for m in job.latest_metrics}


def test_stop_terminates_after_sigterm_with_a_final_checkpoint_in_the_channel(platform):
    pai = client(platform)
    name = f"sdk-stop-{uuid.uuid4().hex[:8]}"
    job_id = create(pai, name, epochs=100)
    wait(pai, job_id, lambda j: j.status == "Running" and j.latest_metrics)
    pai.stop_training_job(job_id)
    job = wait(pai, job_id, lambda j: j.status == "Terminated")
    assert job.reason_code == "JobStoppedByUser"
    directory = os.path.join(platform.data_dir, "oss", "b", "checkpoints", name)
    assert "ckpt_final.joblib" in os.listdir(directory)
    with pytest.raises(Exception) as err:  # a stopped job cannot be stopped again
        pai.stop_training_job(job_id)
    assert getattr(err.value, "code", None) == "TrainingJobStatusNotAllowed"


def test_the_asyncio_client_works_too(platform):
    async def run() -> str:
        pai = client(platform)
        job_id = (
            await pai.list_training_jobs_async(models.ListTrainingJobsRequest(page_size=1))
        ).body.training_jobs
        return str(len(job_id))

    assert asyncio.run(run()) in ("0", "1")


def test_the_list_covers_the_last_7_days_unless_told_a_start_time(platform):
    from airflow_training_platform.control import LocalPlatformControl

    pai, run = client(platform), uuid.uuid4().hex[:8]
    job_id = create(pai, f"old-{run}", epochs=1, **{"airflow-run": run})
    LocalPlatformControl(platform.url).backdate(job_id, 8 * 24 * 3600)  # created 8 days ago
    listed = pai.list_training_jobs(models.ListTrainingJobsRequest(labels={"airflow-run": run})).body
    assert listed.training_jobs == [] and int(listed.total_count) == 0
    nine_days_ago = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 9 * 24 * 3600))
    request = models.ListTrainingJobsRequest(labels={"airflow-run": run}, start_time=nine_days_ago)
    found = pai.list_training_jobs(request).body
    assert [j.training_job_id for j in found.training_jobs] == [job_id]


def test_the_older_hmac_sha1_signature_is_accepted_for_every_call(platform):
    """tea-openapi's ROA HMAC-SHA1 signer (``signature_algorithm="v2"``): a body, a query with a
    JSON map and a time in it, a PUT without a body."""
    pai, run = client(platform, signature_algorithm="v2"), uuid.uuid4().hex[:8]
    job_id = create(pai, f"sha1-{run}", epochs=50, **{"airflow-run": run})
    assert pai.get_training_job(job_id).body.training_job_id == job_id
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
    listed = pai.list_training_jobs(
        models.ListTrainingJobsRequest(labels={"airflow-run": run}, start_time=since, page_size=5)
    ).body
    assert [j.training_job_id for j in listed.training_jobs] == [job_id]
    pai.stop_training_job(job_id)
    assert wait(pai, job_id, lambda j: j.status == "Terminated").reason_code == "JobStoppedByUser"


@pytest.mark.parametrize("signature_algorithm", [None, "v2"])
@pytest.mark.parametrize(
    ("key_id", "secret", "code"),
    [
        (PAI_ACCESS_KEY_ID, "wrong-secret", "SignatureDoesNotMatch"),
        ("LTAIunknown", API_KEY, "InvalidAccessKeyId.NotFound"),
    ],
)
def test_a_wrong_key_is_refused(platform, key_id, secret, code, signature_algorithm):
    pai = client(platform, secret=secret, key_id=key_id, signature_algorithm=signature_algorithm)
    with pytest.raises(Exception) as err:
        pai.list_training_jobs(models.ListTrainingJobsRequest())
    assert getattr(err.value, "code", None) == code
    assert getattr(err.value, "status_code", None) == 400


def test_an_unknown_job_is_entity_not_exist(platform):
    with pytest.raises(Exception) as err:
        client(platform).get_training_job("trainnope")
    assert getattr(err.value, "code", None) == "EntityNotExist.TrainingJob"
    assert getattr(err.value, "status_code", None) == 404
