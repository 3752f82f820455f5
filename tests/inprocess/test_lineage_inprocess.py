"""OpenLineage facets of a training task (inputs: the spec's training data; outputs: the model's
checkpoint; run facet: job, platform, metrics, cost), and the operator without the OpenLineage
provider."""

from __future__ import annotations

import subprocess
import sys

import pytest

from airflow_training_provider.testing.inprocess import run_task, task_context
from tests.inprocess.test_operators_inprocess import submit, tensorone_spec


def test_the_lineage_names_the_training_data_the_model_and_the_job(control):
    spec = {**tensorone_spec(epochs=2), "datasetConfig": {"datasetUrl": "s3://data-bucket/digits/train.csv"}}
    op = submit("tensorone", spec, deferrable=True)
    result = run_task(op, task_context(op, run_id="lineage"))
    lineage = op.get_openlineage_facets_on_complete(None)
    (dataset,) = lineage.inputs
    assert (dataset.namespace, dataset.name) == ("s3://data-bucket", "digits/train.csv")
    (model,) = lineage.outputs
    final = result["checkpoints"][-1]
    assert (model.namespace, model.name) == ("file", final["path"])
    facet = lineage.run_facets["trainingJob"]
    assert (facet.jobId, facet.platform, facet.state) == (result["id"], "tensorone", "succeeded")
    assert facet.metrics == result["metrics"] and facet.costUsd == result["cost"]["total_usd"] > 0
    assert facet._schemaURL.startswith("urn:airflow-training-provider:facets:TrainingJobRunFacet")


@pytest.mark.slow  # a fresh interpreter imports Airflow (about 5 s)
def test_the_operator_imports_and_runs_without_the_openlineage_provider(platform):
    code = """
import sys
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
op = SubmitTrainingJobOperator(task_id="t", conn_id="tensorone_local", spec={"name": "n", "datasetId": "digits"})
discovery = {"airflow.providers.openlineage", "airflow.providers.openlineage.get_provider_info"}  # Airflow's
loaded = sorted(m for m in sys.modules if m.startswith(("airflow.providers.openlineage", "openlineage")) and m not in discovery)
print("openlineage modules imported:", loaded)
sys.modules["airflow.providers.openlineage.extractors"] = None  # the provider missing when asked
print("lineage:", op.get_openlineage_facets_on_complete(None))
"""
    env_conn = {
        "AIRFLOW_CONN_TENSORONE_LOCAL": f'{{"conn_type": "tensorone", "host": "{platform.url}", "password": "x"}}'
    }
    import os

    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env_conn}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "openlineage modules imported: []" in done.stdout and "lineage: None" in done.stdout, done.stdout
