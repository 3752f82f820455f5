"""Run by ``test_alipai.py`` with the pai-sdk venv's Python (``make pai-sdk``): Alibaba's ``alipai``
SDK, as its users drive it, against the local PAI at ``argv[1]`` (``host:port``).

alipai has no endpoint setting: its ``ClientFactory`` builds each service's client for
``https://<service>.<region>.aliyuncs.com``. Its session keeps those clients in
``acs_client_container`` (by service name) and builds one only when none is there, so the
PaiStudio client is put there first, configured as ``ClientFactory`` configures it (HMAC-SHA1
``signature_algorithm="v2"``, alipai's user agent) with the local endpoint over HTTP.
Credentials come from ``ALIBABA_CLOUD_ACCESS_KEY_ID``/``_SECRET`` (Alibaba's default chain). OSS is
a session setting (``oss_endpoint``): the local platform, which serves the ``PutObject`` of
``Estimator.fit()``'s code upload.
Prints one ``RESULT <json>`` line.
"""

from __future__ import annotations

import json
import os
import sys
import time

import oss2
from alibabacloud_credentials.client import Client as CredentialClient
from alibabacloud_tea_openapi.models import Config
from pai.api.base import ServiceName
from pai.api.client_factory import ClientFactory
from pai.common.utils import http_user_agent
from pai.estimator import Estimator
from pai.job import TrainingJob
from pai.session import Session, setup_default_session


def point_at_local_platform(session: Session, host: str) -> None:
    """Give ``session`` a PaiStudio client for the local platform at ``host`` (``host:port``)."""
    config = Config(
        region_id=session.region_id,
        credential=CredentialClient(config=session.credential_config),
        endpoint=host,
        protocol="http",
        signature_algorithm="v2",
        user_agent=http_user_agent(),
    )
    client_class = ClientFactory.ClientByServiceName[ServiceName.PAI_STUDIO]
    session.acs_client_container[ServiceName.PAI_STUDIO] = client_class(config)


def main(host: str, workspace_id: str, source_dir: str, data_uri: str) -> None:
    # a bucket named up front (else alipai asks AIWorkspace for the workspace's default storage,
    # not served locally) and the local platform as the OSS endpoint (its PutObject)
    session = setup_default_session(
        region_id="cn-hangzhou",
        workspace_id=workspace_id,
        oss_bucket_name="out",
        oss_endpoint=f"http://{host}",
        network="PUBLIC",
    )
    point_at_local_platform(session, host)
    api = session.training_job_api
    result: dict = {}

    # the TrainingJob API: create / get / list / wait
    job_id = api.create(
        instance_type="ecs.gn7i-c8g1.2xlarge",
        instance_count=1,
        job_name="alipai-builtin",
        hyperparameters={"epochs": 2, "seconds_per_epoch": 0.2},
        input_channels=[{"Name": "train", "InputUri": "oss://data/iris/"}],
        output_channels=[{"Name": "model", "OutputUri": "oss://out/builtin/model/"}],
        algorithm_spec={"Image": "local/builtin:1", "Command": ["python", "train.py"]},
        labels={"suite": "alipai"},
    )
    result["created"] = job_id
    result["got_status"] = api.get(job_id)["Status"]
    listed = api.list(training_job_name="alipai-builtin")
    result["listed"] = [j["TrainingJobId"] for j in listed.items]
    result["listed_total"] = listed.total_count
    job = TrainingJob.get(job_id)
    job.wait(interval=1, show_logs=False)
    result["waited_status"] = job.status
    result["listed_models"] = [j.training_job_id for j in TrainingJob.list(status="Succeed")]

    # Estimator.fit with its defaults (wait=True, show_logs=True): the local source_dir uploaded
    estimator = Estimator(
        image_uri="local/pai-train:1",
        command="python train.py $PAI_USER_ARGS",
        source_dir=source_dir,
        instance_type="ecs.c6.xlarge",
        hyperparameters={"epochs": 3},
        metric_definitions=[{"Name": "loss", "Regex": r"loss=([0-9.]+)"}],
        base_job_name="alipai-fit",
    )
    started = time.monotonic()
    fitted = estimator.fit(inputs={"train": data_uri})
    result["fit_seconds"] = round(time.monotonic() - started, 2)
    result["fit_status"] = fitted.status
    result["fit_id"] = fitted.training_job_id
    result["fit_model"] = fitted.output_path("model")
    result["oss_refusals"] = oss_refusals(session)
    print("RESULT " + json.dumps(result), flush=True)


def oss_refusals(session: Session) -> dict[str, list]:
    """What the local OSS answers oss2 for a wrong secret and for an operation it lacks."""
    answers = {}
    wrong = oss2.Bucket(
        oss2.Auth(os.environ["ALIBABA_CLOUD_ACCESS_KEY_ID"], "wrong"), session.oss_endpoint, "out"
    )
    key_id, secret = os.environ["ALIBABA_CLOUD_ACCESS_KEY_ID"], os.environ["ALIBABA_CLOUD_ACCESS_KEY_SECRET"]
    v4 = oss2.Bucket(oss2.AuthV4(key_id, secret), session.oss_endpoint, "out", region="cn-hangzhou")
    for name, call in {
        "wrong_secret": lambda: wrong.put_object("x/y.txt", b"x"),
        "signature_v4": lambda: v4.put_object("x/y.txt", b"x"),
        "get_object": lambda: session.oss_bucket.get_object("x/y.txt"),
    }.items():
        try:
            call()
            answers[name] = ["ok"]
        except oss2.exceptions.OssError as exc:
            answers[name] = [exc.status, exc.code]
    return answers


if __name__ == "__main__":
    main(*sys.argv[1:5])
