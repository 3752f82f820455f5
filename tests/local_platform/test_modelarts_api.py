"""The local platform's ModelArts, driven by Huawei's own client (``huaweicloudsdkmodelarts`` on
``huaweicloudsdkcore``): if its models accept our answers and our SDK-HMAC-SHA256 check accepts its
signed requests, the wire format is right. Create, show, search, events, terminate with the final
checkpoint in the output channel, a wrong secret key refused."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from huaweicloudsdkcore.auth.credentials import BasicCredentials
from huaweicloudsdkcore.exceptions.exceptions import ClientRequestException
from huaweicloudsdkmodelarts.v1 import ModelArtsClient
from huaweicloudsdkmodelarts.v1 import model as m

from tests.conftest import API_KEY, MODELARTS_ACCESS_KEY, MODELARTS_PROJECT_ID


def client(platform, secret: str = API_KEY, project: str = MODELARTS_PROJECT_ID) -> ModelArtsClient:
    credentials = BasicCredentials(MODELARTS_ACCESS_KEY, secret, project)
    return ModelArtsClient.new_builder().with_credentials(credentials).with_endpoints([platform.url]).build()


def create(
    ma: ModelArtsClient, name: str, epochs: int = 3, resume_from: str | None = None, **annotations: str
) -> str:
    body = m.Job(
        kind="job",
        metadata=m.JobMetadata(name=name, description="sdk check", annotations=annotations or None),
        algorithm=m.JobAlgorithm(
            engine=m.JobEngine(image_url="swr.example/ns/digits-mlp:1"),
            command="python train.py",
            parameters=[
                m.Parameters(name="epochs", value=str(epochs)),
                m.Parameters(name="seconds_per_epoch", value="0.3"),
            ],
            inputs=[
                m.Input(name=channel, remote=m.InputDataInfo(obs=m.InputDataInfoObs(obs_url=url)))
                for channel, url in (("data_url", "/b/iris/"), ("resume_from", resume_from))
                if url
            ],
            outputs=[
                m.Output(name="checkpoints", remote=m.Remote(obs=m.RemoteObs(obs_url=f"/b/ckpt/{name}/")))
            ],
        ),
        spec=m.Spec(resource=m.SpecResource(flavor_id="modelarts.vm.gpu.example", node_count=1)),
    )
    created = ma.create_training_job(m.CreateTrainingJobRequest(body=body))
    assert created.status.phase in ("Creating", "Pending") and created.metadata.name == name
    return created.metadata.id


def wait(ma: ModelArtsClient, job_id: str, until, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while True:
        job = ma.show_training_job_details(m.ShowTrainingJobDetailsRequest(training_job_id=job_id))
        if until(job):
            return job
        assert time.monotonic() < deadline, f"{job_id} stayed {job.status.phase}"
        time.sleep(0.3)


def test_create_show_search_events_with_the_official_client(platform):
    ma = client(platform)
    run = uuid.uuid4().hex[:8]
    job_id = create(ma, f"sdk-{run}", epochs=3, **{"airflow-run": run})
    other = create(ma, f"sdk-other-{run}", epochs=1)
    job = wait(ma, job_id, lambda j: j.status.phase == "Completed")
    assert job.status.secondary_phase == "Completed" and job.status.duration >= 300
    assert job.metadata.annotations == {"airflow-run": run} and job.metadata.create_time > 1.7e12
    assert job.status.task_statuses[0].exit_code == 0

    def search(*filters) -> list[str]:
        body = m.JobSearches(offset=0, limit=50, order="asc", filters=list(filters))
        return [j.metadata.id for j in ma.list_training_jobs(m.ListTrainingJobsRequest(body=body)).items]

    assert search(m.Filter(key="name", operator="like", value=[run])) == [job_id, other]
    assert search(m.Filter(key="name", operator="like", value=[run]), m.Filter(key="phase", operator="in", value=["Running"])) in ([], [other])  # fmt: skip

    events = ma.list_training_job_events(
        m.ListTrainingJobEventsRequest(training_job_id=job_id, order="asc", limit=100)
    )
    messages = [e.message for e in events.events]
    assert any("Epoch 3 complete" in line for line in messages) and events.total == len(messages)
    assert all(e.level in ("Info", "Error") and e.source in ("Job", "Task") for e in events.events)


def test_terminate_stops_after_sigterm_with_a_final_checkpoint_in_the_output_channel(platform):
    ma = client(platform)
    name = f"sdk-stop-{uuid.uuid4().hex[:8]}"
    job_id = create(ma, name, epochs=100)
    wait(ma, job_id, lambda j: j.status.phase == "Running")
    time.sleep(1.0)  # an epoch or two in
    answer = ma.stop_training_job(
        m.StopTrainingJobRequest(training_job_id=job_id, body=m.JobActionType(action_type="terminate"))
    )
    assert answer.status.phase == "Terminating"
    job = wait(ma, job_id, lambda j: j.status.phase == "Terminated")
    assert job.status.secondary_phase == "Terminated"
    directory = os.path.join(platform.data_dir, "obs", "b", "ckpt", name)
    assert "ckpt_final.joblib" in os.listdir(directory)
    with pytest.raises(ClientRequestException) as err:  # an ended job cannot be terminated again
        ma.stop_training_job(
            m.StopTrainingJobRequest(training_job_id=job_id, body=m.JobActionType(action_type="terminate"))
        )
    assert (err.value.status_code, err.value.error_code) == (400, "ModelArts.2767")


def test_a_job_resumes_from_the_latest_checkpoint_in_its_resume_from_input(platform):
    from airflow_training_platform.control import LocalPlatformControl

    ma, control = client(platform), LocalPlatformControl(platform.url)
    first = f"sdk-first-{uuid.uuid4().hex[:8]}"
    wait(ma, create(ma, first, epochs=3), lambda j: j.status.phase == "Completed")
    resumed = create(
        ma, f"sdk-resumed-{uuid.uuid4().hex[:8]}", epochs=5, resume_from=f"obs://b/ckpt/{first}/"
    )
    wait(ma, resumed, lambda j: j.status.phase == "Completed")
    record = control.job(resumed)
    assert record["resume_path"].endswith(os.path.join("obs", "b", "ckpt", first, "ckpt_epoch_3.joblib"))
    assert [e["epoch"] for e in record["events"] if e["type"] == "epoch_complete"] == [4, 5]


def test_a_wrong_secret_key_is_refused_and_an_unknown_job_is_not_found(platform):
    with pytest.raises(ClientRequestException) as err:
        client(platform, secret="wrong-secret-key").list_training_jobs(
            m.ListTrainingJobsRequest(body=m.JobSearches(offset=0, limit=1))
        )
    assert (err.value.status_code, err.value.error_code) == (401, "APIGW.0301")
    with pytest.raises(ClientRequestException) as err:
        client(platform).show_training_job_details(
            m.ShowTrainingJobDetailsRequest(training_job_id=str(uuid.uuid4()))
        )
    assert (err.value.status_code, err.value.error_code) == (404, "ModelArts.2762")


def test_jobs_belong_to_their_project(platform):
    job_id = create(client(platform), f"sdk-proj-{uuid.uuid4().hex[:8]}", epochs=1)
    with pytest.raises(ClientRequestException) as err:
        client(platform, project="another-project").show_training_job_details(
            m.ShowTrainingJobDetailsRequest(training_job_id=job_id)
        )
    assert err.value.status_code == 404
