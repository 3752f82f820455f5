"""DAGs for the kill-path scenarios, one per shape of task and platform: ``kp_<shape><suffix>`` for
every flavor (``kp_deferred`` on TensorOne, ``kp_deferred_together`` on Together AI...).

Each DAG has one task ``train`` (the reaper DAG: ``reap``; the sensor DAG a ``submit`` task before
its ``train`` sensor). Jobs are paced by ``seconds_per_epoch``
so that they run long enough for the action under test. ``PidRecordingSubmit`` pushes the task
process's PID to XCom so a scenario can signal exactly that process. The harness copies this file
into the stack's dags folder.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, AssetAlias

from airflow_training_devel.killpaths.flavors import ALL_FLAVORS, FLAVORS, GUARD_RULE, secret_cases
from airflow_training_provider.operators.reaper import ReapOrphanedTrainingJobsOperator
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.sensors.training_job import TrainingJobSensor

START = datetime(2026, 1, 1)


class PidRecordingSubmit(SubmitTrainingJobOperator):
    def execute(self, context):
        context["ti"].xcom_push(key="pid", value=os.getpid())
        return super().execute(context)


def dag(dag_id: str, **kwargs) -> DAG:
    return DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, **kwargs)


for flavor in ALL_FLAVORS.values():
    on_executor = {"executor": flavor.executor}
    spec, conn_id, sfx = flavor.spec, flavor.conn_id, flavor.suffix
    LONG = spec(epochs=400, seconds_per_epoch=0.5)  # ~200 s: outlives every action in the tests
    deferred = {"conn_id": conn_id, "deferrable": True, "poll_interval": 2}
    running = {"conn_id": conn_id, "deferrable": False, "poll_interval": 1}
    fast_deferred = {"conn_id": conn_id, "deferrable": True, "poll_interval": 1}
    retry = {"retries": 1, "retry_delay": timedelta(seconds=1)}

    if flavor.runs("kp_deferred"):
        with dag(f"kp_deferred{sfx}", default_args=on_executor):
            PidRecordingSubmit(task_id="train", spec=LONG, **deferred)

    if flavor.runs("kp_deferred_mark_success_cancels"):
        with dag(f"kp_deferred_mark_success_cancels{sfx}", default_args=on_executor):
            PidRecordingSubmit(task_id="train", spec=LONG, cancel_on_mark_success=True, **deferred)

    if flavor.runs("kp_deferred_keep_on_kill"):  # K24: marked failed with no triggerer, the job kept
        with dag(f"kp_deferred_keep_on_kill{sfx}", default_args=on_executor):
            PidRecordingSubmit(task_id="train", spec=LONG, cancel_on_kill=False, **deferred)

    if flavor.runs("kp_deferred_reattach_on_clear"):
        with dag(f"kp_deferred_reattach_on_clear{sfx}", default_args=on_executor):
            PidRecordingSubmit(task_id="train", spec=LONG, reattach_on_clear=True, **deferred)

    if flavor.runs("kp_dagrun_timeout"):
        with dag(f"kp_dagrun_timeout{sfx}", dagrun_timeout=timedelta(seconds=30), default_args=on_executor):
            PidRecordingSubmit(task_id="train", spec=LONG, **deferred)

    if flavor.runs("kp_exec_timeout_deferred"):
        with dag(f"kp_exec_timeout_deferred{sfx}", default_args=on_executor):
            PidRecordingSubmit(
                task_id="train", spec=LONG, execution_timeout=timedelta(seconds=25), **deferred,
                retries=1, retry_delay=timedelta(seconds=2),
            )  # fmt: skip

    if flavor.runs("kp_exec_timeout_resume"):  # K5b (user code): try 1 times out, try 2 resumes
        per_try = (
            "s3://kp/checkpoints/{{ dag.dag_id }}/{{ run_id | replace(':', '-') }}/try-{{ ti.try_number }}"
        )
        with dag(f"kp_exec_timeout_resume{sfx}", default_args=on_executor):
            # 40 s of training: try 1 stops after ~25 of them, try 2 trains the rest within its 30 s
            PidRecordingSubmit(
                task_id="train", spec=spec(epochs=80, seconds_per_epoch=0.5, checkpoint_uri=per_try),
                execution_timeout=timedelta(seconds=30), retries=1, retry_delay=timedelta(seconds=2),
                resume_from_checkpoint=True, **deferred,
            )  # fmt: skip

    if flavor.runs("kp_defer_timeout"):
        with dag(f"kp_defer_timeout{sfx}", default_args=on_executor):
            PidRecordingSubmit(task_id="train", spec=LONG, defer_timeout=30, **deferred)

    if flavor.runs("kp_running"):
        with dag(f"kp_running{sfx}", default_args=on_executor):
            PidRecordingSubmit(task_id="train", spec=LONG, **running)

    if flavor.runs("kp_running_exec_timeout"):
        with dag(f"kp_running_exec_timeout{sfx}", default_args=on_executor):
            PidRecordingSubmit(task_id="train", spec=LONG, execution_timeout=timedelta(seconds=25), **running)

    if flavor.runs("kp_worker_crash_reattach"):
        with dag(f"kp_worker_crash_reattach{sfx}", default_args=on_executor):
            PidRecordingSubmit(task_id="train", spec=LONG, **running, **retry)

    if flavor.runs("kp_worker_shutdown"):  # K22: the worker is stopped while the task trains
        with dag(f"kp_worker_shutdown{sfx}", default_args=on_executor):
            PidRecordingSubmit(task_id="train", spec=LONG, **running, **retry)

    if flavor.runs(
        "kp_retry_during_stop"
    ):  # K23: try 1 times out; its job's stop takes 10-20 s (try 2 waits up to 34 s)
        with dag(f"kp_retry_during_stop{sfx}", default_args=on_executor):
            PidRecordingSubmit(
                task_id="train", spec=spec(epochs=400, seconds_per_epoch=0.5, checkpoint_seconds=10),
                execution_timeout=timedelta(seconds=40), retries=1, retry_delay=timedelta(0),
                resume_from_checkpoint=True, **running,
            )  # fmt: skip

    if flavor.runs("kp_worker_crash_adopt"):
        with dag(f"kp_worker_crash_adopt{sfx}", default_args=on_executor):
            PidRecordingSubmit(
                task_id="train", spec=spec(epochs=16, seconds_per_epoch=0.5), **running, **retry
            )

    if flavor.runs("kp_short_deferred"):
        with dag(f"kp_short_deferred{sfx}", default_args=on_executor):
            PidRecordingSubmit(
                task_id="train",
                spec=spec(epochs=24, seconds_per_epoch=0.5),
                outage_budget=120,
                **fast_deferred,
            )

    # K8 only: long enough to outlast the takeover of 2 tasks per platform (~100 s), short enough to end
    if flavor.runs("kp_medium_deferred"):
        with dag(f"kp_medium_deferred{sfx}", default_args=on_executor):
            PidRecordingSubmit(task_id="train", spec=spec(epochs=200, seconds_per_epoch=0.5), **deferred)

    if flavor.runs("kp_medium_sensor"):  # K8 for a sensor that owns the cancel of the job it watches
        with dag(f"kp_medium_sensor{sfx}", default_args=on_executor):
            submitted = SubmitTrainingJobOperator(
                task_id="submit", conn_id=conn_id, spec=spec(epochs=200, seconds_per_epoch=0.5),
                wait_for_completion=False,
            )  # fmt: skip
            submitted >> TrainingJobSensor(
                task_id="train", conn_id=conn_id, job_id="{{ ti.xcom_pull(task_ids='submit', key='job_id') }}",
                cancel_on_kill=True, deferrable=True, poll_interval=2,
            )  # fmt: skip

    if flavor.runs("kp_outage_retry"):
        with dag(f"kp_outage_retry{sfx}", default_args=on_executor):
            PidRecordingSubmit(
                task_id="train", spec=spec(epochs=60, seconds_per_epoch=0.5), outage_budget=8, **fast_deferred,
                retries=1, retry_delay=timedelta(seconds=2),
            )  # fmt: skip

    if flavor.runs("kp_fails_fast"):
        with dag(f"kp_fails_fast{sfx}", default_args=on_executor):
            PidRecordingSubmit(
                task_id="train", spec=spec(epochs=3, seconds_per_epoch=0.1, fail=True), **fast_deferred
            )

    if flavor.runs("kp_reaper"):
        with dag(f"kp_reaper{sfx}", default_args=on_executor):
            ReapOrphanedTrainingJobsOperator(task_id="reap", conn_id=conn_id, min_age=5)

    if (
        flavor.runs("kp_auto_cancel") and flavor.auto_cancel_spec is not None
    ):  # K19: the platform cancels the job by itself
        with dag(f"kp_auto_cancel{sfx}"):
            PidRecordingSubmit(task_id="train", spec=flavor.auto_cancel_spec, **fast_deferred)

    if flavor.runs("kp_mapped"):  # K21: three mapped tries, each on its own job
        with dag(f"kp_mapped{sfx}", default_args=on_executor):
            PidRecordingSubmit.partial(task_id="train", **deferred).expand(spec=[LONG, LONG, LONG])

    if flavor.runs("kp_aux_refused") and flavor.auxiliary:  # K14b: its auxiliary endpoints refused
        with dag(f"kp_aux_refused{sfx}", default_args=on_executor):
            short = spec(epochs=10, seconds_per_epoch=0.5)
            PidRecordingSubmit(task_id="train", spec=short, **fast_deferred)
            PidRecordingSubmit(task_id="train_on_worker", spec=short, conn_id=conn_id, deferrable=False,
                               poll_interval=1)  # fmt: skip

    if flavor.runs("kp_mapped_stem"):  # K21b: a mapped task whose spec names its job, as the README does
        named = flavor.with_name_stem(spec(epochs=8, seconds_per_epoch=0.5), "churn-{{ ds_nodash }}")
        with dag(f"kp_mapped_stem{sfx}", default_args=on_executor):
            PidRecordingSubmit.partial(task_id="train", **fast_deferred).expand(spec=[named, named, named])

    if (
        flavor.runs("kp_guarded") and flavor.guard_spec is not None
    ):  # K7b: early stopping judged across a triggerer restart
        with dag(f"kp_guarded{sfx}"):
            PidRecordingSubmit(
                task_id="train", spec=flavor.guard_spec, early_stopping=GUARD_RULE, **fast_deferred
            )

    if flavor.runs("kp_events") and flavor.events:  # K20: events streamed across a triggerer restart
        with dag(f"kp_events{sfx}"):
            PidRecordingSubmit(task_id="train", spec=spec(epochs=30, seconds_per_epoch=0.5), **fast_deferred)

    if flavor.runs("kp_program_log") and flavor.user_code:  # K20: the program's lines across a restart
        with dag(f"kp_program_log{sfx}"):
            PidRecordingSubmit(
                task_id="train",
                spec=spec(epochs=40, seconds_per_epoch=0.5),  # running at the restart, on a busy machine too
                stream_logs=True,
                **fast_deferred,
            )


# Secrets inside a job spec: references, a template and W&B connections, one DAG per path set.
for dag_id, (flavor, secret_spec, extra) in secret_cases().items():
    with dag(dag_id):
        SubmitTrainingJobOperator(
            task_id="train",
            spec=secret_spec,
            conn_id=flavor.conn_id,
            deferrable=True,
            poll_interval=1,
            **extra,
        )


# A diverged run (its losses NaN/Infinity from epoch 2) on each platform that reports metrics: the
# task succeeds and its result is readable (tests/killpaths/test_diverged.py).
for flavor in FLAVORS.values():
    if flavor.reports_metrics:
        with dag(flavor.dag("kp_diverged")):
            SubmitTrainingJobOperator(
                task_id="train",
                spec=flavor.spec(epochs=2, seconds_per_epoch=0.3, diverge_at_epoch=2),
                conn_id=flavor.conn_id,
                deferrable=True,
                poll_interval=1,
                allow_unknown_fields=True,  # diverge_at_epoch: the local platform's fault injection
            )


# The trained model as an asset: the producer publishes its model through an alias, the consumer
# is scheduled on the alias and records what it was given.
with dag("kp_model_producer"):
    PidRecordingSubmit(
        task_id="train", spec=FLAVORS["tensorone"].spec(epochs=2, seconds_per_epoch=0.3),
        conn_id="tensorone_local", deferrable=True, poll_interval=1, model_alias="kp-model",
    )  # fmt: skip


def _record_model(**context):
    # keyed by the alias (and by the asset): each event once, with the asset it names
    seen = {}
    for events in context["triggering_asset_events"].values():
        for event in events:
            seen[(event.asset.uri, event.extra.get("job_id"))] = {
                "uri": event.asset.uri,
                "extra": event.extra,
            }
    return list(seen.values())


with DAG(dag_id="kp_model_consumer", schedule=[AssetAlias("kp-model")], start_date=START, catchup=False):
    PythonOperator(task_id="use_model", python_callable=_record_model)
