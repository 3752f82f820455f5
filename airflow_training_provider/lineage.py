"""OpenLineage for a training task: what it read (the training data its spec names), what it made
(the model's checkpoint), and a run facet with the job's id, platform, final metrics and cost.

The OpenLineage provider is optional: nothing here is imported unless Airflow's OpenLineage
listener asks (``SubmitTrainingJobOperator.get_openlineage_facets_on_complete``), and then only
``airflow.providers.openlineage`` and the OpenLineage client it brings.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from airflow_training_provider.json_values import json_value
from airflow_training_provider.models import TrainingJob

#: the run facet's schema id (a custom facet of this provider)
FACET_SCHEMA_URL = "urn:airflow-training-provider:facets:TrainingJobRunFacet:1"


def dataset_name(uri: str) -> tuple[str, str]:
    """OpenLineage ``(namespace, name)`` of a storage URI: ``s3://bucket/key`` → ``("s3://bucket",
    "key")``; ``file:///path`` → ``("file", "/path")``."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme == "file" or not parts.scheme:
        return "file", parts.path or uri
    return f"{parts.scheme}://{parts.netloc}", parts.path.lstrip("/") or "/"


def training_run_facet(job: TrainingJob, guard: str | None = None) -> dict[str, Any]:
    """The run facet's fields: job id, platform, state, final metrics, cost (USD), epoch, the guard
    that stopped it (if one did) and its console link."""
    return {
        "jobId": job.id,
        "platform": job.platform,
        "state": job.state.value,
        "metrics": json_value(job.metrics),  # NaN/Infinity as their names: facets are JSON
        "costUsd": job.cost.total_usd,
        "epoch": job.progress.epoch,
        "guard": guard,
        "consoleUrl": job.console_url,
    }


def operator_lineage(
    inputs: list[str], outputs: list[str], job: TrainingJob | None, guard: str | None
) -> Any:
    """An ``OperatorLineage`` (the OpenLineage provider's) for these input and output URIs and the job.

    :raises ImportError: the OpenLineage provider is not installed.
    """
    import attrs
    from airflow.providers.common.compat.openlineage.facet import InputDataset, OutputDataset, RunFacet
    from airflow.providers.openlineage.extractors import OperatorLineage

    @attrs.define
    class TrainingJobRunFacet(RunFacet):
        """The training job behind this task run (custom facet ``trainingJob``)."""

        jobId: str  # noqa: N815 - OpenLineage facets are camelCase
        platform: str
        state: str
        metrics: dict
        costUsd: float | None  # noqa: N815
        epoch: float | None
        guard: str | None
        consoleUrl: str | None  # noqa: N815

        @staticmethod
        def _get_schema() -> str:
            return FACET_SCHEMA_URL

    run_facets = {"trainingJob": TrainingJobRunFacet(**training_run_facet(job, guard))} if job else {}
    return OperatorLineage(
        inputs=[InputDataset(*dataset_name(uri)) for uri in inputs],
        outputs=[OutputDataset(*dataset_name(uri)) for uri in outputs],
        run_facets=run_facets,
    )
