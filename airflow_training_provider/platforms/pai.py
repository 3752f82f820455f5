"""Alibaba Cloud PAI training jobs (PaiStudio API 2022-01-12): descriptor and dialect
(``docs/platforms/pai.md``).

PaiStudio is an ROA API: REST paths under ``/api/v1/trainingjobs``, PascalCase JSON, every answer
with a ``RequestId``. Each request is signed with ACS3-HMAC-SHA256 by Alibaba's own signer
(``alibabacloud-tea-openapi``, extra ``[pai]``) over the method, path, query, the ``x-acs-*``
headers and the body's SHA-256. Errors are ``{"Code", "Message", "RequestId"}``; a positive
``x-acs-retry-after`` header (milliseconds) marks throttling.

Identity tags become job ``Labels`` (``airflow-dag:x`` → Key ``airflow-dag``, Value ``x``) and jobs
are found by them with ``ListTrainingJobs?Labels=<JSON map>`` (re-attach and the orphan reaper).
PAI generates the job id (``TrainingJobId``); the name is derived from the task-instance try.

Checkpoints. ``StopTrainingJob`` has no checkpoint options: a stop terminates the job's containers
(SIGTERM, then SIGKILL after the grace period), and a training script that saves on SIGTERM leaves
its final checkpoint in its ``checkpoints`` output channel. The provider reports that channel's URI
as the job's checkpoint location; a retry with ``resume_from_checkpoint`` gives the new job the same
``checkpoints`` channel, where the script finds what to resume from.
"""

from __future__ import annotations

import json
import re
import shlex
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from pydantic import Field, field_validator

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
    MetricPoint,
    Progress,
    TrainingJob,
)
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
    with_tag_pairs,
)
from airflow_training_provider.platforms.credentials import SelfRefreshingSource, SigningKeys
from airflow_training_provider.platforms.descriptor import ConnectionParts, PlatformDescriptor, base_url_of
from airflow_training_provider.portable import (
    Placement,
    PortableTrainingSpec,
    bucket_key,
    machine_type,
    merge_options,
    pick,
    refuse,
    stringify,
)
from airflow_training_provider.timestamps import (
    InformationalTime,
    UtcDateTime,
    informational_time,
    parse_timestamp,
)

API_VERSION = "2022-01-12"
PATH = "/api/v1/trainingjobs"
SIGNATURE_ALGORITHM = "ACS3-HMAC-SHA256"
CHECKPOINT_CHANNEL = "checkpoints"
#: the output channel of a portable spec's ``output``: PAI reports a ``model`` channel as the job's model
MODEL_CHANNEL = "model"
LABEL_KEY_PREFIX = "airflow-"
MAX_NAME = 64
DEFAULT_REGION = "cn-hangzhou"

#: Regions whose PaiStudio host is not ``pai.<region>.aliyuncs.com`` (the SDK's endpoint map).
ENDPOINT_EXCEPTIONS = {"cn-hangzhou": "pai.cn-hangzhou.data.aliyun.com"}

#: ``ReasonCode`` of a job the platform ended because it ran past ``Scheduler.MaxRunningTimeInSeconds``:
#: a failure, not a cancel.
_TIMED_OUT_REASONS = frozenset({"MaxRunningTimeExceeded", "JobTimeout", "TrainingJobTimeout"})
_AUTH_CODES = re.compile(
    r"^(InvalidAccessKeyId|SignatureDoesNotMatch|IncompleteSignature|InvalidSecurityToken|"
    r"Forbidden|NoPermission|InvalidAuthorization|MissingSecurityToken)",
    re.IGNORECASE,
)
_NOT_FOUND_CODES = re.compile(r"NotExist|NotFound", re.IGNORECASE)
_CONFLICT_CODES = re.compile(r"Status|State|AlreadyStopped|AlreadyTerminated", re.IGNORECASE)
#: an event line, ``<ISO time> [<type>] <text>``: the time ``Z``, an offset or no zone (read as UTC)
_EVENT_LINE = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\dT[\d:.,]+(?:Z|[+-]\d\d:?\d\d)?)\s+(?:\[(?P<type>[^\]]+)\]\s*)?(?P<message>.*)$"
)
#: where a metric without a ``Timestamp`` sorts: before every timed one
_NO_TIME = datetime.min.replace(tzinfo=UTC)


#: ``ListTrainingJobLogs`` ``PageSize``: lines per page (the reference's example is 100)
LOG_PAGE_SIZE = 100
#: ``ListTrainingJobs`` ``PageSize`` of a coalesced status read: PAI documents no maximum (its SDK's
#: list helpers ask 20 and 50); the local platform takes up to 1,000
STATUS_PAGE_SIZE = 100


def endpoint_of(region: str) -> str:
    """The PaiStudio API base URL of ``region`` (``https://pai.cn-beijing.aliyuncs.com``)."""
    return f"https://{ENDPOINT_EXCEPTIONS.get(region, f'pai.{region}.aliyuncs.com')}"


def pai_time(value: datetime) -> str:
    """``value`` as PaiStudio's query times are written: UTC, ``%Y-%m-%dT%H:%M:%SZ`` (the format of
    ``GmtCreateTime``); a naive ``value`` is taken as UTC."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


# -- wire models: GetTrainingJob / ListTrainingJobs (docs/platforms/pai.md) ----------------------------
_Wire = WireModel


class WireNameValue(_Wire):
    Name: str
    Value: float | None = None
    Timestamp: str | None = None


class WireProgressValue(_Wire):
    Value: float | None = None
    Timestamp: str | None = None


class WireProgress(_Wire):
    OverallProgress: WireProgressValue | None = None
    RemainingTime: WireProgressValue | None = None


class WireLabel(_Wire):
    Key: str
    Value: str = ""


class WireChannel(_Wire):
    Name: str
    OutputUri: str | None = None
    DatasetId: str | None = None


class WireJob(_Wire):
    """``GetTrainingJob`` answer (also an item of ``ListTrainingJobs``' ``TrainingJobs``)."""

    TrainingJobId: str
    TrainingJobName: str | None = None
    Status: str = ""
    ReasonCode: str | None = None
    ReasonMessage: str | None = None
    LatestMetrics: list[WireNameValue] = Field(default_factory=list)
    LatestProgress: WireProgress | None = None
    OutputChannels: list[WireChannel] = Field(default_factory=list)
    OutputModel: dict[str, Any] | None = None
    Labels: list[WireLabel] = Field(default_factory=list)
    Duration: float | None = None
    # ISO-8601, "%Y-%m-%dT%H:%M:%SZ" (docs/platforms/pai.md, "The list's time window")
    GmtCreateTime: UtcDateTime | None = None
    GmtModifiedTime: InformationalTime = None
    TrainingJobUrl: str | None = None
    StatusTransitions: list[dict[str, Any]] = Field(default_factory=list)


class WireList(_Wire):
    TrainingJobs: list[Any] = Field(default_factory=list)  # each row read on its own (Dialect.listed_jobs)
    TotalCount: int | str | None = None


class WireEvents(_Wire):
    Events: list[str] = Field(default_factory=list)


class WireMetrics(_Wire):
    Metrics: list[WireNameValue] = Field(default_factory=list)


# -- spec: the CreateTrainingJob body -----------------------------------------------------------------
class _AlgorithmSpec(_Wire):
    Image: str = Field(min_length=1)
    Command: list[str] = Field(min_length=1)
    JobType: str | None = None
    MetricDefinitions: list[dict[str, str]] | None = None
    SupportedChannelTypes: list[str] | None = None
    OutputChannels: list[dict[str, Any]] | None = None
    InputChannels: list[dict[str, Any]] | None = None
    HyperParameters: list[dict[str, Any]] | None = None
    CodeDir: dict[str, Any] | None = None


class _ComputeResource(_Wire):
    EcsSpec: str | None = Field(default=None, min_length=1)
    EcsCount: int | None = Field(default=None, ge=1)
    ResourceId: str | None = None
    InstanceType: str | None = None
    InstanceCount: int | None = Field(default=None, ge=1)
    InstanceSpec: dict[str, Any] | None = None
    UseSpotInstance: bool | None = None


class _HyperParameter(_Wire):
    Name: str = Field(min_length=1)
    Value: str


class _InputChannel(_Wire):
    Name: str = Field(min_length=1)
    InputUri: str | None = None
    DatasetId: str | None = None


class _OutputChannel(_Wire):
    Name: str = Field(min_length=1)
    OutputUri: str | None = None
    DatasetId: str | None = None


class _Label(_Wire):
    Key: str = Field(min_length=1, max_length=128)
    Value: str = Field(default="", max_length=256)


class _Scheduler(_Wire):
    MaxRunningTimeInSeconds: int | None = Field(default=None, ge=1)


def _name_value_list(value: Any) -> Any:
    return name_value_pairs(value, "Name", "Value")


class PaiJobSpec(_Wire):
    """A ``CreateTrainingJob`` body. ``WorkspaceId`` defaults to the connection's ``workspace_id``;
    ``TrainingJobName`` is optional (derived from the task-instance try, see :func:`job_name`)."""

    TrainingJobName: str | None = Field(default=None, min_length=1, max_length=MAX_NAME)
    WorkspaceId: str = Field(min_length=1)
    AlgorithmSpec: _AlgorithmSpec | None = None
    AlgorithmName: str | None = Field(default=None, min_length=1)
    AlgorithmProvider: str | None = Field(default=None, min_length=1)
    AlgorithmVersion: str | None = Field(default=None, min_length=1)
    ComputeResource: _ComputeResource
    HyperParameters: list[_HyperParameter] | None = None
    InputChannels: list[_InputChannel] | None = None
    OutputChannels: list[_OutputChannel] | None = None
    Scheduler: _Scheduler | None = None
    Labels: list[_Label] | None = None
    Environments: dict[str, str] | None = None
    TrainingJobDescription: str | None = None
    RoleArn: str | None = None
    UserVpc: dict[str, Any] | None = None
    Settings: dict[str, Any] | None = None
    ExperimentConfig: dict[str, Any] | None = None
    CodeDir: dict[str, Any] | None = None
    PythonRequirements: list[str] | None = None
    Priority: int | None = None
    CredentialConfig: dict[str, Any] | None = None
    AssignNodeSpec: dict[str, Any] | None = None

    _pairs = field_validator("HyperParameters", mode="before")(_name_value_list)

    @field_validator("TrainingJobName")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", value):
            raise ValueError("must start with a letter or digit and hold only letters, digits, '-' and '_'")
        return value


# -- names and labels ---------------------------------------------------------------------------------
def job_name(stem: str | None, tags: list[str]) -> str:
    """The ``TrainingJobName`` of a task-instance try (:func:`~.base.try_job_name`):
    ``<stem or af-<dag>-<task>>[-m<map index>]-<digest>-t<try>``, at most 64 characters of
    ``[A-Za-z0-9_-]`` starting with a letter or digit (``docs/platforms/pai.md``, "Job names").

    PAI identifies a job by the ``TrainingJobId`` it generates, and its documentation says nothing
    about names being unique; the digest of the task instance is there all the same, so that no two
    task instances (map indexes of one task, or two DAGs with the same stem) ever share a name if a
    workspace does refuse a duplicate. ``churn-20260101`` for map index 2, try 1 →
    ``churn-20260101-m2-<digest>-t1``."""
    return try_job_name(stem, tags, MAX_NAME)


def _channel_uri(channels: list[dict[str, Any]] | list[WireChannel], name: str) -> str | None:
    for channel in channels:
        data = channel if isinstance(channel, dict) else channel.model_dump()
        if data.get("Name") == name:
            return data.get("OutputUri")
    return None


# -- the dialect ---------------------------------------------------------------------------------------
class PaiDialect(Dialect):
    """PaiStudio training jobs (API 2022-01-12, ROA style, ACS3-HMAC-SHA256)."""

    name = "pai"
    spec_model = PaiJobSpec
    environment_field = "Environments"
    list_row_id = "TrainingJobId"
    capabilities = Capabilities(
        # a stop terminates the containers: SIGTERM, then SIGKILL after the grace period
        final_checkpoint_on_cancel=True,
        preserve_checkpoints_flag=False,
        events=True,
        events_in_job=False,
        list_jobs=True,
        checkpoints_in_job=True,
        metric_history=True,  # ListTrainingJobMetrics; PAI reports no cost
        program_logs=True,  # ListTrainingJobLogs
    )
    status_map = {
        "Creating": JobState.PENDING,
        "Created": JobState.QUEUED,
        "Submitted": JobState.QUEUED,
        "Queuing": JobState.QUEUED,
        "Initializing": JobState.STARTING,
        "Running": JobState.RUNNING,
        "Stopping": JobState.STOPPING,
        "Terminating": JobState.STOPPING,
        "Succeed": JobState.SUCCEEDED,
        "Succeeded": JobState.SUCCEEDED,
        "Failed": JobState.FAILED,
        "CreateFailed": JobState.FAILED,
        "InitializeFailed": JobState.FAILED,
        "Terminated": JobState.CANCELLED,
        "Stopped": JobState.CANCELLED,
    }

    # -- spec ---------------------------------------------------------------------------------------
    def spec_defaults(self, credentials: Credentials) -> dict[str, Any]:
        """``WorkspaceId`` from the connection (its ``workspace_id`` extra)."""
        return {"WorkspaceId": credentials.project} if credentials.project else {}

    def validate_spec(self, spec: dict[str, Any], allow_unknown_fields: bool = False) -> dict[str, Any]:
        if not (spec or {}).get("WorkspaceId"):
            raise InvalidJobSpecError(
                "WorkspaceId",
                "the PAI workspace is required: set it in the spec or the connection's workspace_id extra",
                self.name,
            )
        spec = super().validate_spec(spec, allow_unknown_fields)
        if not spec.get("AlgorithmSpec") and not (
            spec.get("AlgorithmName") and spec.get("AlgorithmProvider") and spec.get("AlgorithmVersion")
        ):
            raise InvalidJobSpecError(
                "AlgorithmSpec",
                "an AlgorithmSpec (Image and Command) or AlgorithmName, AlgorithmProvider and "
                "AlgorithmVersion are required",
                self.name,
            )
        resources = spec["ComputeResource"]
        if not (resources.get("EcsSpec") or resources.get("InstanceType") or resources.get("ResourceId")):
            raise InvalidJobSpecError(
                "ComputeResource.EcsSpec",
                "an instance type is required (EcsSpec, or InstanceType with a ResourceId)",
                self.name,
            )
        return spec

    storage_scheme = "oss"

    def compile_training(self, spec: PortableTrainingSpec, place: Placement) -> dict[str, Any]:
        """A ``CreateTrainingJob`` body with an ``AlgorithmSpec``: ``entry_point`` runs as
        ``python <entry_point> $PAI_USER_ARGS`` (the hyperparameters as ``--name value``, as the PAI
        Python SDK's estimator runs a script) from ``CodeDir``; ``command`` as given. The output is
        the ``model`` output channel, the checkpoints the ``checkpoints`` one. ``WorkspaceId``: the
        connection's ``workspace_id`` unless ``options.pai.WorkspaceId``. ``docs/portable-spec.md``."""
        display = "PAI"
        image = pick(
            spec.image, "image", self.name, display, "an image to run the job in (AlgorithmSpec.Image)"
        )
        if spec.entry_point is not None:
            for name, value in spec.hyperparameters.items():
                if any(c.isspace() or c in "'\"" for c in stringify(value)):  # $PAI_USER_ARGS splits on them
                    raise refuse(
                        f"hyperparameters.{name}",
                        display,
                        "its script gets them through $PAI_USER_ARGS, split on spaces with quotes kept: "
                        "a value with spaces or quotes would reach it in pieces",
                    )
            command = ["sh", "-c", f"python {shlex.quote(spec.entry_point)} $PAI_USER_ARGS"]
        else:
            command = list(spec.command or [])
        algorithm: dict[str, Any] = {"Image": image, "Command": command}
        if spec.metric_definitions:
            algorithm["MetricDefinitions"] = [
                {"Name": name, "Regex": regex} for name, regex in spec.metric_definitions.items()
            ]
        resources = spec.resources
        if resources.volume_size_gb is not None:
            raise refuse("resources.volume_size_gb", display, "the instance type (EcsSpec) sets the disk")
        body: dict[str, Any] = {
            "AlgorithmSpec": algorithm,
            "ComputeResource": {
                "EcsSpec": machine_type(resources, self.name, display),
                "EcsCount": resources.instance_count,
            },
            "OutputChannels": [{"Name": MODEL_CHANNEL, "OutputUri": place.uri(spec.output, "output")}],
        }
        if spec.name:
            body["TrainingJobName"] = spec.name
        if spec.source_dir is not None:
            bucket, key = bucket_key(place.code_uri())
            body["CodeDir"] = {"LocationType": "oss", "LocationValue": {"Bucket": bucket, "Key": key}}
        if spec.checkpoints:
            body["OutputChannels"].append(
                {"Name": CHECKPOINT_CHANNEL, "OutputUri": place.uri(spec.checkpoints, "checkpoints")}
            )
        if spec.inputs:
            body["InputChannels"] = [
                {"Name": channel, "InputUri": place.uri(location, f"inputs.{channel}")}
                for channel, location in spec.inputs.items()
            ]
        if spec.hyperparameters:
            body["HyperParameters"] = [
                {"Name": k, "Value": stringify(v)} for k, v in spec.hyperparameters.items()
            ]
        if spec.environment:
            body["Environments"] = dict(spec.environment)
        if spec.max_runtime:
            body["Scheduler"] = {"MaxRunningTimeInSeconds": spec.max_runtime}
        if spec.tags:
            body["Labels"] = [{"Key": k, "Value": v} for k, v in spec.tags.items()]
        merge_options(body, dict(spec.options.get(self.name) or {}), self.name)
        return body

    def with_tags(self, spec: dict[str, Any], tags: list[str]) -> dict[str, Any]:
        """``spec`` with the identity tags as job ``Labels`` and its name derived from them."""
        labels = with_tag_pairs(spec.get("Labels"), tags)
        return {**spec, "Labels": labels, "TrainingJobName": job_name(spec.get("TrainingJobName"), tags)}

    def resume_spec(self, spec: dict[str, Any], job_id: str, checkpoint: Checkpoint) -> dict[str, Any] | None:
        """``spec`` whose ``checkpoints`` output channel is the failed job's checkpoint location: the
        training script finds the checkpoints to resume from there."""
        if not checkpoint.path:
            return None
        others = [c for c in spec.get("OutputChannels") or [] if c.get("Name") != CHECKPOINT_CHANNEL]
        return {
            **spec,
            "OutputChannels": [*others, {"Name": CHECKPOINT_CHANNEL, "OutputUri": checkpoint.path}],
        }

    def training_data(self, spec: dict[str, Any]) -> list[str]:
        """Each input channel's ``InputUri`` (a dataset id as ``pai://datasets/<id>``)."""
        out = []
        for channel in spec.get("InputChannels") or []:
            if channel.get("InputUri"):
                out.append(channel["InputUri"])
            elif channel.get("DatasetId"):
                out.append(f"pai://datasets/{channel['DatasetId']}")
        return out

    # -- requests -----------------------------------------------------------------------------------
    @staticmethod
    def _call(
        action: str,
        method: str,
        path: str,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        idempotent: bool = True,
    ) -> ApiRequest:
        return ApiRequest(
            method, path, body=body, params=params, headers={"x-acs-action": action}, idempotent=idempotent
        )

    def create_request(self, spec: dict[str, Any]) -> ApiRequest:
        # not idempotent: PAI has no client token; a create that may have landed is found by its labels
        return self._call("CreateTrainingJob", "POST", PATH, body=spec, idempotent=False)

    def get_request(self, job_id: str) -> ApiRequest:
        return self._call("GetTrainingJob", "GET", f"{PATH}/{job_id}")

    def cancel_request(self, job_id: str, cancel: CancelRequest) -> ApiRequest:
        """``StopTrainingJob`` (``PUT …/stop``): no reason, checkpoint or grace options."""
        return self._call("StopTrainingJob", "PUT", f"{PATH}/{job_id}/stop")

    def list_request(self, tags: list[str], created_after: datetime | None = None) -> ApiRequest:
        """``ListTrainingJobs`` by ``Labels``, newest first (one page of 100: the jobs a re-attach
        or the reaper looks for are recent ones). ``StartTime`` (``created_after``, UTC) bounds the
        jobs' creation time: without it PAI lists only the jobs created in the last 7 days."""
        params: dict[str, Any] = {
            "PageSize": 100,
            "PageNumber": 1,
            "SortBy": "GmtCreateTime",
            "Order": "DESC",
        }
        if labels := tag_pairs(tags):
            params["Labels"] = json.dumps(labels, separators=(",", ":"), sort_keys=True)
        if created_after is not None:
            params["StartTime"] = pai_time(created_after)
        return self._call("ListTrainingJobs", "GET", PATH, params=params)

    def probe_request(self) -> ApiRequest:
        return self._call("ListTrainingJobs", "GET", PATH, params={"PageSize": 1, "PageNumber": 1})

    #: ``ListTrainingJobs`` takes no list of job ids: one request (and its pages) lists them all
    batch_size = 10_000
    #: a ``ListTrainingJobs`` row has no ``LatestMetrics``, ``Instances``, ``OutputModel`` or
    #: ``Duration`` (``GetTrainingJob`` has them): it only says whether a job changed
    batch_rows_complete = False

    def status_batch_request(
        self, job_ids: list[str], page: str | None = None, created_after: datetime | None = None
    ) -> ApiRequest:
        """``ListTrainingJobs``, which has no filter by a list of ids: the account's jobs created
        since ``created_after`` (``StartTime``, UTC; without it PAI lists the last 7 days), newest
        first (``SortBy=GmtCreateTime``, ``Order=DESC``: waiting jobs are recent ones),
        :data:`STATUS_PAGE_SIZE` a page, ``PageNumber`` = ``page`` (1 when ``None``); ``job_ids``
        are found in the answer."""
        params: dict[str, Any] = {
            "PageSize": STATUS_PAGE_SIZE,
            "PageNumber": int(page or 1),
            "SortBy": "GmtCreateTime",
            "Order": "DESC",
        }
        if created_after is not None:
            params["StartTime"] = pai_time(created_after)
        return self._call("ListTrainingJobs", "GET", PATH, params=params)

    def parse_status_batch(self, body: Any, page: str | None = None) -> StatusBatch:
        """The page's ``TrainingJobs`` rows (partial: :attr:`batch_rows_complete`); the next
        ``PageNumber`` while a page is full (the answer does not say which page it is)."""
        rows = WireList.model_validate(body or {}).TrainingJobs
        number = int(page or 1)
        return StatusBatch(
            self.listed_jobs(rows, quiet=True), str(number + 1) if len(rows) >= STATUS_PAGE_SIZE else None
        )

    def events_request(self, job_id: str) -> ApiRequest | None:
        return self._call(
            "ListTrainingJobEvents",
            "GET",
            f"{PATH}/{job_id}/events",
            params={"PageSize": 1000, "PageNumber": 1},
        )

    def logs_request(self, job: TrainingJob, cursor: str | None) -> ApiRequest:
        """``ListTrainingJobLogs`` (``GET …/{id}/logs``), the page of :data:`LOG_PAGE_SIZE` lines
        that holds the first line not read yet (the cursor: the number of lines read, as a string);
        no time window (from the job's start)."""
        read = int(cursor or 0)
        params = {"PageNumber": read // LOG_PAGE_SIZE + 1, "PageSize": LOG_PAGE_SIZE}
        return self._call("ListTrainingJobLogs", "GET", f"{PATH}/{job.id}/logs", params=params)

    def parse_logs(self, body: Any, cursor: str | None) -> LogPage:
        """``Logs`` (one line each) past the lines already read; ``more`` while the page is full.
        ``TRAINING_JOB_INSTANCE_NOT_FOUND`` (HTTP 404, before the job's instance started) is a
        "not found" (:meth:`classify_error`): no lines yet."""
        read = int(cursor or 0)
        logs = body["Logs"] if body.get("Logs") is not None else []
        if not isinstance(logs, list):
            raise TypeError("Logs is not a list")
        new = tuple(str(line).rstrip("\r\n") for line in logs[read % LOG_PAGE_SIZE :])
        return LogPage(new, str(read + len(new)), len(logs) == LOG_PAGE_SIZE)

    def metrics_request(self, job_id: str) -> ApiRequest | None:
        return self._call(
            "ListTrainingJobMetrics",
            "GET",
            f"{PATH}/{job_id}/metrics",
            params={"PageSize": 1000, "PageNumber": 1, "Order": "ASC"},
        )

    def authenticate(self, request: HttpRequest, credentials: Credentials) -> dict[str, str]:
        """ACS3-HMAC-SHA256 by Alibaba's signer (``alibabacloud_tea_openapi``) over the method, path,
        query, every header sent (``host``, ``accept``, ``content-type`` and the ``x-acs-*`` ones)
        and the body's SHA-256; keys from the Alibaba credential chain come through the token cache
        (:class:`AlibabaCredentialChain`)."""
        from alibabacloud_tea_openapi.utils import Utils  # extra [pai]

        key_id, secret, token = credentials.signing_keys()
        url = urlsplit(request.url)
        added = {
            "host": url.netloc,
            "x-acs-version": API_VERSION,
            "x-acs-date": request.timestamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "x-acs-signature-nonce": uuid.uuid4().hex,
            "x-acs-content-sha256": Utils.hex_encode(Utils.hash(request.body, SIGNATURE_ALGORITHM)),
        }
        if token:
            added["x-acs-accesskey-id"] = key_id or ""
            added["x-acs-security-token"] = token
        signed = _SigningView(
            request.method, url.path or "/", dict(parse_qsl(url.query)), {**request.headers, **added}
        )
        added["Authorization"] = Utils.get_authorization(
            signed, SIGNATURE_ALGORITHM, added["x-acs-content-sha256"], key_id or "", secret or ""
        )
        return added

    # -- responses ----------------------------------------------------------------------------------
    def parse_created(self, body: Any) -> TrainingJob:
        """The create answer holds only ``TrainingJobId``: the job is ``Creating`` now."""
        job_id = (body or {}).get("TrainingJobId")
        if not job_id:
            raise TrainingPlatformError("CreateTrainingJob answered without a TrainingJobId")
        return TrainingJob(id=job_id, platform=self.name, state=JobState.PENDING, raw_status="Creating")

    def parse_job(self, body: Any) -> TrainingJob:
        wire = WireJob.model_validate(body)
        state = self.map_status(wire.Status)
        reason = wire.ReasonCode or ""
        if state is JobState.CANCELLED and reason in _TIMED_OUT_REASONS:
            state = JobState.FAILED  # the platform's own time limit: a failure, not a cancel
        message = None
        if wire.ReasonMessage or (reason and state in (JobState.FAILED, JobState.CANCELLED)):
            message = (
                f"{reason}: {wire.ReasonMessage}"
                if reason and wire.ReasonMessage
                else (wire.ReasonMessage or reason)
            )
        metrics = {m.Name: m.Value for m in wire.LatestMetrics if m.Value is not None}
        progress = Progress()
        if wire.LatestProgress is not None:
            overall = wire.LatestProgress.OverallProgress
            remaining = wire.LatestProgress.RemainingTime
            progress = Progress(
                percent=overall.Value * 100 if overall and overall.Value is not None else None,
                eta_seconds=remaining.Value if remaining else None,
            )
        if state is JobState.SUCCEEDED:
            progress = progress.model_copy(update={"percent": 100.0, "eta_seconds": None})
        checkpoints, artifacts = [], {}
        if location := _channel_uri(wire.OutputChannels, CHECKPOINT_CHANNEL):
            checkpoints.append(Checkpoint(id=CHECKPOINT_CHANNEL, kind="location", path=location))
            artifacts[CHECKPOINT_CHANNEL] = location
        written, finals = local_final_checkpoint(body, location)  # the local platform's user code only
        # the files before the location: a retry resumes from the latest checkpoint, which must
        # stay the location (what the platform restores into the new job's checkpoint directory)
        checkpoints = finals + checkpoints
        if model := (wire.OutputModel or {}).get("Uri") or _channel_uri(wire.OutputChannels, MODEL_CHANNEL):
            artifacts["model"] = model
        return TrainingJob(
            id=wire.TrainingJobId,
            platform=self.name,
            state=state,
            raw_status=f"{wire.Status}/{reason}" if reason and state.is_terminal else wire.Status,
            name=wire.TrainingJobName,
            message=message,
            progress=progress,
            metrics=metrics,
            checkpoints=checkpoints,
            artifacts=artifacts,
            cost=Cost(
                billable_seconds=wire.Duration,
                total_usd=local_cost_usd(body),
            ),
            console_url=wire.TrainingJobUrl,
            final_checkpoint_written=written,
            tags=[
                f"{label.Key}:{label.Value}"
                for label in wire.Labels
                if label.Key.startswith(LABEL_KEY_PREFIX)
            ],
            created_at=wire.GmtCreateTime,
            started_at=_running_since(wire.StatusTransitions),
            updated_at=wire.GmtModifiedTime,
        )

    def parse_cancel(self, job_id: str, body: Any) -> CancelResult:
        """``StopTrainingJob`` answers only a ``RequestId``: the job is stopping now."""
        return CancelResult(job_id=job_id, state=JobState.STOPPING)

    def parse_list(self, body: Any) -> list[TrainingJob]:
        """``{"TrainingJobs": [job…]}`` (asked newest first) oldest first; a row that does not read
        as a job is left out (logged)."""
        return self.listed_jobs(WireList.model_validate(body or {}).TrainingJobs)[::-1]

    def parse_events(self, body: Any) -> list[JobEvent]:
        """``{"Events": ["<time> [<type>] <text>", ...]}`` oldest first; a line in another shape (or
        whose time does not read) is kept whole as the message of an ``event``."""
        events = []
        for line in WireEvents.model_validate(body or {}).Events:
            match = _EVENT_LINE.match(line.strip())
            if match is None:
                events.append(JobEvent(type="event", message=line))
                continue
            kind = match.group("type") or "event"
            level = "error" if re.search(r"fail|error", kind, re.IGNORECASE) else "info"
            try:
                at = parse_timestamp(match.group("at"))
            except ValueError:  # a prefix that only looks like a time: the line as it is
                events.append(JobEvent(type="event", message=line))
                continue
            events.append(JobEvent(type=kind, message=match.group("message"), level=level, created_at=at))
        return events

    def parse_metrics(self, body: Any) -> list[MetricPoint]:
        """``{"Metrics": [{"Name", "Timestamp", "Value"}]}`` grouped by timestamp (the instant, read
        by :func:`parse_timestamp`, whatever form each row writes it in), oldest first. A group with
        validation metrics is an ``epoch`` point; ``step`` and ``epoch`` values, when the job reports
        them as metrics, place the point. A ``Timestamp`` that is not a time makes the answer
        malformed, as a wrongly typed ``Value`` does."""
        groups: dict[datetime, dict[str, float]] = {}
        for metric in WireMetrics.model_validate(body or {}).Metrics:
            if metric.Value is not None:
                at = parse_timestamp(metric.Timestamp) if metric.Timestamp else _NO_TIME
                groups.setdefault(at, {})[metric.Name] = metric.Value
        points = []
        for index, (_at, values) in enumerate(sorted(groups.items(), key=lambda group: group[0])):
            step = values.pop("step", None)
            epoch = values.pop("epoch", None)
            kind = "epoch" if any(name.startswith("validation") for name in values) else "train"
            points.append(
                MetricPoint(
                    step=int(step) if step is not None else index, kind=kind, epoch=epoch, values=values
                )
            )
        return points

    def decisive_event(self, events: list[JobEvent]) -> JobEvent | None:
        return super().decisive_event(events)

    def error_fields(self, body: Any) -> tuple[str | None, str | None, str | None]:
        if not isinstance(body, dict):
            return None, None, None
        return (
            body.get("Code") or body.get("code"),
            body.get("Message") or body.get("message"),
            body.get("RequestId") or body.get("requestId"),
        )

    def classify_error(
        self, status: int, headers: Mapping[str, str], body: Any, text: str = ""
    ) -> TrainingPlatformError:
        """By ``Code`` first, then the status: throttling (a ``Throttling*`` code, HTTP 429 or a
        positive ``x-acs-retry-after``, in milliseconds) and 5xx are transient; signature and key
        errors are auth; ``*NotExist*``/``*NotFound*`` (or 404) a missing job; a stop refused for
        the job's status a state conflict."""
        code, message, request_id = self.error_fields(body)
        message = message or text[:500] or f"HTTP {status}"
        kw: dict[str, Any] = {"status": status, "code": code, "request_id": request_id}
        retry_after = _retry_after(headers)
        if retry_after is not None or status == 429 or (code or "").startswith("Throttling"):
            return TransientPlatformError(message, retry_after=retry_after, sent=False, **kw)
        if status >= 500:
            return TransientPlatformError(message, sent=status != 503, **kw)
        if status in (401, 403) or _AUTH_CODES.match(code or ""):
            return PlatformAuthError(message, **kw)
        if status == 404 or _NOT_FOUND_CODES.search(code or ""):
            return JobNotFoundError(message, **kw)
        if status == 409 or _CONFLICT_CODES.search(code or ""):
            return JobStateConflictError(message, **kw)
        return TrainingPlatformError(message, **kw)

    def console_url(self, base_url: str, job_id: str) -> str | None:
        match = re.search(r"pai\.([a-z0-9-]+)\.(?:aliyuncs\.com|data\.aliyun\.com)", base_url)
        if match is None:  # an endpoint override (e.g. the local training platform): no console
            return None
        region = match.group(1)
        return f"https://pai.console.aliyun.com/?regionId={region}#/training/jobs/{job_id}"


@dataclass(frozen=True)
class _SigningView:
    """The request as Alibaba's signer reads it (``pathname``, ``query``, ``headers``, ``method``)."""

    method: str
    pathname: str
    query: dict[str, str]
    headers: dict[str, str]


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait: Alibaba's ``x-acs-retry-after`` (milliseconds), else a standard ``Retry-After``."""
    raw = headers.get("x-acs-retry-after") or headers.get("X-Acs-Retry-After")
    if not raw:
        return retry_after_seconds(headers)
    try:
        millis = int(raw)
    except ValueError:
        return None
    return millis / 1000 if millis > 0 else None


# -- the platform: a `pai` connection --------------------------------------------------------------------
@dataclass(frozen=True)
class PaiPlatformDescriptor(PlatformDescriptor):
    """The ``pai`` connection: AccessKey id (login) and secret (password), ``region``,
    ``workspace_id`` and an optional STS ``security_token`` in the extras; the host overrides the
    endpoint (the local training platform). Without an AccessKey in the connection, the Alibaba
    credential chain (``alibabacloud-credentials``: environment variables, the ECS RAM role, OIDC)
    provides one, refreshed when it expires."""

    def connect(self, conn: Any) -> ConnectionParts:
        try:
            import alibabacloud_tea_openapi.utils  # noqa: F401 - Alibaba's ACS3 signer
        except ImportError:  # pragma: no cover - depends on the installed extras
            raise ValueError(
                f"Connection {conn.conn_id!r} is a PAI connection: install Alibaba's signer "
                "(pip install 'airflow-training-provider[pai]')"
            ) from None
        credentials = self.read_credentials(conn)
        region = credentials.region or DEFAULT_REGION
        source = None
        if not (credentials.access_key_id and credentials.secret_access_key):
            source = _credential_chain(conn.conn_id, self.display_name)
        credentials = replace(credentials, region=region, source=source)
        base_url = base_url_of(conn.host, conn.schema, conn.port, endpoint_of(region))
        return ConnectionParts(
            credentials, base_url, self.transport_extra(conn), api_rates=self.rates_of(conn, base_url)
        )

    def default_url(self, credentials: Credentials) -> str:
        return endpoint_of(credentials.region or DEFAULT_REGION)


class AlibabaCredentialChain(SelfRefreshingSource):
    """The keys of Alibaba's default credential chain (``alibabacloud_credentials.client.Client``:
    environment variables, ``~/.aliyun``, OIDC, the ECS RAM role) as a credential source.

    The client refreshes temporary keys itself before their last 15 minutes and does not tell their
    expiry: the keys are held 300 s and the client asked again after 150 s
    (:class:`~airflow_training_provider.platforms.credentials.SelfRefreshingSource`). The chain reads
    the process's environment, not the connection: every connection without an AccessKey shares
    one held value.

    :param client: the credential client.
    """

    def __init__(self, client: Any) -> None:
        super().__init__("alibaba:default-credential-chain")
        self._client = client

    def current(self) -> SigningKeys:
        current = self._client.get_credential()
        return SigningKeys(current.access_key_id, current.access_key_secret, current.security_token)


def _credential_chain(conn_id: str, display_name: str) -> AlibabaCredentialChain:
    """Alibaba's default credential provider, or a :class:`PlatformAuthError` naming the fields."""
    hint = (
        f"Connection {conn_id!r} ({display_name}) has no AccessKey: set its login (AccessKey ID) and "
        "password (AccessKey secret), or the ALIBABA_CLOUD_ACCESS_KEY_ID/_SECRET environment variables "
        "or an ECS RAM role"
    )
    try:
        from alibabacloud_credentials.client import Client
    except ImportError:  # pragma: no cover - depends on the installed extras
        raise PlatformAuthError(
            hint + " (the credential chain needs: pip install 'airflow-training-provider[pai]')"
        ) from None
    try:
        client = Client()
        client.get_credential()  # fail now, with our message, when the chain finds nothing
    except Exception as exc:  # noqa: BLE001 - the chain raises several kinds when it finds nothing
        raise PlatformAuthError(f"{hint} ({exc.__class__.__name__})") from None
    return AlibabaCredentialChain(client)


PLATFORM = PaiPlatformDescriptor(
    conn_type="pai",
    display_name="Alibaba Cloud PAI",
    class_name="Pai",
    dialect=PaiDialect,
    default_base_url="https://pai.{region}.aliyuncs.com",
    docs_url="https://www.alibabacloud.com/help/en/pai/developer-reference/api-paistudio-2022-01-12-createtrainingjob",
    credentials={
        "access_key_id": "login",
        "secret_access_key": "password",
        "session_token": "extra.security_token",
        "region": "extra.region",
        "project": "extra.workspace_id",
    },
    required_credentials=(),
    labels={
        "access_key_id": "AccessKey ID",
        "secret_access_key": "AccessKey secret",
        "session_token": "STS security token (optional)",
        "region": "Region (e.g. cn-hangzhou)",
        "project": "Workspace ID",
        "host": "Endpoint override (optional)",
    },
    placeholders={
        "region": "cn-hangzhou",
        "project": "the PAI workspace jobs run in (a spec's WorkspaceId wins)",
        "host": "https://pai.<region>.aliyuncs.com",
    },
)


def _running_since(transitions: list[dict[str, Any]]) -> datetime | None:
    """When the job started training: the ``StartTime`` of its first ``Running`` status transition
    (GetTrainingJob ``StatusTransitions``), or ``None`` before it runs (no such transition, or its
    ``StartTime`` empty) and where that ``StartTime`` is not a time (:func:`parse_timestamp`): an
    informational field never blocks the job's answer (its state and result); the guards then
    count from the first poll that saw the job running."""
    for transition in transitions:
        if transition.get("Status") == "Running" and transition.get("StartTime"):
            return informational_time(transition["StartTime"])
    return None
