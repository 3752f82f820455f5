"""Huawei Cloud ModelArts training jobs (API v2): descriptor and dialect
(``docs/platforms/modelarts.md``).

Paths are project-scoped: the connection's base URL is the project's API root,
``https://modelarts.<region>.myhuaweicloud.com/v2/<project_id>``, and the dialect's paths are
relative to it (``/training-jobs``...). Requests are signed with SDK-HMAC-SHA256 by Huawei's own
signer (``huaweicloudsdkcore``, extra ``[modelarts]``) with the connection's AK/SK (plus
``X-Security-Token`` for temporary credentials), or carry an IAM token (``X-Auth-Token``). Errors are
``{"error_code", "error_msg"}``: ``ModelArts.*`` from the service, ``APIGW.*`` from the API gateway.

Identity tags become ``metadata.annotations`` (``airflow-dag: x``), written with the create, and the
job name carries a digest of the task instance, so re-attach and the orphan reaper find the jobs
with the job search (``POST /training-job-searches``: live phases, the name digest).

Checkpoints. ModelArts has no checkpoint option on terminate: checkpoints are whatever the training
code writes to an output channel. A terminate stops the job's containers (SIGTERM, then SIGKILL after
the grace period); a training script that saves on SIGTERM leaves its final checkpoint in the
``checkpoints`` (else ``train_url``) output channel, which the provider reports as the job's
checkpoint location. ``resume_from_checkpoint`` gives the new job a ``resume_from`` input channel
pointing at it.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Annotated, Any, cast
from urllib.parse import parse_qsl, urlsplit

from pydantic import BeforeValidator, Field, field_validator

from airflow_training_provider.errors import (
    InvalidJobSpecError,
    JobNotFoundError,
    JobStateConflictError,
    PlatformAuthError,
    TrainingPlatformError,
    TransientPlatformError,
)
from airflow_training_provider.models import (
    CancelRequest,
    CancelResult,
    Checkpoint,
    Cost,
    JobEvent,
    JobState,
    TrainingJob,
)
from airflow_training_provider.platforms import base
from airflow_training_provider.platforms.base import (
    ApiRequest,
    Capabilities,
    Credentials,
    Dialect,
    HttpRequest,
    LogPage,
    StatusBatch,
    WireModel,
    local_cost_usd,
    local_final_checkpoint,
    name_value_pairs,
    retry_after_seconds,
    tag_pairs,
    try_job_name,
)
from airflow_training_provider.platforms.descriptor import ConnectionParts, PlatformDescriptor, base_url_of
from airflow_training_provider.portable import (
    Placement,
    PortableSpecError,
    PortableTrainingSpec,
    machine_type,
    merge_options,
    pick,
    refuse,
    stringify,
)
from airflow_training_provider.timestamps import InformationalTime, InformationalTimeMs, UtcDateTimeMs

PATH = "/training-jobs"
SEARCH_PATH = "/training-job-searches"
DEFAULT_REGION = "cn-north-4"
MAX_NAME = 64
#: hex characters of the task-instance digest in a job name, which the job search looks for.
SEARCH_DIGEST_LENGTH = 8
#: output channels whose location is reported as the job's checkpoints, in order of preference.
CHECKPOINT_CHANNELS = ("checkpoints", "train_url")
#: the input channel a resumed job gets: the failed job's checkpoint location.
RESUME_CHANNEL = "resume_from"
#: the output of a portable spec's ``output``: the provider reports a ``model``/``model_url`` output as the model
MODEL_OUTPUT = "model_url"
#: where a portable command-mode job's ``source_dir`` is downloaded and its command runs
#: (``algorithm.local_code_dir``, ``working_dir``: under ``/home``, outside ``/home/ma-user/modelarts``)
CODE_DIR_IN_CONTAINER = "/home/ma-user/code"
ANNOTATION_PREFIX = "airflow-"
#: phases a job can still be stopped in (the search of re-attach and the reaper).
LIVE_PHASES = ("Creating", "Pending", "Running")
#: phases of a job that has not ended (a coalesced status read): the live ones and ``Terminating``
WAITING_PHASES = (*LIVE_PHASES, "Terminating")
SEARCH_LIMIT = 50  # the API's maximum page
EVENTS_LIMIT = 100  # the API's maximum page

_AUTH_CODES = re.compile(r"^APIGW\.(0301|0302|0303|0304|0305|0306|0307)$|Token|Auth", re.IGNORECASE)
_THROTTLED_CODES = re.compile(r"^APIGW\.0308$|Throttl|TooMany", re.IGNORECASE)
_STATE_WORDS = re.compile(r"\b(phase|status|state|terminat\w*|cannot be stopped)\b", re.IGNORECASE)


def endpoint_of(region: str) -> str:
    """The ModelArts API host of ``region`` (``https://modelarts.cn-north-4.myhuaweicloud.com``)."""
    return f"https://modelarts.{region}.myhuaweicloud.com"


# -- wire models: Show / search / events (docs/platforms/modelarts.md) ----------------------------------
_Wire = WireModel


def _zero_is_unset(value: Any) -> Any:
    return None if value in (0, "0") else value


#: a job's time: epoch milliseconds (``docs/platforms/modelarts.md``, "The job (show)"), or any other
#: form :func:`~airflow_training_provider.timestamps.parse_timestamp` reads; 0 (``status.start_time``
#: of a job that has not run yet, as the local platform sends it) is no time
_Millis = Annotated[UtcDateTimeMs | None, BeforeValidator(_zero_is_unset)]


class WireMetadata(_Wire):
    id: str
    name: str | None = None
    description: str | None = None
    create_time: _Millis = None
    workspace_id: str | None = None
    annotations: dict[str, str] = Field(default_factory=dict)


class WireTaskStatus(_Wire):
    task: str | None = None
    exit_code: int | None = None
    message: str | None = None


class WireStatus(_Wire):
    phase: str = ""
    secondary_phase: str | None = None
    duration: int | None = None  # milliseconds
    start_time: InformationalTimeMs = None
    tasks: list[str] = Field(default_factory=list)
    task_statuses: list[WireTaskStatus] = Field(default_factory=list)


class WireObs(_Wire):
    obs_url: str | None = None


class WireRemote(_Wire):
    obs: WireObs | None = None


class WireChannel(_Wire):
    name: str | None = None
    remote: WireRemote | None = None
    local_dir: str | None = None

    @property
    def obs_url(self) -> str | None:
        return self.remote.obs.obs_url if self.remote and self.remote.obs else None


class WireAlgorithm(_Wire):
    inputs: list[WireChannel] = Field(default_factory=list)
    outputs: list[WireChannel] = Field(default_factory=list)


class WireJob(_Wire):
    """``GET /v2/{project_id}/training-jobs/{id}`` (Show); also the create and terminate answers
    and an item of the search."""

    kind: str | None = None
    metadata: WireMetadata
    status: WireStatus = Field(default_factory=WireStatus)
    algorithm: WireAlgorithm | None = None


class WireSearch(_Wire):
    items: list[Any] = Field(default_factory=list)  # each row read on its own (Dialect.listed_jobs)
    total: int | None = None  # every job of the project
    count: int | None = None  # the jobs matching the search


class WireEvent(_Wire):
    time: InformationalTime = None  # ISO-8601 text
    level: str = "Info"
    message: str = ""
    source: str | None = None


class WireEvents(_Wire):
    events: list[WireEvent] = Field(default_factory=list)
    total: int | None = None


# -- spec: the v2 create body ----------------------------------------------------------------------------
class _Obs(_Wire):
    obs_url: str = Field(min_length=1)


class _Remote(_Wire):
    obs: _Obs | None = None
    dataset: dict[str, Any] | None = None


class _Channel(_Wire):
    name: str = Field(min_length=1)
    description: str | None = None
    remote: _Remote | None = None
    local_dir: str | None = None
    access_method: str | None = None
    remote_constraint: list[dict[str, Any]] | None = None


class _Engine(_Wire):
    engine_id: str | None = None
    engine_name: str | None = None
    engine_version: str | None = None
    image_url: str | None = Field(default=None, min_length=1)
    install_sys_packages: bool | None = None
    image_repo_id: str | None = None


class _Parameter(_Wire):
    name: str = Field(min_length=1)
    value: str
    description: str | None = None
    constraint: dict[str, Any] | None = None
    i18n_description: Any = None


def _name_value_list(value: Any) -> Any:
    return name_value_pairs(value, "name", "value")


class _Algorithm(_Wire):
    id: str | None = None
    name: str | None = None
    subscription_id: str | None = None
    item_version_id: str | None = None
    code_dir: str | None = None
    boot_file: str | None = None
    command: str | None = None
    engine: _Engine | None = None
    parameters: list[_Parameter] | None = None
    inputs: list[_Channel] | None = None
    outputs: list[_Channel] | None = None
    environments: dict[str, str] | None = None
    policies: dict[str, Any] | None = None
    local_code_dir: str | None = None
    working_dir: str | None = None
    summary: dict[str, Any] | None = None
    autosearch_config_path: str | None = None
    autosearch_framework_path: str | None = None

    _pairs = field_validator("parameters", mode="before")(_name_value_list)


class _Resource(_Wire):
    flavor_id: str | None = Field(default=None, min_length=1)
    node_count: int = Field(default=1, ge=1)
    pool_id: str | None = None
    pool_name: str | None = None
    pool_group_id: str | None = None
    policy: str | None = None
    flavor_name: str | None = None
    flavor_detail: dict[str, Any] | None = None
    main_container_allocated_resources: dict[str, Any] | None = None
    main_container_customized_flavor: dict[str, Any] | None = None


class _Spec(_Wire):
    resource: _Resource
    volumes: list[dict[str, Any]] | None = None
    log_export_path: dict[str, Any] | None = None
    auto_stop: dict[str, Any] | None = None
    schedule_policy: dict[str, Any] | None = None
    custom_metrics: list[dict[str, Any]] | None = None
    retention: dict[str, Any] | None = None
    log_export_config: dict[str, Any] | None = None
    notification: dict[str, Any] | None = None
    output_model: dict[str, Any] | None = None
    asset_model: dict[str, Any] | None = None
    asset_id: str | None = None
    reserved_time: dict[str, Any] | None = None


class _Metadata(_Wire):
    name: str | None = Field(default=None, min_length=1, max_length=MAX_NAME)
    workspace_id: str | None = None
    description: str | None = Field(default=None, max_length=256)
    annotations: dict[str, str] | None = None
    training_experiment_reference: dict[str, Any] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_-]+", value):
            raise ValueError("must hold only letters, digits, '-' and '_'")
        return value


class ModelArtsJobSpec(_Wire):
    """A v2 create body (``POST /v2/{project_id}/training-jobs``). ``metadata.name`` is optional
    (derived from the task-instance try, see :func:`job_name`); ``algorithm.parameters`` may be a
    mapping."""

    kind: str = "job"
    metadata: _Metadata = Field(default_factory=_Metadata)
    algorithm: _Algorithm
    spec: _Spec | None = None
    tasks: list[dict[str, Any]] | None = None
    endpoints: dict[str, Any] | None = None
    train_type: str | None = None
    ftjob_config: dict[str, Any] | None = None


# -- names and annotations ----------------------------------------------------------------------------
def identity_digest(tags: list[str]) -> str | None:
    """8 hex characters naming a task instance (deployment, DAG, run, task, map index) in its jobs'
    names (:func:`~.base.identity_digest`), so the search finds every try's job; ``None`` when
    ``tags`` do not name one. Eight, as in the names earlier versions of the provider gave, so
    their jobs are still found."""
    return base.identity_digest(tags, SEARCH_DIGEST_LENGTH)


def job_name(stem: str | None, tags: list[str]) -> str:
    """The ``metadata.name`` of a task-instance try (:func:`~.base.try_job_name`):
    ``<stem or af-<dag>-<task>>[-m<map index>]-<digest>-t<try>``, at most 64 characters of
    ``[A-Za-z0-9_-]`` (``docs/platforms/modelarts.md``, "Job names"); the digest is
    :func:`identity_digest`, which the job search looks for."""
    return try_job_name(stem, tags, MAX_NAME, digest_length=SEARCH_DIGEST_LENGTH)


def _channel(channels: list[WireChannel], names: tuple[str, ...]) -> str | None:
    by_name = {c.name: c.obs_url for c in channels if c.obs_url}
    return next((by_name[n] for n in names if n in by_name), None)


def obs_path(uri: str) -> str:
    """``obs://bucket/key`` as ModelArts names an OBS location: ``/bucket/key``."""
    return "/" + uri.split("://", 1)[1]


# -- the dialect ---------------------------------------------------------------------------------------
class ModelArtsDialect(Dialect):
    """ModelArts training jobs (API v2, SDK-HMAC-SHA256 or an IAM token)."""

    name = "modelarts"
    spec_model = ModelArtsJobSpec
    environment_field = "algorithm.environments"
    list_row_id = "metadata.id"
    capabilities = Capabilities(
        # a terminate stops the containers: SIGTERM, then SIGKILL after the grace period
        final_checkpoint_on_cancel=True,
        preserve_checkpoints_flag=False,
        events=True,
        events_in_job=False,
        list_jobs=True,
        checkpoints_in_job=True,
        program_logs=True,  # the task log's preview
    )
    status_map = {
        "Creating": JobState.PENDING,
        "Pending": JobState.QUEUED,
        "Running": JobState.RUNNING,
        "Terminating": JobState.STOPPING,
        "Completed": JobState.SUCCEEDED,
        "Failed": JobState.FAILED,
        "Abnormal": JobState.FAILED,
        "Terminated": JobState.CANCELLED,
    }

    # -- spec ---------------------------------------------------------------------------------------
    def validate_spec(self, spec: dict[str, Any], allow_unknown_fields: bool = False) -> dict[str, Any]:
        spec = super().validate_spec(spec, allow_unknown_fields)
        algorithm = spec["algorithm"]
        engine = algorithm.get("engine") or {}
        if not (
            algorithm.get("id")
            or (algorithm.get("subscription_id") and algorithm.get("item_version_id"))
            or (algorithm.get("code_dir") and algorithm.get("boot_file"))
            or engine.get("image_url")
        ):
            raise InvalidJobSpecError(
                "algorithm",
                "name the algorithm: id; subscription_id and item_version_id; code_dir and boot_file; "
                "or a custom image (engine.image_url, with a command)",
                self.name,
            )
        if engine.get("image_url") and not algorithm.get("command") and not algorithm.get("boot_file"):
            raise InvalidJobSpecError(
                "algorithm.command", "a custom image (engine.image_url) needs the command to run", self.name
            )
        if not spec.get("spec") and not spec.get("tasks"):
            raise InvalidJobSpecError(
                "spec.resource", "the resources are required (spec.resource.flavor_id or pool_id)", self.name
            )
        resource = (spec.get("spec") or {}).get("resource") or {}
        if spec.get("spec") and not (resource.get("flavor_id") or resource.get("pool_id")):
            raise InvalidJobSpecError(
                "spec.resource.flavor_id",
                "a resource flavor (flavor_id) or a pool (pool_id) is required",
                self.name,
            )
        return spec

    storage_scheme = "obs"
    metric_regexes = False  # no MetricDefinitions: the operator reads the program log at the end

    def compile_training(self, spec: PortableTrainingSpec, place: Placement) -> dict[str, Any]:
        """A v2 create body in one of the documented algorithm forms: ``entry_point`` →
        ``code_dir`` + ``boot_file`` on a preset engine (``options.modelarts.algorithm.engine``;
        ModelArts runs ``python <boot_file>`` with the hyperparameters as ``--name=value``);
        ``command`` → a custom image (``engine.image_url``) and its ``command``, run in
        :data:`CODE_DIR_IN_CONTAINER` where ``source_dir`` is downloaded (``local_code_dir``,
        ``working_dir``). Locations are OBS paths (``/bucket/key``); the
        output is the ``model_url`` output, the checkpoints the ``checkpoints`` one, each input
        ``--<channel>=<local directory>``. ``docs/portable-spec.md``."""
        display = "ModelArts"
        options = dict(spec.options.get(self.name) or {})
        preset = (
            ((options.get("algorithm") or {}).get("engine"))
            if isinstance(options.get("algorithm"), dict)
            else None
        )
        image = pick(spec.image, "image", self.name, display)
        if spec.max_runtime is not None and spec.max_runtime % 3600:
            raise refuse(
                "max_runtime",
                display,
                f"it stops jobs after whole hours (spec.auto_stop): {spec.max_runtime} s is not one; "
                f"give {spec.max_runtime // 3600 * 3600 or 3600} or {(spec.max_runtime // 3600 + 1) * 3600}",
            )
        if spec.resources.volume_size_gb is not None:
            raise refuse("resources.volume_size_gb", display, "the flavor (flavor_id) sets the disk")
        algorithm: dict[str, Any] = {}
        if image and preset:
            raise PortableSpecError(
                f"options.{self.name}.algorithm.engine", "a preset engine and an image: give one", display
            )
        if spec.entry_point is not None and image:
            raise refuse(
                "image" if not isinstance(spec.image, dict) else f"image.{self.name}",
                display,
                "it runs a boot file (entry_point) on a preset engine: give "
                "options.modelarts.algorithm.engine {engine_name, engine_version} (a custom image takes command)",
            )
        if spec.entry_point is not None and not preset:
            raise PortableSpecError(
                f"options.{self.name}.algorithm.engine",
                "a preset engine {engine_name, engine_version} to run the boot file (entry_point) on",
                display,
            )
        if spec.command is not None and not image:
            raise PortableSpecError(
                "image" if not isinstance(spec.image, dict) else f"image.{self.name}",
                "a custom image (engine.image_url) to run the command in",
                display,
            )
        if image:
            algorithm["engine"] = {"image_url": image}
        if spec.source_dir is not None:
            code_dir = obs_path(place.code_uri())
            algorithm["code_dir"] = code_dir
            if spec.entry_point is not None:
                algorithm["boot_file"] = code_dir + spec.entry_point
            else:  # a command finds the code where it runs
                algorithm["local_code_dir"] = algorithm["working_dir"] = CODE_DIR_IN_CONTAINER
        if spec.command is not None:
            algorithm["command"] = shlex.join(spec.command)
        if spec.hyperparameters:
            algorithm["parameters"] = [
                {"name": k, "value": stringify(v)} for k, v in spec.hyperparameters.items()
            ]
        reserved = ({MODEL_OUTPUT, CHECKPOINT_CHANNELS[0], RESUME_CHANNEL}) & set(spec.inputs)
        if reserved:
            raise refuse(
                f"inputs.{sorted(reserved)[0]}",
                display,
                "the name is the model's, the checkpoints' or a resume's",
            )
        if spec.inputs:
            algorithm["inputs"] = [
                {
                    "name": channel,
                    "remote": {"obs": {"obs_url": obs_path(place.uri(location, f"inputs.{channel}"))}},
                }
                for channel, location in spec.inputs.items()
            ]
        outputs = [
            {"name": MODEL_OUTPUT, "remote": {"obs": {"obs_url": obs_path(place.uri(spec.output, "output"))}}}
        ]
        if spec.checkpoints:
            url = obs_path(place.uri(spec.checkpoints, "checkpoints"))
            outputs.append({"name": CHECKPOINT_CHANNELS[0], "remote": {"obs": {"obs_url": url}}})
        algorithm["outputs"] = outputs
        if spec.environment:
            algorithm["environments"] = dict(spec.environment)
        job_spec: dict[str, Any] = {
            "resource": {
                "flavor_id": machine_type(spec.resources, self.name, display),
                "node_count": spec.resources.instance_count,
            }
        }
        if spec.max_runtime is not None:
            job_spec["auto_stop"] = {"time_unit": "HOURS", "duration": spec.max_runtime // 3600}
        body: dict[str, Any] = {"kind": "job", "metadata": {}, "algorithm": algorithm, "spec": job_spec}
        if spec.name:
            body["metadata"]["name"] = spec.name
        if spec.tags:  # as the provider keeps its own identity tags
            body["metadata"]["annotations"] = dict(spec.tags)
        merge_options(body, options, self.name)
        return body

    def with_tags(self, spec: dict[str, Any], tags: list[str]) -> dict[str, Any]:
        """``spec`` with the identity tags as ``metadata.annotations`` and its name derived from them."""
        metadata = dict(spec.get("metadata") or {})
        annotations = {
            k: v
            for k, v in (metadata.get("annotations") or {}).items()
            if not k.startswith(ANNOTATION_PREFIX)
        }
        metadata["annotations"] = {**annotations, **tag_pairs(tags)}
        metadata["name"] = job_name(metadata.get("name"), tags)
        return {**spec, "metadata": metadata}

    def resume_spec(self, spec: dict[str, Any], job_id: str, checkpoint: Checkpoint) -> dict[str, Any] | None:
        """``spec`` with a ``resume_from`` input channel at the failed job's checkpoint location:
        the training script finds the checkpoints to resume from there."""
        if not checkpoint.path:
            return None
        algorithm = dict(spec.get("algorithm") or {})
        inputs = [c for c in algorithm.get("inputs") or [] if c.get("name") != RESUME_CHANNEL]
        algorithm["inputs"] = [
            *inputs,
            {"name": RESUME_CHANNEL, "remote": {"obs": {"obs_url": checkpoint.path}}},
        ]
        return {**spec, "algorithm": algorithm}

    def training_data(self, spec: dict[str, Any]) -> list[str]:
        """Each input's OBS location (``/bucket/key`` as ``obs://bucket/key``), except ``resume_from``."""
        out = []
        for channel in (spec.get("algorithm") or {}).get("inputs") or []:
            url = ((channel.get("remote") or {}).get("obs") or {}).get("obs_url")
            if url and channel.get("name") != RESUME_CHANNEL:
                out.append(f"obs:/{url}" if url.startswith("/") else url)
        return out

    # -- requests -----------------------------------------------------------------------------------
    def create_request(self, spec: dict[str, Any]) -> ApiRequest:
        # not idempotent: ModelArts has no client token; a create that may have landed is found by search
        return ApiRequest("POST", PATH, body=spec, idempotent=False)

    def get_request(self, job_id: str) -> ApiRequest:
        return ApiRequest("GET", f"{PATH}/{job_id}")

    def cancel_request(self, job_id: str, cancel: CancelRequest) -> ApiRequest:
        """Terminate (``POST …/actions`` ``{"action_type": "terminate"}``): no reason or checkpoint options."""
        return ApiRequest("POST", f"{PATH}/{job_id}/actions", body={"action_type": "terminate"})

    def list_request(self, tags: list[str], created_after: datetime | None = None) -> ApiRequest:
        """The job search: live jobs, and with a task instance's tags only the jobs whose name holds
        its digest (:func:`identity_digest`); one page of 50, oldest first. The annotations are
        checked on the answer. Live jobs of any age are searched (``created_after`` is not needed)."""
        filters: list[dict[str, Any]] = [{"key": "phase", "operator": "in", "value": list(LIVE_PHASES)}]
        if digest := identity_digest(tags):
            filters.append({"key": "name", "operator": "like", "value": [digest]})
        body = {
            "offset": 0,
            "limit": SEARCH_LIMIT,
            "sort_by": "create_time",
            "order": "asc",
            "filters": filters,
        }
        return ApiRequest("POST", SEARCH_PATH, body=body)

    def probe_request(self) -> ApiRequest:
        """The search with one row at most."""
        return ApiRequest("POST", SEARCH_PATH, body={"offset": 0, "limit": 1})

    #: the search takes no list of job ids: one request (and its pages) lists every waiting job
    batch_size = 10_000
    #: a search item is the whole job object (``JobResponse``), as Show answers it
    batch_rows_complete = True

    def status_batch_request(
        self, job_ids: list[str], page: str | None = None, created_after: datetime | None = None
    ) -> ApiRequest:
        """The job search (``POST /v2/{project_id}/training-job-searches``), which has no filter by
        job id: the jobs that have not ended (``phase`` ``in`` :data:`WAITING_PHASES`; a job that
        ended drops out and is read on its own, as its final view is anyway), newest first,
        :data:`SEARCH_LIMIT` a page, ``offset`` = ``page`` (a page index from 0); ``job_ids`` are
        found in the answer. Live jobs of any age are searched (``created_after`` is not needed)."""
        body = {
            "offset": int(page or 0),
            "limit": SEARCH_LIMIT,
            "sort_by": "create_time",
            "order": "desc",
            "filters": [{"key": "phase", "operator": "in", "value": list(WAITING_PHASES)}],
        }
        return ApiRequest("POST", SEARCH_PATH, body=body)

    def parse_status_batch(self, body: Any, page: str | None = None) -> StatusBatch:
        """The page's ``items`` (whole jobs); the next page index while ``count`` (the matching
        jobs) says more follow, or, without ``count``, while the page is full."""
        wire = WireSearch.model_validate(body or {})
        index = int(page or 0)
        if wire.count is not None:
            more = (index + 1) * SEARCH_LIMIT < wire.count
        else:
            more = len(wire.items) >= SEARCH_LIMIT
        return StatusBatch(self.listed_jobs(wire.items, quiet=True), str(index + 1) if more else None)

    def events_request(self, job_id: str) -> ApiRequest | None:
        return ApiRequest(
            "GET", f"{PATH}/{job_id}/events", params={"offset": 0, "limit": EVENTS_LIMIT, "order": "asc"}
        )

    def logs_request(self, job: TrainingJob, cursor: str | None) -> ApiRequest:
        """Without a task yet: the job (``GET …/training-jobs/{id}``), for its first task in
        ``status.tasks`` (``worker-0``); then that task's log preview,
        ``GET …/training-jobs/{id}/tasks/{task_id}/logs/preview`` → ``{content, current_size,
        full_size}``.

        :param cursor: ``None``, or ``{"task": task id, "bytes": bytes of the log read}`` as JSON."""
        if cursor is None:
            return self.get_request(job.id)
        task = json.loads(cursor)["task"]
        return ApiRequest("GET", f"{PATH}/{job.id}/tasks/{task}/logs/preview")

    def parse_logs(self, body: Any, cursor: str | None) -> LogPage:
        """The job (``cursor`` ``None``): its first task, once it has one (no lines yet, ``more``);
        a preview: the whole lines of the log past the bytes already read (a line still being
        written waits for its end). The preview holds the whole log up to 5 MB, then only its latest
        part (``content`` is the last ``current_size`` of ``full_size`` bytes): lines that left
        the window unread are not shown, one line says how many bytes were skipped. Never ``more``:
        one preview holds everything readable."""
        if cursor is None:
            tasks = WireJob.model_validate(body).status.tasks
            return (
                LogPage((), json.dumps({"task": tasks[0], "bytes": 0}), True)
                if tasks
                else LogPage((), None, False)
            )
        at = json.loads(cursor)
        content, current, full = body["content"], body["current_size"], body["full_size"]
        if not isinstance(content, str) or not isinstance(current, int) or not isinstance(full, int):
            raise TypeError("content is not a string or a size not an integer")
        data = content.encode("utf-8")
        window = full - len(data)  # the byte of the whole log the preview starts at
        lines: list[str] = []
        offset = at["bytes"] - window
        if offset < 0:  # past the preview's limit: what left the window unread is lost here
            lines.append(f"[{-offset} bytes of the log not shown: past the log preview's size limit]")
            offset = 0
        end = data.rfind(b"\n") + 1  # whole lines only
        if end <= offset:
            return LogPage(
                tuple(lines), json.dumps({"task": at["task"], "bytes": max(at["bytes"], window)}), False
            )
        text = data[offset:end].decode("utf-8", errors="replace")
        lines += [line.rstrip("\r") for line in text.split("\n")[:-1]]
        return LogPage(tuple(lines), json.dumps({"task": at["task"], "bytes": window + end}), False)

    def authenticate(self, request: HttpRequest, credentials: Credentials) -> dict[str, str]:
        """SDK-HMAC-SHA256 by Huawei's signer (``huaweicloudsdkcore``) over the method, path, query,
        every header sent (``Host``, ``X-Sdk-Date``, ``X-Project-Id``, ``Accept``, ``Content-Type``,
        ``X-Security-Token``) and the body's SHA-256; with an IAM token instead, ``X-Auth-Token``."""
        url = urlsplit(request.url)
        added = {"Host": url.netloc}
        if credentials.project:
            added["X-Project-Id"] = credentials.project
        if not (credentials.access_key_id and credentials.secret_access_key):
            return {**added, "X-Auth-Token": credentials.api_key or ""}
        from huaweicloudsdkcore.sdk_request import SdkRequest  # extra [modelarts]
        from huaweicloudsdkcore.signer.signer import Signer

        added["X-Sdk-Date"] = request.timestamp.strftime("%Y%m%dT%H%M%SZ")
        if credentials.session_token:
            added["X-Security-Token"] = credentials.session_token
        signed = SdkRequest(
            method=request.method,
            schema=url.scheme,
            host=url.netloc,
            resource_path=url.path or "/",
            query_params=parse_qsl(url.query, keep_blank_values=True),
            header_params={**request.headers, **added},
            body=request.body,
        )
        Signer(_AkSk(credentials.access_key_id, credentials.secret_access_key)).sign(signed)
        return {**added, "Authorization": signed.header_params["Authorization"]}

    # -- responses ----------------------------------------------------------------------------------
    def parse_created(self, body: Any) -> TrainingJob:
        """The create answer (201) is the job object, ``Creating``."""
        return self.parse_job(body)

    def parse_job(self, body: Any) -> TrainingJob:
        wire = WireJob.model_validate(body)
        status = wire.status
        state = self.map_status(status.phase)
        secondary = status.secondary_phase or ""
        raw = f"{status.phase}/{secondary}" if secondary and secondary != status.phase else status.phase
        message = None
        if state is JobState.FAILED:  # the reason: the secondary phase, then each failed task's exit
            parts = [secondary] if secondary not in ("", status.phase, "Failed") else []
            for t in status.task_statuses:
                if t.exit_code not in (None, 0) or t.message:
                    code = f" exit code {t.exit_code}" if t.exit_code is not None else ""
                    parts.append(f"{t.task or 'task'}{code}" + (f": {t.message}" if t.message else ""))
            message = "; ".join(parts) or f"the job ended {status.phase}"
        checkpoints, artifacts = [], {}
        outputs = wire.algorithm.outputs if wire.algorithm else []
        if location := _channel(outputs, CHECKPOINT_CHANNELS):
            name = next(c.name for c in outputs if c.obs_url == location)
            checkpoints.append(Checkpoint(id=name or "checkpoints", kind="location", path=location))
            artifacts["checkpoints"] = location
        written, finals = local_final_checkpoint(body, location)  # the local platform's user code only
        # the files before the location: a retry resumes from the latest checkpoint, which must
        # stay the location (what the platform restores into the new job's checkpoint directory)
        checkpoints = finals + checkpoints
        if model := _channel(outputs, ("model", "model_url")):
            artifacts["model"] = model
        metadata = wire.metadata
        return TrainingJob(
            id=metadata.id,
            platform=self.name,
            state=state,
            raw_status=raw,
            name=metadata.name,
            message=message,
            checkpoints=checkpoints,
            artifacts=artifacts,
            cost=Cost(
                billable_seconds=status.duration / 1000 if status.duration is not None else None,
                total_usd=local_cost_usd(body),
            ),
            tags=[f"{k}:{v}" for k, v in metadata.annotations.items() if k.startswith(ANNOTATION_PREFIX)],
            created_at=metadata.create_time,
            started_at=status.start_time,
            final_checkpoint_written=written,
        )

    def parse_cancel(self, job_id: str, body: Any) -> CancelResult:
        """The terminate answer (202) is the job object, ``Terminating``."""
        if isinstance(body, dict) and isinstance(body.get("metadata"), dict):
            return CancelResult(job_id=job_id, state=self.parse_job(body).state)
        return CancelResult(job_id=job_id, state=JobState.STOPPING)

    def parse_list(self, body: Any) -> list[TrainingJob]:
        """The search's ``items``; a row that does not read as a job is left out (logged)."""
        return self.listed_jobs(WireSearch.model_validate(body or {}).items)

    def parse_events(self, body: Any) -> list[JobEvent]:
        """``{"events": [{"time", "level", "message", "source"}]}`` (asked oldest first)."""
        return [
            JobEvent(type=e.source or "Job", message=e.message, level=e.level.lower(), created_at=e.time)
            for e in WireEvents.model_validate(body or {}).events
        ]

    def error_fields(self, body: Any) -> tuple[str | None, str | None, str | None]:
        if not isinstance(body, dict):
            return None, None, None
        return body.get("error_code"), body.get("error_msg"), body.get("request_id")

    def classify_error(
        self, status: int, headers: Mapping[str, str], body: Any, text: str = ""
    ) -> TrainingPlatformError:
        """By the status, with the code where it says more: 429 or ``APIGW.0308`` (throttled) and
        5xx are transient; 401/403 and the gateway's authentication codes are auth; a 404 from the
        gateway (``APIGW.*``: no such API, a wrong endpoint) is a definite error, not a missing job;
        a terminate refused for the job's phase is a state conflict."""
        code, message, request_id = self.error_fields(body)
        message = message or text[:500] or f"HTTP {status}"
        kw: dict[str, Any] = {"status": status, "code": code, "request_id": request_id}
        if status == 429 or _THROTTLED_CODES.search(code or ""):
            return TransientPlatformError(message, retry_after=retry_after_seconds(headers), sent=False, **kw)
        if status >= 500:
            return TransientPlatformError(
                message, retry_after=retry_after_seconds(headers), sent=status != 503, **kw
            )
        if status in (401, 403) or _AUTH_CODES.search(code or ""):
            return PlatformAuthError(message, **kw)
        if status == 404 and (code or "").upper().startswith("APIGW."):
            return TrainingPlatformError(f"{message} (no such API: check the connection's endpoint)", **kw)
        if status == 404:
            return JobNotFoundError(message, **kw)
        if status == 409 or (status == 400 and _STATE_WORDS.search(message)):
            return JobStateConflictError(message, **kw)
        return TrainingPlatformError(message, **kw)

    @classmethod
    def storage_uri(cls, path: str) -> str | None:
        """ModelArts' own form of an OBS path, ``/bucket/key``, as ``obs://bucket/key``."""
        return f"obs:/{path}" if path.startswith("/") else super().storage_uri(path)

    def console_url(self, base_url: str, job_id: str) -> str | None:
        match = re.search(r"modelarts\.([a-z0-9-]+)\.myhuaweicloud\.com", base_url)
        if match is None:  # an endpoint override (e.g. the local training platform): no console
            return None
        return f"https://console.huaweicloud.com/modelarts/?region={match.group(1)}#/trainingJobs/{job_id}"


class _AkSk:
    """The credentials as Huawei's signer reads them (``ak``, ``sk``)."""

    __slots__ = ("ak", "sk")

    def __init__(self, ak: str, sk: str) -> None:
        self.ak, self.sk = ak, sk


# -- the platform: a `modelarts` connection -------------------------------------------------------------
@dataclass(frozen=True)
class ModelArtsPlatformDescriptor(PlatformDescriptor):
    """The ``modelarts`` connection: AK (login) and SK (password), ``region`` and ``project_id`` in
    the extras, an optional ``security_token`` (temporary AK/SK) or, instead of AK/SK, an IAM
    ``auth_token``; the host overrides the endpoint (the local training platform). The base URL is
    the project's API root, ``<endpoint>/v2/<project_id>``."""

    def connect(self, conn: Any) -> ConnectionParts:
        credentials = self.read_credentials(conn)
        where = f"Connection {conn.conn_id!r} ({self.display_name})"
        if not credentials.project:
            raise PlatformAuthError(f"{where} has no project ID: set its project_id extra")
        if not (credentials.access_key_id and credentials.secret_access_key) and not credentials.api_key:
            raise PlatformAuthError(
                f"{where} has no credentials: set its login (AK) and password (SK), or an IAM token "
                "in the auth_token extra"
            )
        if credentials.access_key_id and credentials.secret_access_key:
            try:
                import huaweicloudsdkcore.signer.signer  # noqa: F401 - Huawei's SDK-HMAC-SHA256 signer
            except ImportError:  # pragma: no cover - depends on the installed extras
                raise ValueError(
                    f"{where} signs with AK/SK: install Huawei's signer "
                    "(pip install 'airflow-training-provider[modelarts]')"
                ) from None
        region = credentials.region or DEFAULT_REGION
        credentials = replace(credentials, region=region)
        host = base_url_of(conn.host, conn.schema, conn.port, endpoint_of(region))
        base_url = project_root(host, cast(str, credentials.project))
        return ConnectionParts(
            credentials, base_url, self.transport_extra(conn), api_rates=self.rates_of(conn, base_url)
        )

    def default_url(self, credentials: Credentials) -> str:
        return project_root(endpoint_of(credentials.region or DEFAULT_REGION), credentials.project or "")


def project_root(host: str, project_id: str) -> str:
    """``host`` + ``/v2/<project_id>`` (kept as it is when it already ends so)."""
    root = f"/v2/{project_id}"
    return host if host.endswith(root) else host.rstrip("/") + root


PLATFORM = ModelArtsPlatformDescriptor(
    conn_type="modelarts",
    display_name="Huawei Cloud ModelArts",
    class_name="ModelArts",
    dialect=ModelArtsDialect,
    default_base_url="https://modelarts.{region}.myhuaweicloud.com/v2/{project}",
    docs_url="https://support.huaweicloud.com/intl/en-us/api-modelarts/CreateTrainingJob.html",
    credentials={
        "access_key_id": "login",
        "secret_access_key": "password",
        "session_token": "extra.security_token",
        "api_key": "extra.auth_token",
        "region": "extra.region",
        "project": "extra.project_id",
    },
    required_credentials=(),
    labels={
        "access_key_id": "Access key (AK)",
        "secret_access_key": "Secret key (SK)",
        "session_token": "Security token (temporary AK/SK, optional)",
        "api_key": "IAM token (X-Auth-Token; instead of AK/SK)",
        "region": "Region (e.g. cn-north-4)",
        "project": "Project ID",
        "host": "Endpoint override (optional)",
    },
    placeholders={
        "region": "cn-north-4",
        "project": "the region's project ID (IAM → My Credentials)",
        "host": "https://modelarts.<region>.myhuaweicloud.com",
    },
)
