"""Run by ``tests/e2e/test_sagemaker_sdk.py`` with the SageMaker Python SDK v2's own venv
(``build/sagemaker-sdk-venv``, ``make sagemaker-sdk``), not by pytest: the user's script in script
mode with the SDK's defaults, as a user writes it. The environment points boto3 at the local platform.

argv: ``source_dir`` (holds ``train.py``), the ``train`` channel's S3 URI. Prints the job's
description as one JSON line prefixed ``DESCRIBED `` last.
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
estimator = SKLearn(
    entry_point="train.py",
    source_dir=source_dir,
    framework_version="1.2-1",
    role="arn:aws:iam::123456789012:role/SageMakerRole",
    instance_type="ml.m5.large",
    instance_count=1,
    hyperparameters={"epochs": 3, "lr": 0.5, "seconds_per_epoch": 0.5},
)
estimator.fit({"train": train_uri})  # logs="All", wait=True
description = estimator.latest_training_job.describe()
print("DESCRIBED " + json.dumps(description, default=str))
