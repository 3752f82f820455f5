"""The Amazon provider's own ``SageMakerTrainingSensor`` (defaults: ``print_log=True``) and
``SageMakerTrainingOperator(deferrable=True)`` on the user's script-mode job, run by real Airflow 3.3
(``airflow dags test``, which runs a deferred task's trigger in-process) against a local platform that
runs user code. Assertions on the task logs and on the platform's own job records."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_training_devel.user_code import DATA_URI, put_code_and_data
from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.server import LocalPlatformServer
from tests.conftest import API_KEY, aws_connection, server_options
from tests.e2e.conftest import AIRFLOW, ROOT

DAGS = Path(__file__).parent / "amazon_dags"
RUN = uuid.uuid4().hex[:8]
EPOCH_LINE = re.compile(r"epoch=(\d) loss=[0-9.]+ accuracy=[0-9.]+")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalPlatformServer(
        str(tmp_path_factory.mktemp("amazon")),
        gpus=2,
        log_level="warning",
        allow_user_code=True,
        **server_options(),
    ) as srv:
        put_code_and_data(srv.data_dir)
        yield srv


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory):
    """An Airflow home of its own (SQLite) whose dags folder is ``amazon_dags/``: its environment and
    the ``airflow db migrate`` still running (it overlaps the server's start)."""
    home = tmp_path_factory.mktemp("airflow-amazon")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "ATP_E2E_AMAZON_RUN": RUN,
        "ATP_E2E_DESCRIBE_GATE_SPEEDUP": "100",
        "PYTHONUNBUFFERED": "1",
    }
    migrate = subprocess.Popen(
        [AIRFLOW, "db", "migrate"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        yield env, migrate
    finally:
        if migrate.poll() is None:
            migrate.kill()
            migrate.wait()


@pytest.fixture(scope="module")
def dag_run(airflow_env, server) -> dict[str, str]:
    """One ``airflow dags test e2e_amazon_sagemaker``, its ``aws_user_code`` connection the local
    platform (``endpoint_url`` extra): its output split by task id."""
    env, migrate = airflow_env
    migrated = migrate.communicate(timeout=300)[0]
    assert migrate.returncode == 0, migrated
    run = subprocess.run(
        [AIRFLOW, "dags", "test", "e2e_amazon_sagemaker"],
        env={**env, "AIRFLOW_CONN_AWS_USER_CODE": aws_connection(server.url)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    assert API_KEY not in out
    parts = re.split(r"\[DAG TEST\] starting task_id=(\S+)", out)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def job(server, name: str) -> dict:
    (record,) = LocalPlatformControl(server.url).jobs(name=name)
    return record


def test_the_sensor_with_its_defaults_waits_for_the_job_and_prints_the_scripts_lines(dag_run, server):
    assert job(server, f"sensor-{RUN}")["state"] == "succeeded"
    log = dag_run["watch"]
    # the training program's own lines, in order, printed by the sensor's log loop
    assert [int(m[1]) for m in EPOCH_LINE.finditer(log)] == [1, 2, 3, 4], log[-5000:]
    assert "progress 4/4" in log and "training complete" in log
    # it waited: it poked while the job ran (2 s of epochs), once a second
    assert "job currently InProgress" in log and "job currently Completed" in log
    assert re.search(r"Billable seconds: \d+", log)
    assert not EPOCH_LINE.search(dag_run["submit"])


def test_the_deferrable_operator_defers_its_trigger_completes_and_the_job_succeeded(dag_run, server):
    assert job(server, f"deferred-{RUN}")["state"] == "succeeded"
    log = dag_run["train_deferrable"]
    before, deferred = log.split("Pausing task as DEFERRED", 1)
    # before deferring: the log as far as the job had got (twice: the hook's one read after the
    # submit, then the operator's own from the stream's start), the program's lines in order
    epochs = [int(m[1]) for m in EPOCH_LINE.finditer(before)]
    assert epochs and epochs[0] == 1 and max(epochs) < 6, log[-5000:]
    assert all(b in (a + 1, 1) for a, b in itertools.pairwise(epochs)), epochs
    # then the trigger ran in-process (aiobotocore's waiter) and the task resumed
    assert "[DAG TEST] running trigger in line" in deferred and "[DAG TEST] Trigger completed" in deferred
    assert "Training job not done yet: InProgress" in deferred
    assert f"SageMaker job deferred-{RUN} completed." in deferred


def test_the_hooks_s3_input_check_asks_the_local_s3(server, monkeypatch):
    """The pre-check ``SageMakerTrainingOperator`` runs before every create (HeadBucket, HeadObject,
    ListObjectsV2 on each S3 channel) answered by the local S3: present input passes, absent fails."""
    from airflow.providers.amazon.aws.hooks.sagemaker import SageMakerHook
    from airflow.providers.common.compat.sdk import AirflowException

    monkeypatch.setenv("AIRFLOW_CONN_AWS_USER_CODE", aws_connection(server.url))
    hook = SageMakerHook(aws_conn_id="aws_user_code")

    def config(uri: str) -> dict:
        source = {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": uri}}
        return {"InputDataConfig": [{"ChannelName": "train", "DataSource": source}]}

    hook.check_training_config(config(DATA_URI))
    with pytest.raises(AirflowException, match="The input S3 Bucket no-such-bucket does not exist"):
        hook.check_training_config(config("s3://no-such-bucket/train/"))
    with pytest.raises(
        AirflowException, match="The input S3 Key or Prefix s3://data/missing/ does not exist"
    ):
        hook.check_training_config(config("s3://data/missing/"))


def test_the_readmes_aws_connection_passes_the_amazon_providers_own_connection_test(tmp_path, monkeypatch):
    """The README's ``aws_local`` connection, exactly (only its port changed to the test server's),
    through ``AwsBaseHook.test_connection()`` — what the UI's Test button calls (STS
    ``GetCallerIdentity`` at ``service_config.sts.endpoint_url``) — against a local platform
    started with the README's key pair; the same connection with another secret fails it."""
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    readme = (ROOT / "README.md").read_text()
    key_id, secret = re.search(
        r"serve --port 8765 .*?--sagemaker-access-key-id (\S+) --sagemaker-secret-access-key (\S+)",
        readme,
        re.S,
    ).groups()
    connections = set(re.findall(r"export AIRFLOW_CONN_AWS_LOCAL='(.*?)'", readme, re.S))
    assert len(connections) == 1, "the README shows two different aws_local connections"
    (connection,) = connections
    assert json.loads(connection)["extra"]["service_config"]["sts"]["endpoint_url"]
    with LocalPlatformServer(
        str(tmp_path),
        log_level="warning",
        sagemaker_access_key_id=key_id,
        sagemaker_secret_access_key=secret,
    ) as srv:
        monkeypatch.setenv("AIRFLOW_CONN_AWS_LOCAL", connection.replace("http://127.0.0.1:8765", srv.url))
        ok, message = AwsBaseHook(aws_conn_id="aws_local", client_type="sts").test_connection()
        assert ok, message
        assert f"UserId='{key_id}'" in message and "Account='123456789012'" in message
        wrong = connection.replace(f'"password": "{secret}"', '"password": "not-the-secret"')
        monkeypatch.setenv("AIRFLOW_CONN_AWS_LOCAL", wrong.replace("http://127.0.0.1:8765", srv.url))
        ok, message = AwsBaseHook(aws_conn_id="aws_local", client_type="sts").test_connection()
        assert not ok and "InvalidSignatureException" in message


def test_a_re_run_after_completion_gets_a_timestamped_job_that_resumes_at_its_last_epoch(server, monkeypatch):
    """``SageMakerTrainingOperator`` with its defaults (``action_if_job_exists="timestamp"``,
    ``wait_for_completion``, ``print_log``, ``check_interval``; the hook module's clock sped up) run
    twice with one config, as a clear of a finished task does: the second run finds the name taken, creates
    ``<name>-<timestamp>`` on the same ``CheckpointConfig``, whose built-in trainer resumes at its
    last epoch and completes without training. The operator, the sensor (defaults) and the hook read
    its ``TrainingStartTime``/``TrainingEndTime`` (billable seconds) as on AWS."""
    from airflow.providers.amazon.aws.hooks import sagemaker as hook_module
    from airflow.providers.amazon.aws.hooks.sagemaker import SageMakerHook
    from airflow.providers.amazon.aws.operators.sagemaker import SageMakerTrainingOperator
    from airflow.providers.amazon.aws.sensors.sagemaker import SageMakerTrainingSensor

    monkeypatch.setenv("AIRFLOW_CONN_AWS_USER_CODE", aws_connection(server.url))
    # the hook's log loop sleeps check_interval (30 s) between polls and describes the job at most every
    # 30 s of time.monotonic(): that module's clock runs 100 times faster, its sleeps cut to 0.2 s
    real = time.monotonic
    monkeypatch.setattr(
        hook_module,
        "time",
        SimpleNamespace(sleep=lambda seconds: time.sleep(min(seconds, 0.2)), monotonic=lambda: real() * 100),
    )
    name = f"rerun-{RUN}"
    config = {
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::123456789012:role/BuiltIn",
        "AlgorithmSpecification": {"TrainingImage": "local/digits-mlp:1", "TrainingInputMode": "File"},
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": DATA_URI}},
            }
        ],
        "OutputDataConfig": {"S3OutputPath": "s3://out/models"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "CheckpointConfig": {"S3Uri": f"s3://out/checkpoints/{name}"},
        "HyperParameters": {"epochs": "2", "seconds_per_epoch": "0.2"},
    }

    def run() -> dict:
        operator = SageMakerTrainingOperator(
            task_id="train",
            config=json.loads(json.dumps(config)),
            aws_conn_id="aws_user_code",
        )
        return operator.execute({})["Training"]

    first = run()
    assert first["TrainingJobName"] == name and first["TrainingJobStatus"] == "Completed"
    second = run()  # before: KeyError 'TrainingStartTime'
    rerun = second["TrainingJobName"]
    assert re.fullmatch(rf"{name}-\d+", rerun) and second["TrainingJobStatus"] == "Completed"
    assert job(server, rerun)["resume_path"].endswith("ckpt_epoch_2.joblib")
    assert [t["Status"] for t in second["SecondaryStatusTransitions"]] == [
        "Starting",
        "Downloading",
        "Training",
        "Uploading",
        "Completed",
    ]
    sensor = SageMakerTrainingSensor(task_id="watch", job_name=rerun, aws_conn_id="aws_user_code")
    assert sensor.poke({}) is True
    described = SageMakerHook(aws_conn_id="aws_user_code").describe_training_job(rerun)
    assert described["TrainingEndTime"] >= described["TrainingStartTime"] >= described["CreationTime"]
    assert described["OutputDataConfig"]["KmsKeyId"] == ""
