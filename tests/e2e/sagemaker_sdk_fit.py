"""Run by ``tests/e2e/test_sagemaker_sdk.py`` with the SageMaker Python SDK v2's own venv
(``build/sagemaker-sdk-venv``, ``make sagemaker-sdk``), not by pytest: the user's script in script
mode with the SDK's defaults, as a user writes it. The environment points boto3 at the local platform.

argv: ``source_dir`` (holds ``train.py``), the ``train`` channel's S3 URI. Prints the job's
description as one JSON line prefixed ``DESCRIBED `` last.
"""

from __future__ import annotations

import json
import sys

from sagemaker.sklearn import SKLearn

source_dir, train_uri = sys.argv[1:]
estimator = SKLearn(
    entry_point="train.py",
    source_dir=source_dir,
    framework_version="1.2-1",
    role="arn:aws:iam::123456789012:role/SageMakerRole",
    instance_type="ml.m5.large",
    instance_count=1,
    hyperparameters={"epochs": 3, "lr": 0.5},
)
estimator.fit({"train": train_uri})  # logs="All", wait=True
description = estimator.latest_training_job.describe()
print("DESCRIBED " + json.dumps(description, default=str))
