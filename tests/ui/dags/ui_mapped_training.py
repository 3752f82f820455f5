"""A mapped training task: one job per map index (the "Training job" view shows each); and a task
whose first try's job fails (a bad learning rate on try 1 only) and whose retry's job succeeds
(the view and the console link show each try's own job); and a SageMaker job whose log lines the
tab shows (``stream_logs``: the built-in trainer's lines in its CloudWatch stream)."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator


def spec(i: int) -> dict:
    return {
        "name": f"mapped-{i}",
        "datasetId": "digits",
        "config": {"training": {"epochs": 2 + i, "batch_size": 64, "seconds_per_epoch": 0.3}},
    }


with DAG(
    "ui_mapped_training",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["test"],
    render_template_as_native_obj=True,  # the learning rate reaches the spec as a number
):
    SubmitTrainingJobOperator.partial(
        task_id="train", conn_id="tensorone_local", deferrable=True, poll_interval=1
    ).expand(spec=[spec(0), spec(1)])
    SubmitTrainingJobOperator(
        task_id="retried",
        conn_id="tensorone_local",
        deferrable=True,
        poll_interval=1,
        retries=1,
        retry_delay=timedelta(seconds=1),
        spec={
            "name": "retried",
            "datasetId": "digits",
            "config": {
                "training": {
                    "epochs": 2,
                    "seconds_per_epoch": 0.3,
                    "learning_rate": "{{ -0.5 if ti.try_number == 1 else 0.001 }}",
                }
            },
        },
    )
    SubmitTrainingJobOperator(
        task_id="logged",
        conn_id="aws_local",
        deferrable=True,
        poll_interval=1,
        stream_logs=True,
        spec={
            "RoleArn": "arn:aws:iam::123456789012:role/UiTest",
            "AlgorithmSpecification": {"TrainingImage": "local/digits-mlp:1", "TrainingInputMode": "File"},
            "OutputDataConfig": {"S3OutputPath": "s3://ui/output"},
            "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
            "StoppingCondition": {"MaxRuntimeInSeconds": 600},
            "HyperParameters": {"epochs": "2", "seconds_per_epoch": "0.3"},
        },
    )
