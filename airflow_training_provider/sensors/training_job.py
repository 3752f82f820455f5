"""Sensor: wait for an existing training job (submitted elsewhere) to end."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import (
    AirflowSensorTimeout,
    AirflowSkipException,
    AirflowTaskTimeout,
    TaskDeferralTimeout,
)

from airflow_training_provider.job_task import (
    TrainingJobTaskMixin,
    job_outcome,
    stream_logs_flag,
)
from airflow_training_provider.lifecycle.operations import LOG_PAGES_PER_POLL, LogFollow
from airflow_training_provider.links import TrainingJobConsoleLink
from airflow_training_provider.models import JobState
from airflow_training_provider.progress import JobReport

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_training_provider.lifecycle.waiting import DeadlineKind

#: what ``soft_fail`` turns into a skip: the sensor's own timeouts, as in poke mode.
_SOFT_FAIL_CAUSES = (AirflowSensorTimeout, AirflowTaskTimeout, TaskDeferralTimeout)


class TrainingJobSensor(TrainingJobTaskMixin, BaseSensorOperator):
    """Wait until training job ``job_id`` ends; succeed if it succeeded, fail otherwise.

    :param job_id: the platform's job id (templated).
    :param conn_id: platform connection.
    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``).
    :param poll_interval: seconds (or a ``timedelta``) between polls (also the sensor's ``poke_interval``).
    :param coalesce: deferred, wait in the triggerer's shared poller of the connection, which reads
        many jobs per call where the platform can (``docs/scale.md``, "Coalesced polling");
        ``False``: this job is polled on its own.
    :param events_interval: coalesced, the platform's events are read when the job's state changes,
        at its end, and at least this often otherwise (seconds or a ``timedelta``).
    :param outage_budget: seconds of failed polls tolerated before failing with "lost contact".
    :param cancel_on_kill: cancel the job if Airflow gives up on this sensor (default ``False``:
        the sensor does not own the job). Honoured on every path: kill, ``execution_timeout``,
        failed deferral, mark failed. The sensor's own ``timeout`` never cancels.

    Deferred or poking, it behaves the same: ``timeout`` (seconds since the start) ends it with
    ``AirflowSensorTimeout``; ``soft_fail`` turns only timeouts into a skip — a job that failed or
    was cancelled fails the sensor.
    :param preserve_checkpoints: on cancel, keep the job's checkpoints.
    :param create_final_checkpoint: on cancel, ask for a final checkpoint (where the platform can).
    :param confirm_cancel_timeout: seconds to wait for the platform to confirm a cancel.
    :param stream_logs: write the lines the job's training program prints into the task log while
        waiting, as ``[program] <line>``, each once and in order, the last ones (a traceback) before
        the task ends; deferred (across triggerer restarts) or not. On a platform whose API does
        not serve them (its dialect's
        ``capabilities.program_logs`` is false) one line says so. In ``reschedule`` mode each poke
        starts the log over. The sensor knows no spec, so it masks nothing itself: its lines pass
        through Airflow's masker only, which hides just the values registered in the process
        writing them (the worker, or the triggerer when deferred), and a secret the program prints
        may show. The Training job tab shows none of its lines. To have them masked, give
        ``stream_logs`` to the submitting operator instead.

    Returns the final job as JSON, like :class:`SubmitTrainingJobOperator`.
    """

    template_fields: Sequence[str] = ("job_id", "conn_id")
    job_id: str  # given (the mixin's may be None)
    operator_extra_links = (TrainingJobConsoleLink(),)

    def __init__(
        self,
        *,
        job_id: str,
        conn_id: str,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float | timedelta = 30.0,
        outage_budget: float | timedelta = 600.0,
        cancel_on_kill: bool = False,
        preserve_checkpoints: bool = True,
        create_final_checkpoint: bool = True,
        confirm_cancel_timeout: float | timedelta = 60.0,
        stream_logs: bool = False,
        coalesce: bool = True,
        events_interval: float | timedelta = 3600.0,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        self.stream_logs = stream_logs_flag(stream_logs, f"{type(self).__name__}({self.task_id})")
        self.job_id = job_id
        self.conn_id = conn_id
        self.deferrable = deferrable
        self._init_job_task(
            coalesce=coalesce,
            events_interval=events_interval,
            poll_interval=poll_interval,
            outage_budget=outage_budget,
            confirm_cancel_timeout=confirm_cancel_timeout,
            cancel_on_kill=cancel_on_kill,
            preserve_checkpoints=preserve_checkpoints,
            create_final_checkpoint=create_final_checkpoint,
        )
        self._report: JobReport | None = None
        self._logs: LogFollow | None = None

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        job = self.hook.get_job(self.job_id, budget=self.polling.outage_budget)
        self.publish_job(context, job)
        ended = self.finish_if_ended(job, context)
        if ended is not None:
            return ended
        # the sensor's own timeout applies deferred as in poke mode; the earlier deadline wins
        deadlines: list[tuple[float, DeadlineKind]] = [(time.time() + self.timeout, "sensor_timeout")]
        if (execution := self.deadline_from_now(context)) is not None:
            deadlines.append((execution, "execution_timeout"))
        deadline, kind = min(deadlines)
        self.defer_on(job, context, deadline, kind)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """As poke mode does: ``soft_fail`` skips only on a timeout; a job that failed or was cancelled
        fails the sensor (``BaseSensorOperator`` would skip on any error when deferred)."""
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except AirflowSkipException as skip:
            cause = skip.__cause__
            if cause is not None and not isinstance(cause, _SOFT_FAIL_CAUSES):
                raise cause from None
            raise

    def poke(self, context: Context) -> PokeReturnValue:
        job = self.hook.get_job(self.job_id, budget=self.polling.outage_budget)
        if self._report is None:  # the first poke of this try
            self._logs, secrets = self._follow_log_on_worker()
            self._report = JobReport(self.log, secrets=secrets)
            self.publish_job(context, job)
        if self._logs is not None:
            self._ops = getattr(self, "_ops", None) or self.hook.ops  # one: it warns once per job
            interval = self.polling.poll_interval
            read = (
                self._ops.log_tail(job, self._logs, interval)
                if job.is_terminal
                else self._ops.follow_log(job, self._logs, LOG_PAGES_PER_POLL, time.time() + interval)
            )
            self.hook.drive(read, self._report)
        self._report.progress(job)
        if not job.is_terminal:
            return PokeReturnValue(is_done=False)
        job = self.hook.final_view(job)
        self.publish_job(context, job, returned=job.state is JobState.SUCCEEDED)
        self.note_diverged(job)
        return PokeReturnValue(is_done=True, xcom_value=job_outcome(job))
