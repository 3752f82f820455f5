"""Provider metadata Airflow reads through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_training_provider.connections import CONNECTION_TYPES, ui_field_behaviour


def get_provider_info() -> dict[str, Any]:
    """Connection types, hooks, operators, sensors and triggers this package adds to Airflow."""
    return {
        "package-name": "airflow-training-provider",
        "name": "Training platforms",
        "description": "GPU training jobs on cloud training platforms (TensorOne, Together AI), with safe cancellation.",
        "versions": ["0.1.0"],
        "integrations": [
            {
                "integration-name": "TensorOne",
                "external-doc-url": "https://docs.tensorone.ai",
                "tags": ["service"],
            },
            {
                "integration-name": "Together AI",
                "external-doc-url": "https://docs.together.ai/docs/fine-tuning-overview",
                "tags": ["service"],
            },
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
                "hook-class-name": hook,
                "connection-type": conn_type,
                "hook-name": name,
                "ui-field-behaviour": {
                    key.replace("_", "-"): value for key, value in ui_field_behaviour(conn_type).items()
                },
            }
            for conn_type, (hook, name, _, _) in CONNECTION_TYPES.items()
        ],
    }
