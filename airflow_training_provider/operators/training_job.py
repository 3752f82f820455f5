"""Operators: submit a training job (and wait for it), cancel one.

The submit operator's path: render + validate the spec → find an earlier try's job (re-attach,
adopt, or cancel it after a clear, as the cancel policy says) or submit one tagged with the task
instance → job id to XCom and the task state store → one status check → wait (deferred, or on the
worker) → the final job as the return value, or a failure that says why.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowFailException
from pydantic import BaseModel

from airflow_training_provider.cancellation import (
    CancelPolicy,
    EarlierJob,
    EarlierTry,
    GiveUp,
    Seconds,
    resumes_from_earlier_job,
    try_start,
)
from airflow_training_provider.errors import InvalidJobSpecError, JobNotFoundError, TrainingPlatformError
from airflow_training_provider.hooks.training import TrainingPlatformHook
from airflow_training_provider.identity import TaskIdentity, earlier_jobs_since
from airflow_training_provider.job_task import (
    STATE_STORE_KEY,
    WORKER_CONFIRM_MARGIN,
    LostContactWithPlatform,
    TrainingJobCancelledByAirflow,
    TrainingJobFailed,
    TrainingJobInterrupted,
    TrainingJobStillStopping,
    TrainingJobTaskMixin,
    job_outcome,
    log_cancel,
    parameters,
    platform_job,
    stream_logs_flag,
)
from airflow_training_provider.json_values import dump
from airflow_training_provider.lifecycle.guards import Guards, for_platform, unsupported
from airflow_training_provider.lifecycle.operations import is_stopping_or_terminal, is_terminal
from airflow_training_provider.links import TrainingJobConsoleLink
from airflow_training_provider.models import Checkpoint, JobState, TrainingJob
from airflow_training_provider.portable import (
    PortableFineTuneSpec,
    PortableTrainingSpec,
    parse_portable,
)
from airflow_training_provider.portable_submit import (
    CompiledSpec,
    compile_for,
    upload_source,
    with_log_metrics,
)
from airflow_training_provider.program_logs import secret_references
from airflow_training_provider.results import job_result
from airflow_training_provider.spec_secrets import (
    SecretNotFoundError,
    find_references,
    mask,
    read_wandb_connection,
    resolve_references,
    secret_values,
)
from airflow_training_provider.task_instance_lookup import JOB_ID_XCOM_KEY

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = [
    "CancelTrainingJobOperator",
    "LostContactWithPlatform",
    "SubmitTrainingJobOperator",
    "TrainingJobCancelledByAirflow",
    "TrainingJobFailed",
    "TrainingJobInterrupted",
    "TrainingJobStillStopping",
    "job_outcome",
]


class SubmitTrainingJobOperator(TrainingJobTaskMixin, BaseOperator):
    """Submit a training job and (by default) wait for it to end.

    :param conn_id: connection of the platform; its type (``tensorone``, ``together``...) picks the
        wire format.
    :param spec: the platform's create-job body (templated), e.g. TensorOne's ``name``,
        ``datasetId``, ``config`` (``docs/platforms/``). Parsed into the platform's typed model before
        submit (a templated ``"3"`` becomes 3 where the schema says number); a bad value or an unknown
        field fails the task without retries, with
        :class:`~airflow_training_provider.errors.InvalidJobSpecError` naming the field.
    :param portable_spec: instead of ``spec``, one job for several platforms (templated): a
        :class:`~airflow_training_provider.portable.PortableFineTuneSpec` (``base_model``,
        ``training_file``…: Together, TensorOne) or a
        :class:`~airflow_training_provider.portable.PortableTrainingSpec` (SageMaker, PAI,
        ModelArts), or its mapping — your script (``source_dir`` + ``entry_point``) or a command, image, inputs,
        output, checkpoints, hyperparameters, environment, resources, ``max_runtime``,
        ``metric_definitions``, tags, per-platform ``options``. Compiled for the connection's
        platform when the task renders (the Rendered Template view shows the native body as
        ``spec``); relative locations are under the connection's ``storage_root`` extra, so the
        same spec runs elsewhere by changing ``conn_id`` alone. ``source_dir`` (relative to the
        DAG file's folder) is uploaded to ``<storage_root>/code/<digest>/`` right before a new job
        is submitted. A field the platform cannot serve fails the task without retries, naming
        the platform and the field (``docs/portable-spec.md``).
    :param wait_for_completion: wait for a terminal state; if ``False`` return right after submit.
    :param deferrable: wait in the triggerer, freeing the worker slot (default
        ``[operators] default_deferrable``).
    :param poll_interval: seconds (or a ``timedelta``) between status polls.
    :param coalesce: deferred, wait in the triggerer's shared poller of the connection, which reads
        many jobs per call where the platform can (``docs/scale.md``, "Coalesced polling");
        ``False``: this job is polled on its own.
    :param events_interval: coalesced, the platform's events are read when the job's state changes,
        at its end, and at least this often otherwise (seconds or a ``timedelta``).
    :param outage_budget: seconds of failed polls tolerated before the task fails with "lost
        contact" (the job is never cancelled for that; the retry re-attaches).
    :param cancel_on_kill: cancel the job when Airflow gives up on the task.
    :param cancel_on_mark_success: also cancel when a user marks the deferred task success.
    :param reattach_on_clear: after a clear, re-attach to an earlier try's running job instead of
        cancelling it and submitting a new one.
    :param on_worker_shutdown: what a try waiting on the worker does with its job when its process
        is stopped while the task instance is still ``running`` — a deploy, a pod eviction, a spot
        reclaim, an autoscaler (nobody gave up on the task; only the task instance's state, asked
        of Airflow in ``on_kill``, tells this from a give-up): ``"keep_for_retry"`` (default) keeps
        the job running for the retry to re-attach, and cancels it (with a final checkpoint) when
        no retry remains; ``"cancel"`` always cancels; ``"keep"`` never does (on the last try the
        job is left to a clear with ``reattach_on_clear``, or to the orphan reaper).
    :param preserve_checkpoints: on cancel, keep the job's checkpoints.
    :param create_final_checkpoint: on cancel, ask the job to save a final checkpoint (where the
        platform can).
    :param confirm_cancel_timeout: seconds to wait for the platform to confirm a cancel; also how
        long a try waits for an earlier try's job that is stopping before deciding what to do
        (it never re-attaches to a job that is being stopped).
    :param resume_from_checkpoint: a retry of this task instance whose earlier job failed or was
        cancelled starts from that job's last saved checkpoint (platforms that can resume); a new
        DAG run never does.
    :param allow_unknown_fields: send spec fields the provider does not model (an API newer than
        it) instead of refusing them as likely typos.
    :param defer_timeout: seconds the task may stay deferred; when they run out the trigger
        cancels the job (per ``cancel_on_kill``) and the task fails with ``TaskDeferralTimeout``.
        Airflow's own trigger timeout is set 120 s later, a backstop. ``execution_timeout`` is
        enforced too, deferred or not.
    :param early_stopping: ``{"metric": "validation_loss", "mode": "min", "patience": 3,
        "min_delta": 0.0}``: stop the job (with a final checkpoint) once ``metric`` has not improved
        for ``patience`` epochs; the task succeeds, its return value's ``guard`` naming the best
        epoch's checkpoint. Platforms that report per-epoch metrics while a job runs
        (``Capabilities.metric_history``); elsewhere the task fails before submitting.
    :param max_cost_usd: stop the job in time for it to end under this cost (USD): when its cost by
        the next poll, plus one more poll interval for the stop, would pass it (the platform's cost
        and the rate it implies). On platforms that report no cost
        (``Capabilities.cost_usd`` false: SageMaker, PAI, ModelArts) give ``hourly_cost_usd`` too;
        without it the task fails before submitting.
    :param hourly_cost_usd: the job's price per hour of training (USD, all its instances together)
        where the platform reports no cost: ``max_cost_usd`` then counts the job's training time
        (from the platform's start time) at this price.
    :param max_runtime: seconds (or a ``timedelta``) of training after which the job is stopped,
        counted from when it started running (independent of ``execution_timeout``).
    :param on_budget: ``"fail"`` (default; no retries) or ``"succeed"`` when ``max_cost_usd`` fires.
    :param on_max_runtime: the same for ``max_runtime``.
    :param wandb_conn_id: a connection holding a Weights & Biases API key (its password; a
        self-hosted W&B's URL as its host), read on the worker right before submit: Together's
        ``wandb_key``, or ``WANDB_API_KEY`` in the job's environment (SageMaker, PAI, ModelArts). The
        task fails before submitting on a platform with no place for it (TensorOne).
    :param stream_logs: write the lines the job's training program prints (its stdout and stderr,
        as the platform's log API serves them: SageMaker CloudWatch Logs, PAI
        ``ListTrainingJobLogs``, ModelArts' log preview) into the task log while waiting, as
        ``[program] <line>``: each once and in order, deferred (across triggerer restarts) or on
        the worker, the last ones (a traceback) before the task ends; secrets the spec gives the
        program show as ``***`` (not those shorter than ``[logging] min_length_masked_secret``, as
        in Airflow). Secrets written in the spec or rendered from a template, not references, are
        known on the worker only: deferred, the lines are then not written (one warning says so).
        On a platform whose API does not serve them (its dialect's ``capabilities.program_logs``
        is false) one line says so. A boolean, not templated.
    :param model_alias: publish the trained model as an Airflow asset through
        ``AssetAlias(model_alias)`` (added to the task's outlets) when the task succeeds: the asset's
        URI is the model's checkpoint (a guard's best, else the final one; ``s3://``, ``oss://``,
        ``obs://``, ``file://`` or ``training://<platform>/<job>/<checkpoint>``), its event's extra
        the job id, platform, epoch, metrics and cost. A DAG scheduled on the alias runs once per model.

    Secrets in the spec: any value may be a reference, ``{"secret": {"conn_id": "hub"}}`` (a
    connection's password, or ``"field": "login" | "host" | "extra.<key>"``) or
    ``{"secret": {"variable": "hf_token"}}``, replaced by its value on the worker right before
    submit and masked in the task log; it never reaches the rendered fields, XCom, the trigger or
    the serialized DAG (:mod:`airflow_training_provider.spec_secrets`). Values written in the spec
    are masked in the Rendered Template view and the task log when the platform's field holds a
    secret (``wandb_key``), or the environment variable's name or the key says so (``*_TOKEN``,
    ``*_KEY``, ``password``...).

    Bad parameter values (and malformed secret references) raise ``ValueError`` naming the
    parameter when the DAG is parsed.

    XCom: ``job_id`` and ``console_url`` right after submit (before waiting); ``cancel_result``
    when this task cancelled the job; ``guard_stop`` when a guard stopped it (which, why, epoch,
    metric, cost, the checkpoint to keep). Return value: the final job
    (:class:`~airflow_training_provider.models.TrainingJob` as JSON). The job id is also kept in
    the task state store (key ``training_job``) for the next try.
    """

    template_fields: Sequence[str] = ("spec", "portable_spec", "conn_id", "wandb_conn_id")
    knows_spec = True
    guards: Guards  # always set here (the mixin's may be None)
    operator_extra_links = (TrainingJobConsoleLink(),)
    template_fields_renderers = {"spec": "json", "portable_spec": "json"}
    ui_color = "#fde2c8"

    def __init__(
        self,
        *,
        conn_id: str,
        spec: dict[str, Any] | None = None,
        portable_spec: dict[str, Any] | PortableTrainingSpec | PortableFineTuneSpec | None = None,
        wait_for_completion: bool = True,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float | timedelta = 30.0,
        outage_budget: float | timedelta = 600.0,
        cancel_on_kill: bool = True,
        cancel_on_mark_success: bool = False,
        reattach_on_clear: bool = False,
        on_worker_shutdown: str = "keep_for_retry",
        preserve_checkpoints: bool = True,
        create_final_checkpoint: bool = True,
        confirm_cancel_timeout: float | timedelta = 60.0,
        defer_timeout: float | timedelta | None = None,
        resume_from_checkpoint: bool = False,
        allow_unknown_fields: bool = False,
        early_stopping: dict[str, Any] | None = None,
        max_cost_usd: float | None = None,
        hourly_cost_usd: float | None = None,
        max_runtime: float | timedelta | None = None,
        on_budget: str = "fail",
        on_max_runtime: str = "fail",
        model_alias: str | None = None,
        wandb_conn_id: str | None = None,
        stream_logs: bool = False,
        coalesce: bool = True,
        events_interval: float | timedelta = 3600.0,
        **kwargs: Any,
    ) -> None:
        if (spec is None) == (portable_spec is None):
            raise ValueError(
                f"{type(self).__name__}({kwargs.get('task_id')}): give spec (the platform's native body) "
                "or portable_spec, not both nor neither"
            )
        if isinstance(portable_spec, PortableTrainingSpec | PortableFineTuneSpec):  # a mapping: templated
            portable_spec = portable_spec.model_dump(exclude_defaults=True)
        for given in (spec, portable_spec):
            if isinstance(given, dict):  # a malformed secret reference fails the DAG parse
                list(find_references(given))
        if isinstance(portable_spec, dict) and not _templated(portable_spec):
            try:  # nothing left to render: a misspelt or missing field fails the DAG parse
                parse_portable(portable_spec)
            except InvalidJobSpecError as exc:
                raise ValueError(f"{type(self).__name__}({kwargs.get('task_id')}): {exc}") from None
        if model_alias:  # the scheduler learns from the outlets that this task emits through the alias
            from airflow.sdk import AssetAlias

            kwargs["outlets"] = [*(kwargs.get("outlets") or []), AssetAlias(model_alias)]
        super().__init__(**kwargs)
        self.model_alias = model_alias
        self.stream_logs = stream_logs_flag(stream_logs, f"{type(self).__name__}({self.task_id})")
        self.wandb_conn_id = wandb_conn_id
        self.conn_id = conn_id
        self.spec = spec
        self.portable_spec = portable_spec
        self.compiled: CompiledSpec | None = None
        self.compile_error: InvalidJobSpecError | None = None
        self.wait_for_completion = wait_for_completion
        self.deferrable = deferrable
        self.resume_from_checkpoint = resume_from_checkpoint
        self.allow_unknown_fields = allow_unknown_fields
        self._init_job_task(
            coalesce=coalesce,
            events_interval=events_interval,
            poll_interval=poll_interval,
            outage_budget=outage_budget,
            confirm_cancel_timeout=confirm_cancel_timeout,
            cancel_on_kill=cancel_on_kill,
            cancel_on_mark_success=cancel_on_mark_success,
            reattach_on_clear=reattach_on_clear,
            on_worker_shutdown=on_worker_shutdown,
            preserve_checkpoints=preserve_checkpoints,
            create_final_checkpoint=create_final_checkpoint,
        )
        owner = f"{type(self).__name__}({self.task_id})"
        self.defer_timeout = (
            None
            if defer_timeout is None
            else parameters(_Timeout, owner, defer_timeout=defer_timeout).defer_timeout
        )
        self.guards = parameters(
            Guards,
            owner,
            early_stopping=early_stopping,
            max_cost_usd=max_cost_usd,
            hourly_cost_usd=hourly_cost_usd,
            max_runtime=max_runtime,
            on_budget=on_budget,
            on_max_runtime=on_max_runtime,
        )

    def _do_render_template_fields(
        self, parent: Any, template_fields: Any, context: Context, jinja_env: Any, seen_oids: set[int]
    ) -> None:
        """Render as usual, then register the spec's secret values with the secrets masker before
        Airflow stores the rendered fields (it redacts them with the masker): ``***`` in the
        Rendered Template view and the task log. (This is the method both a task and a mapped
        task's expansion render through; ``render_template_fields`` is skipped for the latter.)"""
        super()._do_render_template_fields(parent, template_fields, context, jinja_env, seen_oids)
        if parent is not self:
            return
        try:
            dialect = self.hook.dialect
        except Exception:  # an unknown connection fails in execute, with its own message
            dialect = None
        if self.portable_spec is not None:
            mask(secret_values(self.portable_spec, None))
        if self.portable_spec is not None and dialect is not None:
            try:  # compiled now, so that the rendered fields show the native body as `spec`
                self._compile()
            except InvalidJobSpecError as exc:  # execute fails the task with it
                self.compile_error = exc
        mask(secret_values(self.spec, dialect))

    def _compile(self) -> None:
        """Compile :attr:`portable_spec` for the connection's platform into :attr:`spec`, once.

        :raises InvalidJobSpecError: a portable field wrong or not served by the platform."""
        if self.compiled is not None:
            return
        dag_file = getattr(self.dag, "fileloc", None) if self.has_dag() else None
        base_dir = Path(dag_file).parent if dag_file else Path.cwd()
        self.compiled = compile_for(self.hook.platform_connection, self.portable_spec, base_dir)
        self.spec = self.compiled.spec

    def execute(self, context: Context) -> dict[str, Any]:
        self.job_reference_published = False  # until a job is known (the console link asks)
        deadline = self.deadline_from_now(context)
        self._remember_try(context, deadline)  # before anything that a SIGTERM could interrupt
        hook = self.hook
        try:
            if self.compile_error is not None:
                raise self.compile_error
            if self.portable_spec is not None:
                self._compile()
                self.log.info(
                    "Portable spec compiled for %s (secret references unresolved; the connection's "
                    "defaults, the identity tags and the job name are added next): %s",
                    hook.platform_connection.platform.display_name,
                    json.dumps(self.spec, sort_keys=True),
                )
            spec = self._spec_to_submit(hook)
        except SecretNotFoundError:
            raise  # retries apply: the secret may be added, or its backend be back
        except InvalidJobSpecError as exc:  # the same spec fails the same way: no retries
            raise AirflowFailException(str(exc)) from exc
        if refused := unsupported(
            self.guards, hook.dialect.capabilities, hook.platform_connection.platform.display_name
        ):
            raise AirflowFailException(f"Parameter {refused[0]!r}: {refused[1]} (nothing was submitted)")
        self.guards = for_platform(self.guards, hook.dialect.capabilities)
        identity = TaskIdentity.from_context(context)
        earlier = self.earlier_try(context, identity, deadline)
        job, resume_from = self.act_on_earlier_try(earlier) if earlier is not None else (None, None)
        if job is None:
            if resume_from is not None:
                spec = hook.dialect.resume_spec(spec, *resume_from) or spec
            if self.compiled is not None:
                upload_source(hook.platform_connection, self.compiled, self.log)
            self._stop_if_killed()  # a SIGTERM during the upload: on_kill had no job to cancel
            tags = identity.tags()
            job = hook.create_job(hook.dialect.with_tags(spec, tags), tags)
            console = f" ({job.console_url})" if job.console_url else ""  # none on a local endpoint
            self.log.info("Submitted training job %s on %s%s", job.id, hook.dialect.name, console)
        with self.owning(job):  # from here until the wait starts, a failure must not orphan the job
            self._stop_if_killed(job)  # killed during the create: owning() cancels the job per policy
            self.remember(context, identity, job)
            if not self.wait_for_completion:
                return job_result(job)
            job = hook.get_job(job.id, budget=self.polling.outage_budget)
            ended = self.finish_if_ended(job, context)
            if ended is not None:
                return ended
            if self.deferrable:
                self.defer_on(job, context, deadline)
        outcome = self.wait_on_worker(job, context, deadline)
        confirm_until = None if deadline is None else deadline - WORKER_CONFIRM_MARGIN
        return self.conclude(outcome, context, confirm_until)

    def _stop_if_killed(self, job: TrainingJob | None = None) -> None:
        """``on_kill`` ran before this try had a job to cancel (Airflow's SIGTERM handler returns
        into ``execute()``): stop instead of submitting (or waiting on) a job nobody owns.

        :raises TrainingJobCancelledByAirflow: the task was killed."""
        if not self._stop.is_set():
            return
        if job is None:
            raise TrainingJobCancelledByAirflow(
                "Task was killed before its training job was submitted: nothing was submitted"
            )
        raise TrainingJobCancelledByAirflow(f"Task was killed while {platform_job(job)} was being submitted")

    def _spec_to_submit(self, hook: TrainingPlatformHook) -> dict[str, Any]:
        """The spec as the platform will get it: connection defaults under it, secret references
        and ``wandb_conn_id`` resolved (their values masked at once), validated. Kept only in this
        call's locals: nothing Airflow stores ever holds it.

        :raises InvalidJobSpecError: naming the field (or ``wandb_conn_id``); its subclass
            :class:`~airflow_training_provider.spec_secrets.SecretNotFoundError` for a connection
            or Variable that is not defined."""
        dialect = hook.dialect
        if self.spec is None:  # a portable spec not compiled: _compile raised, execute fails first
            raise InvalidJobSpecError("portable_spec", "not compiled for the platform", parameter=True)
        defaults = dialect.spec_defaults(hook.platform_connection.credentials)
        references = [f"{path} from {ref.describe()}" for path, ref in find_references(self.spec)]
        spec, values = resolve_references({**defaults, **self.spec})
        mask(values)
        if self.wandb_conn_id:
            key, base_url = read_wandb_connection(self.wandb_conn_id)
            mask([key])
            with_key = dialect.with_wandb(spec, key, base_url)
            if with_key is None:
                raise InvalidJobSpecError(
                    "wandb_conn_id",
                    f"{hook.platform_connection.platform.display_name} job specs have no field for a "
                    "W&B key nor environment variables (nothing was submitted)",
                    parameter=True,
                )
            spec = with_key
            references.append(f"the W&B key from connection {self.wandb_conn_id!r}")
        if references:
            self.log.info("Secrets resolved on the worker (masked): %s", "; ".join(references))
        return dialect.validate_spec(spec, self.allow_unknown_fields)

    def completed_job(self, job: TrainingJob) -> TrainingJob:
        """``job`` with the metrics its program printed, where a portable spec's
        ``metric_definitions`` are applied to the program log by the operator (ModelArts): read
        when the job succeeded, once."""
        if self.portable_spec is None or job.state is not JobState.SUCCEEDED:
            return job
        if self.hook.dialect.metric_regexes:  # the platform reported them: nothing to compile or read
            return job
        compiled = self.compiled
        try:
            if compiled is None:  # a resumed task on another worker: only the regexes are needed
                spec = parse_portable(self.portable_spec)
                compiled = CompiledSpec({}, log_metrics=dict(getattr(spec, "metric_definitions", {}) or {}))
            return with_log_metrics(self.hook, compiled, job)
        except Exception as exc:  # noqa: BLE001 - the job succeeded: its metrics are extra
            self.log.warning(
                "Training job %s succeeded; its metrics could not be read from its program log (%s: %s)",
                job.id,
                type(exc).__name__,
                exc,
            )
            return job

    def program_secret_references(self) -> list[dict[str, Any]]:
        """The spec's secret references and ``wandb_conn_id``'s password: what the program's lines
        are masked against (``stream_logs``)."""
        refs = secret_references(self.spec) if isinstance(self.spec, dict) else []
        return refs + ([{"conn_id": self.wandb_conn_id}] if self.wandb_conn_id else [])

    def program_secret_values(self) -> list[str]:
        """The secret values written in the spec (``secret_values``): the worker knows them."""
        return secret_values(self.spec, self.hook.dialect)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage (called by the OpenLineage provider's listener when the task succeeded):
        inputs = the training data the spec names (:meth:`Dialect.training_data`), outputs = the
        model's checkpoint URI, run facet ``trainingJob`` = job id, platform, state, final metrics,
        cost (USD), epoch and the guard that stopped it. ``None`` without the OpenLineage provider."""
        from airflow_training_provider.lineage import operator_lineage

        job, model, guard = self.lineage or (None, None, None)
        try:
            inputs = self.hook.dialect.training_data(self.spec if isinstance(self.spec, dict) else {})
            return operator_lineage(inputs, [model] if model else [], job, guard)
        except ImportError:  # the OpenLineage provider is optional
            return None

    def remember(self, context: Context, identity: TaskIdentity, job: TrainingJob) -> None:
        """Publish the job before waiting: the task state store first (how a retry finds it: the
        first write after the submit, so a worker killed right after leaves the least behind), then
        XCom and the UI's records (this try)."""
        self.job_id = job.id
        store = context.get("task_state_store")
        if store is not None:
            store.set(
                STATE_STORE_KEY,
                {"job_id": job.id, "try_number": identity.try_number, "platform": self.hook.dialect.name},
            )
        ti = context["ti"]
        ti.xcom_push(key=JOB_ID_XCOM_KEY, value=job.id)
        ti.xcom_push(key="console_url", value=job.console_url)
        self.publish_job(context, job)

    def earlier_try(
        self, context: Context, identity: TaskIdentity, deadline: float | None = None
    ) -> EarlierTry | None:
        """Look at the job an earlier try of this task instance submitted, if any, and decide what
        this try does about it (:meth:`CancelPolicy.earlier_job`, :func:`resumes_from_earlier_job`).
        Nothing is changed on the platform here: the waits only observe.

        * after a clear, a live job is given ``clear_grace`` seconds to be cancelled by the old try's
          own trigger (one cancel, not two) before deciding again;
        * a job that is stopping is never adopted: the try waits (``confirm_cancel_timeout``
          seconds at most, and no later than ``deadline``) for the stop to end, then decides again.

        :returns: ``None`` when no earlier job is recorded or it is gone from the platform.
        """
        previous_id = self._previous_job_id(context, identity)
        if previous_id is None:
            if identity.try_number > 1:
                self.log.info("No training job of an earlier try is recorded for this task instance")
            return None
        try:
            job = self.hook.get_job(previous_id, budget=self.polling.outage_budget)
        except JobNotFoundError as exc:
            self.log.warning(
                "Training job %s of an earlier try is not on the platform any more (%s): submitting a new one",
                previous_id,
                exc,
            )
            return None
        ti = context["ti"]
        start = try_start(ti.try_number, ti.max_tries, self.retries or 0)
        action = self.cancel_policy.earlier_job(job.state, start)
        if action is EarlierJob.CANCEL_THEN_SUBMIT:  # the old try's trigger cancels it: give it time
            job = self._await_cancel_by_old_trigger(job)
            action = self.cancel_policy.earlier_job(job.state, start)
        waited = 0.0
        if action is EarlierJob.AWAIT_STOP:
            since = time.monotonic()
            job = self._await_stop(job, deadline)
            waited = time.monotonic() - since
            action = self.cancel_policy.earlier_job(job.state, start, stop_awaited=True)
        resume = resumes_from_earlier_job(action, start, job.state, self.resume_from_checkpoint)
        return EarlierTry(action=action, job=job, waited=waited, resume=resume)

    def act_on_earlier_try(
        self, earlier: EarlierTry
    ) -> tuple[TrainingJob | None, tuple[str, Checkpoint] | None]:
        """Do what :meth:`earlier_try` decided.

        :returns: ``(job to wait on, resume point)``: the earlier job when this try re-attaches to it
            or adopts its result (then no resume point), else ``None`` and, for a retry that resumes,
            ``(job id, its last checkpoint)`` for the new job's spec.
        :raises TrainingJobStillStopping: the earlier job is still stopping after the wait, or a
            clear's cancel of it was not confirmed: nothing is submitted beside it.
        """
        action, job = earlier.action, earlier.job
        if action is EarlierJob.STILL_STOPPING:
            raise TrainingJobStillStopping(
                f"{platform_job(job)} of an earlier try is still stopping after {earlier.waited:.0f} s of "
                "waiting: this try neither adopts it nor submits a new job beside it (a retry looks again)"
            )
        if action is EarlierJob.REATTACH:
            self.log.info("Re-attaching to training job %s of an earlier try (%s)", job.id, job.state.value)
            return job, None
        if action is EarlierJob.ADOPT:
            self.log.info("Training job %s of an earlier try already succeeded: adopting it", job.id)
            return job, None
        if action is EarlierJob.CANCEL_THEN_SUBMIT:
            self.log.warning("Task was cleared: cancelling training job %s of an earlier try first", job.id)
            if not self.cancel_and_report(job.id, GiveUp.CLEARED.value).state.is_terminal:
                raise TrainingJobStillStopping(
                    f"{platform_job(job)} of an earlier try did not stop within confirm_cancel_timeout "
                    f"({self.cancel_policy.confirm_timeout:.0f} s): this try does not submit a new job "
                    "beside it (a retry looks again)"
                )
        elif action is EarlierJob.LEAVE_THEN_SUBMIT:
            self.log.warning(
                "Task was cleared: training job %s of an earlier try keeps running (cancel_on_kill is off)",
                job.id,
            )
        else:
            self.log.info(
                "Training job %s of an earlier try ended %s: submitting a new one", job.id, job.state.value
            )
        return None, self._resume_point(job) if earlier.resume else None

    def _await_cancel_by_old_trigger(self, job: TrainingJob) -> TrainingJob:
        """After a clear the old try's trigger cancels its job a few seconds later (its ``on_kill``).
        Give it that time (``clear_grace``), so the job is cancelled once: a job seen stopping (or
        ended) is then waited for like any stopping job; the caller cancels if nobody did."""
        polling = self.polling
        return self.hook.wait_until(
            job.id,
            is_stopping_or_terminal,
            polling.clear_grace,
            polling.confirm_interval,
            polling.outage_budget,
        )

    def _await_stop(self, job: TrainingJob, deadline: float | None) -> TrainingJob:
        """An earlier try's job is stopping (that try's give-up asked for it, or the platform stops
        it): wait for it to end, ``confirm_cancel_timeout`` seconds at most and no later than
        ``deadline`` (UNIX seconds: this try's own give-up takes precedence). The job as last seen."""
        timeout = self.cancel_policy.confirm_timeout
        if deadline is not None:
            timeout = max(0.0, min(timeout, self.worker_deadline(deadline) - time.time()))
        self.log.warning(
            "Training job %s of an earlier try is stopping: waiting up to %.0f s for it to end before "
            "deciding (a dying job is never adopted)",
            job.id,
            timeout,
        )
        polling = self.polling
        job = self.hook.wait_until(
            job.id, is_terminal, timeout, polling.confirm_interval, polling.outage_budget
        )
        if job.is_terminal:
            self.log.info("Training job %s of the earlier try ended %s", job.id, job.state.value)
        return job

    def _resume_point(self, job: TrainingJob) -> tuple[str, Checkpoint] | None:
        """``(job id, its last saved checkpoint)``, if it saved one."""
        checkpoints = job.checkpoints or self.hook.list_checkpoints(job.id)
        if not checkpoints:
            return None
        self.log.info("The retry resumes from checkpoint %s of job %s", checkpoints[-1].id, job.id)
        return job.id, checkpoints[-1]

    def _previous_job_id(self, context: Context, identity: TaskIdentity) -> str | None:
        store = context.get("task_state_store")
        record = store.get(STATE_STORE_KEY) if store is not None else None
        if isinstance(record, dict) and record.get("job_id"):
            return str(record["job_id"])
        if not self.hook.dialect.capabilities.list_jobs:
            return None
        # The worker may have died between submit and the store write: find the job by its tags. An
        # optional endpoint: if the platform refuses it, go on (re-attach relies on the state store).
        try:
            since = earlier_jobs_since(context)  # PAI lists the last 7 days unless told
            jobs = [j for j in self.hook.list_jobs(identity.task_tags(), since) if not j.is_terminal]
        except TrainingPlatformError as exc:
            self.log.warning(
                "Could not look for an earlier try's job by its tags (%s); going on without it: "
                "re-attaching relies on the task state store",
                exc,
            )
            return None
        return jobs[-1].id if jobs else None


class CancelTrainingJobOperator(BaseOperator):
    """Cancel a training job and wait (bounded) until the platform confirms it stopped.

    :param conn_id: platform connection.
    :param job_id: the job to cancel (templated, e.g. ``{{ ti.xcom_pull('train', key='job_id') }}``).
    :param reason: text recorded on the platform.
    :param preserve_checkpoints: keep checkpoints (platforms with that flag).
    :param create_final_checkpoint: save a final checkpoint first (platforms that can).
    :param force: stop at once; may lose data.
    :param confirm_timeout: seconds (or a ``timedelta``) to wait for a terminal state.

    Returns the :class:`~airflow_training_provider.models.CancelResult` as JSON. Cancelling a job
    that already ended is not an error (``already_terminal: true``).
    """

    template_fields: Sequence[str] = ("job_id", "conn_id", "reason")

    def __init__(
        self,
        *,
        job_id: str,
        conn_id: str,
        reason: str = "cancelled by Airflow",
        preserve_checkpoints: bool = True,
        create_final_checkpoint: bool = True,
        force: bool = False,
        confirm_timeout: float | timedelta = 120.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_id = job_id
        self.conn_id = conn_id
        self.reason = reason
        self.force = force
        self.cancel_policy = parameters(
            CancelPolicy,
            f"{type(self).__name__}({self.task_id})",
            preserve_checkpoints=preserve_checkpoints,
            create_final_checkpoint=create_final_checkpoint,
            confirm_timeout=confirm_timeout,
        )

    def execute(self, context: Context) -> dict[str, Any]:
        hook = TrainingPlatformHook(self.conn_id)
        policy = self.cancel_policy
        request = policy.request(self.reason, force=self.force)
        result, job = hook.cancel_and_confirm(self.job_id, request, timeout=policy.confirm_timeout)
        log_cancel(self.log, result, job)
        return dump(result)


def _templated(value: Any) -> bool:
    """Whether ``value`` (a spec) holds Jinja anywhere: it can only be validated once rendered."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, dict):
        return any(_templated(k) or _templated(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_templated(v) for v in value)
    return False


class _Timeout(BaseModel):
    """The ``defer_timeout`` parameter, checked like the others."""

    defer_timeout: Seconds
