"""Run by ``tests/e2e/test_sagemaker_sdk.py`` with the SageMaker Python SDK v2's own venv
(``build/sagemaker-sdk-venv``, ``make sagemaker-sdk``), not by pytest: the user's script in script
mode with the SDK's defaults, as a user writes it. The environment points boto3 at the local platform.

argv: ``source_dir`` (holds ``train.py``), the ``train`` channel's S3 URI. In order, each part
after a marker line: ``fit()`` of a 3-epoch job and its description (``DESCRIBED <json>``);
``=== ATTACH``: ``SKLearn.attach(<that job>)`` (``ATTACHED <json>``: what it read back) and its
``logs()``; ``=== STOP``: ``fit(wait=False)`` of a long job, ``latest_training_job.stop()`` once it
trains, ``wait()`` and ``STOPPED <json>`` (its description).
"""

from __future__ import annotations

import json
import sys
import time
from types import SimpleNamespace

import sagemaker.session
from sagemaker.sklearn import SKLearn

# fit()'s log loop (session._logs_for_job) sleeps `poll` (10 s) between reads and calls
# DescribeTrainingJob at most every 30 s of time.time(): run that module's clock 100 times faster and
# cap its sleeps at 0.2 s, so the loop tails a job of seconds and ends within a second of it.
_real = time.time
sagemaker.session.time = SimpleNamespace(
    time=lambda: _real() * 100, sleep=lambda seconds: time.sleep(min(seconds, 0.2))
)

source_dir, train_uri = sys.argv[1:]


def estimator(epochs: int) -> SKLearn:
    return SKLearn(
        entry_point="train.py",
        source_dir=source_dir,
        framework_version="1.2-1",
        role="arn:aws:iam::123456789012:role/SageMakerRole",
        instance_type="ml.m5.large",
        instance_count=1,
        hyperparameters={"epochs": epochs, "lr": 0.5, "seconds_per_epoch": 0.5},
    )


trained = estimator(3)
trained.fit({"train": train_uri})  # logs="All", wait=True
description = trained.latest_training_job.describe()
print("DESCRIBED " + json.dumps(description, default=str), flush=True)

print("=== ATTACH", flush=True)  # defaults: the session from the environment, model channel "model"
attached = SKLearn.attach(description["TrainingJobName"])  # reads OutputDataConfig.KmsKeyId
read_back = {
    "job": attached.latest_training_job.name,
    "output_path": attached.output_path,
    "output_kms_key": attached.output_kms_key,
    "entry_point": attached.entry_point,
    "hyperparameters": attached.hyperparameters(),
    "model_data": attached.model_data,
}
print("ATTACHED " + json.dumps(read_back, default=str), flush=True)
attached.logs()  # the job's whole CloudWatch stream, then its totals

print("=== STOP", flush=True)
stopped = estimator(200)
stopped.fit({"train": train_uri}, wait=False)
job = stopped.latest_training_job
deadline = time.monotonic() + 120
while (status := job.describe())["SecondaryStatus"] != "Training":
    if status["TrainingJobStatus"] != "InProgress" or time.monotonic() > deadline:
        sys.exit(f"the job never trained: {status['TrainingJobStatus']} / {status['SecondaryStatus']}")
    time.sleep(0.2)
job.stop()
job.wait(logs="None")  # the SDK warns on Stopped and returns
print("STOPPED " + json.dumps(job.describe(), default=str), flush=True)
