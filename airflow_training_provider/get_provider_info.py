"""Provider metadata Airflow reads through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    """Connection types, hooks, operators, sensors and triggers this package adds to Airflow."""
    return {
        "package-name": "airflow-training-provider",
        "name": "Training platforms",
        "description": "GPU training jobs on cloud training platforms (TensorOne...), with safe cancellation.",
        "versions": ["0.1.0"],
        "integrations": [
            {
                "integration-name": "TensorOne",
                "external-doc-url": "https://docs.tensorone.ai",
                "tags": ["service"],
            }
        ],
        "operators": [
            {
                "integration-name": "TensorOne",
                "python-modules": ["airflow_training_provider.operators.training_job"],
            }
        ],
        "sensors": [
            {
                "integration-name": "TensorOne",
                "python-modules": ["airflow_training_provider.sensors.training_job"],
            }
        ],
        "hooks": [
            {
                "integration-name": "TensorOne",
                "python-modules": [
                    "airflow_training_provider.hooks.training",
                    "airflow_training_provider.hooks.training_async",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "TensorOne",
                "python-modules": ["airflow_training_provider.triggers.training_job"],
            }
        ],
        "connection-types": [
            {
                "hook-class-name": "airflow_training_provider.hooks.training.TensorOneHook",
                "connection-type": "tensorone",
                "hook-name": "TensorOne",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "login", "port"],
                    "relabeling": {"host": "API base URL", "password": "API key"},
                    "placeholders": {"host": "https://api.tensorone.ai", "password": "tpo_live_..."},
                },
            }
        ],
    }
