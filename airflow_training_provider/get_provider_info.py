"""Provider metadata Airflow reads through the ``apache_airflow_provider`` entry point, generated
from the platform descriptors: one integration and one connection type per platform."""

from __future__ import annotations

from typing import Any

from airflow_training_provider.assets import SCHEMES
from airflow_training_provider.platforms import PLATFORMS

_MODULES = {
    "operators": [
        "airflow_training_provider.operators.training_job",
        "airflow_training_provider.operators.reaper",
    ],
    "sensors": ["airflow_training_provider.sensors.training_job"],
    "hooks": ["airflow_training_provider.hooks.training", "airflow_training_provider.hooks.training_async"],
    "triggers": ["airflow_training_provider.triggers.training_job"],
}
"""The modules serve every platform (the connection's type picks the platform at run time), so
each is listed under every platform's integration."""


PLUGIN_CLASS = "airflow_training_provider.ui.plugin.TrainingJobViewPlugin"
"""The "Training job" task-instance view (also loaded through the ``airflow.plugins`` entry point)."""


def get_provider_info() -> dict[str, Any]:
    """Connection types, hooks, operators, sensors and triggers this package adds to Airflow."""
    platforms = list(PLATFORMS.values())
    names = ", ".join(p.display_name for p in platforms)
    return {
        "package-name": "airflow-training-provider",
        "name": "Training platforms",
        "description": f"GPU training jobs on cloud training platforms ({names}), with safe cancellation.",
        "versions": ["0.1.0"],
        "integrations": [
            {"integration-name": p.display_name, "external-doc-url": p.docs_url, "tags": ["service"]}
            for p in platforms
        ],
        **{
            kind: [{"integration-name": p.display_name, "python-modules": modules} for p in platforms]
            for kind, modules in _MODULES.items()
        },
        "extra-links": ["airflow_training_provider.links.TrainingJobConsoleLink"],
        "asset-uris": [
            {"schemes": list(SCHEMES), "handler": "airflow_training_provider.assets.normalize_uri"}
        ],
        "plugins": [{"name": "training_job_view", "plugin-class": PLUGIN_CLASS}],
        "config": {
            "training_provider": {
                "description": "Settings of airflow-training-provider.",
                "options": {
                    "triggerer_gc_freeze_interval": {
                        "description": "Seconds between freezes of a triggerer's long-lived heap out of "
                        "garbage collection (gc.freeze), started by the first training trigger of the "
                        "process; 0 is off. For triggerers running thousands of training triggers, "
                        "whose full collections otherwise pause every trigger (docs/scale.md).",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "300",
                        "default": "0",
                    },
                    "api_budget_share": {
                        "description": "The part (0 < share <= 1) of each platform account's request "
                        "rates (the platform's documented ones, or a connection's api_budget extra) this "
                        "process takes. Triggerers and workers share no store: with N processes waiting "
                        "on one account, give each 1/N (docs/scale.md).",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "0.5",
                        "default": "1.0",
                    },
                    "mark_failed_listener": {
                        "description": "Whether the API server cancels the job of a deferred training "
                        "task that a user sets to failed (itself or its DAG run) while no live triggerer "
                        "runs its trigger (which would cancel it in on_kill). Needs the provider installed "
                        "in the API server and the task's connection readable there.",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "False",
                        "default": "True",
                    },
                },
            }
        },
        "connection-types": [
            entry
            for p in platforms
            if (entry := p.provider_connection_type("airflow_training_provider.hooks.training")) is not None
        ],
    }
