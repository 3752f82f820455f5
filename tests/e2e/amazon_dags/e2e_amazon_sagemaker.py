"""The Amazon provider's own SageMaker operator and sensor, with their defaults, on a script-mode job
(the user's ``train.py``, ``tests/data/user_code``) against the local platform. This folder is the
dags folder of ``tests/e2e/test_amazon_sagemaker.py``'s Airflow, which sets the environment read here.

``ATP_E2E_AMAZON_RUN`` makes the job names unique per test run. ``ATP_E2E_DESCRIBE_GATE_SPEEDUP``
(a factor) runs the clock of the provider's hook module that faster: its log loop calls
``DescribeTrainingJob`` at most every 30 s of ``time.monotonic()``, which would hold a finished job's
sensor for half a minute; sleeps and every other clock stay real.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from types import SimpleNamespace

from airflow.providers.amazon.aws.hooks import sagemaker as sagemaker_hook_module
from airflow.providers.amazon.aws.operators.sagemaker import SageMakerTrainingOperator
from airflow.providers.amazon.aws.sensors.sagemaker import SageMakerTrainingSensor
from airflow.sdk import DAG

from airflow_training_devel.user_code import DATA_URI, METRIC_DEFINITIONS, script_hyperparameters

CONN_ID = "aws_user_code"
RUN = os.environ.get("ATP_E2E_AMAZON_RUN", "dev")

if speedup := float(os.environ.get("ATP_E2E_DESCRIBE_GATE_SPEEDUP", "0")):
    _real = time.monotonic
    sagemaker_hook_module.time = SimpleNamespace(sleep=time.sleep, monotonic=lambda: _real() * speedup)


def script_job(name: str, epochs: int) -> dict:
    """``CreateTrainingJob`` as the SageMaker Python SDK sends script mode: ``sourcedir.tar.gz`` in
    S3, the ``train`` channel an S3 prefix (the hook checks it exists before it creates the job)."""
    return {
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::123456789012:role/ScriptMode",
        "AlgorithmSpecification": {
            "TrainingImage": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3-cpu-py311",
            "TrainingInputMode": "File",
            "MetricDefinitions": METRIC_DEFINITIONS,
        },
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": DATA_URI}},
            }
        ],
        "OutputDataConfig": {"S3OutputPath": "s3://out/models"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "HyperParameters": script_hyperparameters(epochs=epochs, seconds_per_epoch=0.5),
    }


with DAG(dag_id="e2e_amazon_sagemaker", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    # One job submitted (no waiting, so no log loop) and watched by the sensor with its defaults
    # (print_log=True); poke_interval=1 instead of 60 s for a job of seconds.
    submit = SageMakerTrainingOperator(
        task_id="submit",
        config=script_job(f"sensor-{RUN}", epochs=4),
        aws_conn_id=CONN_ID,
        wait_for_completion=False,
        print_log=False,
    )
    watch = SageMakerTrainingSensor(
        task_id="watch", job_name=f"sensor-{RUN}", aws_conn_id=CONN_ID, poke_interval=1
    )
    # Another job (3 s of epochs) run by the deferrable operator: it prints the log read once,
    # check_interval after the submit, then defers to SageMakerTrigger, whose waiter polls
    # DescribeTrainingJob through aiobotocore every check_interval (2 s instead of 30 s).
    train = SageMakerTrainingOperator(
        task_id="train_deferrable",
        config=script_job(f"deferred-{RUN}", epochs=6),
        aws_conn_id=CONN_ID,
        deferrable=True,
        check_interval=2,
    )
    submit >> watch >> train
