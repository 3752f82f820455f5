"""Sensor: wait for an existing training job (submitted elsewhere) to end."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.configuration import conf

from airflow_training_provider.hooks.training import TrainingPlatformHook
from airflow_training_provider.operators._waiting import TrainingJobWaitMixin, job_outcome
from airflow_training_provider.progress import ProgressLog, describe


class TrainingJobSensor(TrainingJobWaitMixin, BaseSensorOperator):
    """Wait until training job ``job_id`` ends; succeed if it succeeded, fail otherwise.

    :param job_id: the platform's job id (templated).
    :param conn_id: platform connection.
    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``).
    :param poll_interval: seconds between polls (also the sensor's ``poke_interval``).
    :param outage_budget: seconds of failed polls tolerated before failing with "lost contact".
    :param cancel_on_kill: cancel the job if Airflow gives up on this sensor (default ``False``:
        the sensor does not own the job).

    Returns the final job as JSON, like :class:`SubmitTrainingJobOperator`.
    """

    template_fields: Sequence[str] = ("job_id", "conn_id")

    def __init__(
        self,
        *,
        job_id: str,
        conn_id: str = TrainingPlatformHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 30.0,
        outage_budget: float = 600.0,
        cancel_on_kill: bool = False,
        preserve_checkpoints: bool = True,
        create_final_checkpoint: bool = True,
        confirm_cancel_timeout: float = 60.0,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        self._init_wait_state()
        self.job_id = job_id
        self.conn_id = conn_id
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.outage_budget = outage_budget
        self.cancel_on_kill = cancel_on_kill
        self.cancel_on_mark_success = False
        self.reattach_on_clear = False
        self.preserve_checkpoints = preserve_checkpoints
        self.create_final_checkpoint = create_final_checkpoint
        self.confirm_cancel_timeout = confirm_cancel_timeout
        self._progress: ProgressLog | None = None

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        job = self.hook.get_job(self.job_id, budget=self.outage_budget)
        if job.is_terminal:  # one check: no deferral for a job that already ended
            job = self.hook.final_view(job)
            self.log.info("Training job %s", describe(job))
            return job_outcome(job)
        self.defer_on(job, context, self.deadline_from_now())

    def poke(self, context: Any) -> PokeReturnValue:
        job = self.hook.get_job(self.job_id, budget=self.outage_budget)
        self._progress = self._progress or ProgressLog(self.log)
        self._progress.update(job)
        if not job.is_terminal:
            return PokeReturnValue(is_done=False)
        return PokeReturnValue(is_done=True, xcom_value=job_outcome(self.hook.final_view(job)))
