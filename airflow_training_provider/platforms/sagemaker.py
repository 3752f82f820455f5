"""AWS SageMaker training jobs: descriptor and dialect (``docs/platforms/sagemaker.md``).

SageMaker speaks awsJson 1.1: every operation is ``POST /`` with ``X-Amz-Target: SageMaker.<Op>``
and a JSON body, signed with AWS Signature Version 4 (botocore's own signer). Timestamps are epoch
seconds; errors are HTTP 4xx/5xx with ``{"__type": code, "Message": text}`` — throttling and "not
found" are HTTP 400, so :meth:`SageMakerDialect.classify_error` reads the code, not the status.

The connection is Airflow's ``aws`` connection (apache-airflow-providers-amazon): access keys,
session token, ``role_arn``, profile, environment and instance credentials, ``region_name``, and
``endpoint_url`` in the extras (how the local training platform is reached). Credentials come from
the Amazon provider's session factory and are refreshed by botocore when they expire; the dialect
asks for them through the token cache (:class:`BotocoreCredentials`).

Idempotent submit: SageMaker has no client token and names are unique per account and region, so
the job name is derived from the task-instance try (:func:`job_name`): re-sending a create that
may have landed answers ``ResourceInUse`` for our own job, which the lifecycle reads as "already
created, attach to it". Identity tags become SageMaker tags (``airflow-dag:x`` → Key
``airflow-dag``, Value ``x``); jobs are found by tag with ``Search`` (``ListTrainingJobs`` cannot
filter by tag).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import Field, field_validator

from airflow_training_provider.errors import (
    InvalidJobSpecError,
    JobAlreadyExistsError,
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
    retry_after_seconds,
    tag_pairs,
    try_job_name,
    with_tag_pairs,
)
from airflow_training_provider.platforms.credentials import (
    Expiring,
    SelfRefreshingSource,
    SigningKeys,
    secret_digest,
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
from airflow_training_provider.timestamps import InformationalTime, UtcDateTime

TARGET_PREFIX = "SageMaker."
CONTENT_TYPE = "application/x-amz-json-1.1"
SIGNING_NAME = "sagemaker"
#: CloudWatch Logs, where a training job's program output is (``docs/platforms/sagemaker.md``, "Program logs")
LOGS_SERVICE = "logs"
LOGS_TARGET_PREFIX = "Logs_20140328."
LOG_GROUP = "/aws/sagemaker/TrainingJobs"
#: ``GetLogEvents`` ``limit`` (1–10,000; a page holds at most 1 MB either way)
LOG_EVENTS_PER_PAGE = 1000
NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
MAX_NAME = 63
#: Search ``Filter.Value`` is at most 1,024 characters; a ``SearchExpression`` holds at most 20
#: sub-expressions (Search API reference)
SEARCH_VALUE_LIMIT = 1024
SEARCH_MAX_SUBEXPRESSIONS = 20
TAG_KEY_PREFIX = "airflow-"
#: a portable spec's defaults where SageMaker requires a value: the SageMaker Python SDK's (GB, seconds)
DEFAULT_VOLUME_GB = 30
DEFAULT_MAX_RUNTIME = 24 * 3600
#: a portable spec's ``resources.accelerator`` (GPU model, GPUs per machine) → the smallest
#: SageMaker training instance with exactly that (AWS "Amazon SageMaker AI pricing", instance specs)
GPU_INSTANCE_TYPES = {
    ("T4", 1): "ml.g4dn.xlarge",
    ("T4", 4): "ml.g4dn.12xlarge",
    ("A10G", 1): "ml.g5.xlarge",
    ("A10G", 4): "ml.g5.12xlarge",
    ("A10G", 8): "ml.g5.48xlarge",
    ("L4", 1): "ml.g6.xlarge",
    ("L4", 4): "ml.g6.12xlarge",
    ("L4", 8): "ml.g6.48xlarge",
    ("L40S", 1): "ml.g6e.xlarge",
    ("L40S", 4): "ml.g6e.12xlarge",
    ("L40S", 8): "ml.g6e.48xlarge",
    ("V100", 1): "ml.p3.2xlarge",
    ("V100", 4): "ml.p3.8xlarge",
    ("V100", 8): "ml.p3.16xlarge",
    ("A100", 8): "ml.p4d.24xlarge",
    ("H100", 8): "ml.p5.48xlarge",
}

#: secondary statuses of an ``InProgress`` job that are still provisioning, not training.
_STARTING = frozenset(
    {
        "Starting",
        "Pending",
        "LaunchingMLInstances",
        "PreparingTrainingStack",
        "Downloading",
        "DownloadingTrainingImage",
    }
)
#: secondary statuses of a ``Stopped`` job that mean it ran out of time (a failure, not a cancel).
_TIMED_OUT = frozenset({"MaxRuntimeExceeded", "MaxWaitTimeExceeded"})

_THROTTLING = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ProvisionedThroughputExceededException",
        "SlowDown",
    }
)
_UNAVAILABLE = frozenset({"InternalFailure", "InternalServerError", "ServiceUnavailable", "InternalError"})
_AUTH = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "MissingAuthenticationToken",
        "InvalidClientTokenId",
        "ExpiredTokenException",
        "ExpiredToken",
        "AccessDeniedException",
        "AccessDenied",
    }
)
_NOT_FOUND_TEXT = re.compile(r"not found|could not find|does not exist", re.IGNORECASE)
_IN_STATUS_TEXT = re.compile(r"is in status|already|not in progress|cannot be stopped", re.IGNORECASE)


# -- wire models: DescribeTrainingJob / Search (docs/platforms/sagemaker.md) --------------------------
_Wire = WireModel


class WireTransition(_Wire):
    Status: str
    StartTime: InformationalTime = None
    EndTime: float | None = None
    StatusMessage: str | None = None


class WireMetric(_Wire):
    MetricName: str
    Value: float | None = None  # null: no value (left out of the metrics)
    Timestamp: float | None = None


class WireTag(_Wire):
    Key: str
    Value: str = ""


class WireJob(_Wire):
    """``DescribeTrainingJob`` answer (also a ``Search`` result's ``TrainingJob``)."""

    TrainingJobName: str
    TrainingJobArn: str | None = None
    TrainingJobStatus: str
    SecondaryStatus: str | None = None
    FailureReason: str | None = None
    ModelArtifacts: dict[str, Any] | None = None
    CheckpointConfig: dict[str, Any] | None = None
    ResourceConfig: dict[str, Any] | None = None
    HyperParameters: dict[str, str] | None = None
    StoppingCondition: dict[str, Any] | None = None
    # epoch seconds, boto's floats (docs/platforms/sagemaker.md, "The job (`DescribeTrainingJob`)")
    CreationTime: UtcDateTime | None = None
    TrainingStartTime: InformationalTime = None
    TrainingEndTime: float | None = None
    LastModifiedTime: InformationalTime = None
    SecondaryStatusTransitions: list[WireTransition] = Field(default_factory=list)
    FinalMetricDataList: list[WireMetric] = Field(default_factory=list)
    TrainingTimeInSeconds: float | None = None
    BillableTimeInSeconds: float | None = None
    Tags: list[WireTag] = Field(default_factory=list)


class WireSearch(_Wire):
    Results: list[Any] = Field(default_factory=list)  # each row read on its own (Dialect.listed_jobs)
    NextToken: str | None = None


# -- spec: the CreateTrainingJob request ------------------------------------------------------------
def _string_map(value: Any) -> Any:
    """HyperParameters / Environment are string → string on the wire: numbers are written as strings."""
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if isinstance(item, bool):
            raise ValueError(
                f"value of {key!r} must be a string (SageMaker passes it to the container as text)"
            )
        out[key] = str(item) if isinstance(item, int | float) else item
    return out


class _AlgorithmSpecification(_Wire):
    TrainingInputMode: Literal["Pipe", "File", "FastFile"] = "File"
    TrainingImage: str | None = Field(default=None, min_length=1)
    AlgorithmName: str | None = Field(default=None, min_length=1)
    MetricDefinitions: list[dict[str, str]] | None = None
    EnableSageMakerMetricsTimeSeries: bool | None = None
    ContainerEntrypoint: list[str] | None = None
    ContainerArguments: list[str] | None = None
    TrainingImageConfig: dict[str, Any] | None = None


class _ResourceConfig(_Wire):
    InstanceType: str | None = Field(default=None, pattern=r"^ml\.[a-z0-9]+\.[a-z0-9]+$")
    InstanceCount: int | None = Field(default=None, ge=1)
    VolumeSizeInGB: int = Field(ge=1)
    VolumeKmsKeyId: str | None = None
    KeepAlivePeriodInSeconds: int | None = None
    InstanceGroups: list[dict[str, Any]] | None = None
    TrainingPlanArn: str | None = None
    InstancePlacementConfig: dict[str, Any] | None = None


class _OutputDataConfig(_Wire):
    S3OutputPath: str = Field(pattern=r"^(https|s3)://")
    KmsKeyId: str | None = None
    CompressionType: str | None = None


class _StoppingCondition(_Wire):
    MaxRuntimeInSeconds: int | None = Field(default=None, ge=1, le=28 * 24 * 3600)
    MaxWaitTimeInSeconds: int | None = Field(default=None, ge=1)
    MaxPendingTimeInSeconds: int | None = Field(default=None, ge=1)


class _CheckpointConfig(_Wire):
    S3Uri: str = Field(pattern=r"^(https|s3)://")
    LocalPath: str | None = None


class _Tag(_Wire):
    Key: str = Field(min_length=1, max_length=128)
    Value: str = Field(default="", max_length=256)


class SageMakerJobSpec(_Wire):
    """A ``CreateTrainingJob`` body. ``TrainingJobName`` is optional: the provider derives the name
    (see :func:`job_name`); a given one is the name's stem."""

    TrainingJobName: str | None = Field(default=None, min_length=1, max_length=MAX_NAME)
    AlgorithmSpecification: _AlgorithmSpecification
    RoleArn: str = Field(pattern=r"^arn:aws[a-z\-]*:iam::\d{12}:role/")
    OutputDataConfig: _OutputDataConfig
    ResourceConfig: _ResourceConfig
    StoppingCondition: _StoppingCondition
    InputDataConfig: list[dict[str, Any]] | None = None
    HyperParameters: dict[str, str] | None = None
    Environment: dict[str, str] | None = None
    CheckpointConfig: _CheckpointConfig | None = None
    Tags: list[_Tag] | None = None
    VpcConfig: dict[str, Any] | None = None
    EnableNetworkIsolation: bool | None = None
    EnableInterContainerTrafficEncryption: bool | None = None
    EnableManagedSpotTraining: bool | None = None
    DebugHookConfig: dict[str, Any] | None = None
    DebugRuleConfigurations: list[dict[str, Any]] | None = None
    TensorBoardOutputConfig: dict[str, Any] | None = None
    ExperimentConfig: dict[str, Any] | None = None
    ProfilerConfig: dict[str, Any] | None = None
    ProfilerRuleConfigurations: list[dict[str, Any]] | None = None
    RetryStrategy: dict[str, Any] | None = None
    RemoteDebugConfig: dict[str, Any] | None = None
    InfraCheckConfig: dict[str, Any] | None = None
    SessionChainingConfig: dict[str, Any] | None = None

    _strings = field_validator("HyperParameters", "Environment", mode="before")(_string_map)

    @field_validator("TrainingJobName")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not NAME_PATTERN.match(value):
            raise ValueError("must match [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}: letters, digits and hyphens")
        return value


# -- names and tags ---------------------------------------------------------------------------------
def job_name(stem: str | None, tags: list[str]) -> str:
    """The ``TrainingJobName`` of a task-instance try (:func:`~.base.try_job_name`), the same every
    time it is computed for that try: ``<stem or af-<dag>-<task>>[-m<map index>]-<digest>-t<try>``,
    at most 63 characters of ``[a-zA-Z0-9-]`` (``docs/platforms/sagemaker.md``, "Job names").

    The digest (10 hex characters of the task instance: deployment, DAG, run, task, map index) is
    always there: SageMaker names are unique per account and region for good (a name stays taken
    until the job is deleted), so a stem that does not change between runs (``churn``) or that
    renders the same in two DAGs or two runs of one date (``churn-{{ ds_nodash }}``) must still give
    every task instance its own name. ``churn-20260101`` for map index 2, try 1 →
    ``churn-20260101-m2-<digest>-t1``."""
    return try_job_name(stem, tags, MAX_NAME, separators="-")


def _error_code(body: Any) -> tuple[str | None, str | None]:
    if not isinstance(body, dict):
        return None, None
    code = body.get("__type") or body.get("code") or body.get("Code")
    if isinstance(code, str):
        code = code.rsplit("#", 1)[-1].split(":", 1)[0]
    message = body.get("Message") or body.get("message")
    return code, message


# -- the dialect ------------------------------------------------------------------------------------
class SageMakerDialect(Dialect):
    """SageMaker training jobs (API version 2017-07-24, awsJson 1.1)."""

    name = "sagemaker"
    spec_model = SageMakerJobSpec
    environment_field = "Environment"
    list_row_id = "TrainingJob.TrainingJobName"
    capabilities = Capabilities(
        # a stop always sends SIGTERM and waits up to 120 s for the algorithm to save its state
        final_checkpoint_on_cancel=True,
        preserve_checkpoints_flag=False,
        events=True,
        events_in_job=True,
        list_jobs=True,
        checkpoints_in_job=True,
        program_logs=True,
    )
    status_map = {
        "InProgress": JobState.RUNNING,
        "Completed": JobState.SUCCEEDED,
        "Failed": JobState.FAILED,
        "Stopping": JobState.STOPPING,
        "Stopped": JobState.CANCELLED,
        "Deleting": JobState.FAILED,  # gone: whatever it was, it ended without a result to use
    }

    # -- spec ---------------------------------------------------------------------------------
    def validate_spec(self, spec: dict[str, Any], allow_unknown_fields: bool = False) -> dict[str, Any]:
        spec = super().validate_spec(spec, allow_unknown_fields)
        algorithm = spec["AlgorithmSpecification"]
        if not (algorithm.get("TrainingImage") or algorithm.get("AlgorithmName")):
            raise InvalidJobSpecError(
                "AlgorithmSpecification.TrainingImage",
                "a training image or an AlgorithmName is required",
                self.name,
            )
        algorithm.setdefault("TrainingInputMode", "File")  # required by the API
        return spec

    storage_scheme = "s3"
    code_packed = True  # script mode downloads and unpacks one sourcedir.tar.gz

    def compile_training(self, spec: PortableTrainingSpec, place: Placement) -> dict[str, Any]:
        """A ``CreateTrainingJob`` body: script mode (``entry_point``: the framework image runs it
        from ``sourcedir.tar.gz``, named by the ``sagemaker_program`` and
        ``sagemaker_submit_directory`` hyperparameters, every hyperparameter JSON-encoded as the
        SageMaker Python SDK sends them) or the image's own program (``command`` →
        ``ContainerEntrypoint``). ``docs/portable-spec.md`` has the table."""
        display = "SageMaker"
        image = pick(
            spec.image, "image", self.name, display, "a training image (a framework image for entry_point)"
        )
        algorithm: dict[str, Any] = {"TrainingImage": image}  # TrainingInputMode: File unless options say
        hyperparameters: dict[str, str] = {}
        if spec.entry_point is not None:
            code = f"{place.code_uri()}sourcedir.tar.gz"
            hyperparameters = {"sagemaker_program": json.dumps(spec.entry_point)}
            hyperparameters["sagemaker_submit_directory"] = json.dumps(code)
            hyperparameters.update({k: json.dumps(v) for k, v in spec.hyperparameters.items()})
        else:
            if spec.source_dir is not None:
                raise refuse(
                    "source_dir", display, "it runs a source directory only in script mode (entry_point)"
                )
            algorithm["ContainerEntrypoint"] = list(spec.command or [])
            hyperparameters = {k: stringify(v) for k, v in spec.hyperparameters.items()}
        if spec.metric_definitions:
            algorithm["MetricDefinitions"] = [
                {"Name": name, "Regex": regex} for name, regex in spec.metric_definitions.items()
            ]
        resources = spec.resources
        body: dict[str, Any] = {
            "AlgorithmSpecification": algorithm,
            "OutputDataConfig": {"S3OutputPath": place.uri(spec.output, "output")},
            "ResourceConfig": {
                "InstanceType": machine_type(resources, self.name, display, GPU_INSTANCE_TYPES),
                "InstanceCount": resources.instance_count,
                "VolumeSizeInGB": resources.volume_size_gb or DEFAULT_VOLUME_GB,
            },
            "StoppingCondition": {"MaxRuntimeInSeconds": spec.max_runtime or DEFAULT_MAX_RUNTIME},
        }
        if spec.name:
            body["TrainingJobName"] = spec.name
        if spec.inputs:
            body["InputDataConfig"] = [
                {
                    "ChannelName": channel,
                    "DataSource": {
                        "S3DataSource": {
                            "S3DataType": "S3Prefix",
                            "S3Uri": place.uri(location, f"inputs.{channel}"),
                            "S3DataDistributionType": "FullyReplicated",
                        }
                    },
                }
                for channel, location in spec.inputs.items()
            ]
        if spec.checkpoints:
            body["CheckpointConfig"] = {"S3Uri": place.uri(spec.checkpoints, "checkpoints")}
        if hyperparameters:
            body["HyperParameters"] = hyperparameters
        if spec.environment:
            body["Environment"] = dict(spec.environment)
        if spec.tags:
            body["Tags"] = [{"Key": k, "Value": v} for k, v in spec.tags.items()]
        options = dict(spec.options.get(self.name) or {})
        merge_options(body, options, self.name)
        if "RoleArn" not in body:
            raise PortableSpecError(
                f"options.{self.name}.RoleArn",
                "SageMaker runs a job as an IAM role: give its ARN (arn:aws:iam::<account>:role/<name>)",
                display,
            )
        return body

    def with_tags(self, spec: dict[str, Any], tags: list[str]) -> dict[str, Any]:
        """``spec`` with the identity tags as SageMaker tags and its name derived from them."""
        tagged = {**spec, "Tags": with_tag_pairs(spec.get("Tags"), tags)}
        tagged["TrainingJobName"] = job_name(spec.get("TrainingJobName"), tags)
        return tagged

    def resume_spec(self, spec: dict[str, Any], job_id: str, checkpoint: Checkpoint) -> dict[str, Any] | None:
        """``spec`` whose ``CheckpointConfig.S3Uri`` is the failed job's checkpoint location: SageMaker
        restores what is there into the container's checkpoint directory before training starts."""
        if not checkpoint.path:
            return None
        config = {**(spec.get("CheckpointConfig") or {}), "S3Uri": checkpoint.path}
        return {**spec, "CheckpointConfig": config}

    def created_job_id(self, spec: dict[str, Any]) -> str | None:
        return spec.get("TrainingJobName")

    # -- requests -----------------------------------------------------------------------------
    @staticmethod
    def _op(operation: str, body: dict[str, Any], idempotent: bool = True) -> ApiRequest:
        return ApiRequest(
            "POST",
            "/",
            body=body,
            headers={"X-Amz-Target": TARGET_PREFIX + operation},
            content_type=CONTENT_TYPE,
            idempotent=idempotent,
        )

    def training_data(self, spec: dict[str, Any]) -> list[str]:
        """Each input channel's ``S3Uri``."""
        uris = [
            ((c.get("DataSource") or {}).get("S3DataSource") or {}).get("S3Uri")
            for c in spec.get("InputDataConfig") or []
        ]
        return [u for u in uris if u]

    def create_request(self, spec: dict[str, Any]) -> ApiRequest:
        # the name is deterministic: a create that may have landed can be re-sent (ResourceInUse = ours)
        return self._op("CreateTrainingJob", spec)

    def get_request(self, job_id: str) -> ApiRequest:
        return self._op("DescribeTrainingJob", {"TrainingJobName": job_id})

    def cancel_request(self, job_id: str, cancel: CancelRequest) -> ApiRequest:
        """``StopTrainingJob``: no options — SageMaker always sends SIGTERM and waits up to 120 s."""
        return self._op("StopTrainingJob", {"TrainingJobName": job_id})

    def list_request(self, tags: list[str], created_after: datetime | None = None) -> ApiRequest:
        """``Search`` (Resource ``TrainingJob``) by tag, oldest first: every job, whatever its age
        (``created_after`` is not needed). Without tags, no ``SearchExpression``: its ``Filters``
        must hold at least one filter (Search API reference, ``SearchExpression``)."""
        filters = [
            {"Name": f"Tags.{k}", "Operator": "Equals", "Value": v} for k, v in tag_pairs(tags).items()
        ]
        body: dict[str, Any] = {
            "Resource": "TrainingJob",
            "SortBy": "CreationTime",
            "SortOrder": "Ascending",
            "MaxResults": 100,
        }
        if filters:
            body["SearchExpression"] = {"Filters": filters, "Operator": "And"}
        return self._op("Search", body)

    #: ``Search`` answers up to 100 records a page (``MaxResults``)
    batch_size = 100
    #: a ``Search`` record is the whole ``TrainingJob``, as ``DescribeTrainingJob`` answers it
    batch_rows_complete = True

    def status_batch_request(
        self, job_ids: list[str], page: str | None = None, created_after: datetime | None = None
    ) -> ApiRequest:
        """``Search`` (Resource ``TrainingJob``) for the jobs named ``job_ids``: ``TrainingJobName``
        ``In`` filters of at most 1,024 characters each (a filter value's limit), ORed as
        sub-expressions (at most 20), ``MaxResults`` 100, ``NextToken`` = ``page`` (Search API
        reference, ``SearchExpression``, ``Filter``)."""
        groups: list[list[str]] = [[]]
        for name in job_ids:
            if groups[-1] and len(",".join([*groups[-1], name])) > SEARCH_VALUE_LIMIT:
                groups.append([])
            groups[-1].append(name)
        expression = {
            "SubExpressions": [
                {"Filters": [{"Name": "TrainingJobName", "Operator": "In", "Value": ",".join(g)}]}
                for g in groups[:SEARCH_MAX_SUBEXPRESSIONS]
            ],
            "Operator": "Or",
        }
        body: dict[str, Any] = {"Resource": "TrainingJob", "SearchExpression": expression, "MaxResults": 100}
        if page:
            body["NextToken"] = page
        return self._op("Search", body)

    def parse_status_batch(self, body: Any, page: str | None = None) -> StatusBatch:
        """The ``Search`` page's ``TrainingJob`` records and its ``NextToken``."""
        wire = WireSearch.model_validate(body or {})
        return StatusBatch(self.listed_jobs(wire.Results, self._search_row), wire.NextToken or None)

    def tagged_job_request(self, job_id: str) -> ApiRequest:
        """``DescribeTrainingJob`` has no tags; ``Search`` by name returns the job with them."""
        filters = [{"Name": "TrainingJobName", "Operator": "Equals", "Value": job_id}]
        return self._op(
            "Search", {"Resource": "TrainingJob", "SearchExpression": {"Filters": filters}, "MaxResults": 1}
        )

    def logs_request(self, job: TrainingJob, cursor: str | None) -> ApiRequest:
        """CloudWatch Logs (service ``logs``, awsJson 1.1, ``X-Amz-Target: Logs_20140328.<Op>``) in
        the group ``/aws/sagemaker/TrainingJobs``: without a stream yet, ``DescribeLogStreams``
        (``logStreamNamePrefix=<job>/``, by name: ``<job>/algo-1-…``, the first host's, comes first);
        then ``GetLogEvents(startFromHead=True)`` on that stream, from the cursor's
        ``nextForwardToken`` on. Only the first host's stream is read.

        :param cursor: ``None``, or ``{"stream": name, "token": nextForwardToken | null}`` as JSON
            (:meth:`parse_logs`)."""
        if cursor is None:
            body: dict[str, Any] = {
                "logGroupName": LOG_GROUP,
                "logStreamNamePrefix": f"{job.id}/",
                "orderBy": "LogStreamName",
                "limit": 1,
            }
            return self._logs_op("DescribeLogStreams", body)
        at = json.loads(cursor)
        body = {
            "logGroupName": LOG_GROUP,
            "logStreamName": at["stream"],
            "startFromHead": True,
            "limit": LOG_EVENTS_PER_PAGE,
        }
        if at.get("token"):
            body["nextToken"] = at["token"]
        return self._logs_op("GetLogEvents", body)

    @staticmethod
    def _logs_op(operation: str, body: dict[str, Any]) -> ApiRequest:
        return ApiRequest(
            "POST",
            "/",
            body=body,
            headers={"X-Amz-Target": LOGS_TARGET_PREFIX + operation},
            content_type=CONTENT_TYPE,
            service=LOGS_SERVICE,
        )

    def parse_logs(self, body: Any, cursor: str | None) -> LogPage:
        """A ``DescribeLogStreams`` answer (``cursor`` ``None``): the job's stream, once it exists
        (no lines yet, ``more``: its events are read next); a ``GetLogEvents`` answer: each event's
        ``message`` a line, the cursor at its ``nextForwardToken``. CloudWatch answers the token it
        was sent at the end of a stream: ``more`` is false then, and after an empty page."""
        if cursor is None:
            streams = body["logStreams"]
            if not isinstance(streams, list):
                raise TypeError("logStreams is not a list")
            if not streams:  # the job has not started writing yet
                return LogPage((), None, False)
            return LogPage((), json.dumps({"stream": streams[0]["logStreamName"], "token": None}), True)
        at = json.loads(cursor)
        events, token = body["events"], body["nextForwardToken"]
        if not isinstance(events, list) or not isinstance(token, str):
            raise TypeError("events is not a list or nextForwardToken not a string")
        lines = tuple(str(e["message"]).rstrip("\r\n") for e in events)
        more = bool(lines) and token != at.get("token")
        return LogPage(lines, json.dumps({"stream": at["stream"], "token": token}), more)

    def authenticate(self, request: HttpRequest, credentials: Credentials) -> dict[str, str]:
        """AWS Signature Version 4 by botocore over the method, URL, ``Content-Type``,
        ``X-Amz-Target`` and body, for the service ``sagemaker`` (or the companion service the
        request names: ``logs``); the keys of the session come through the token cache
        (:class:`BotocoreCredentials`)."""
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials as BotoCredentials

        boto = BotoCredentials(*credentials.signing_keys())
        signed = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "x-amz-target")}
        aws = AWSRequest(method=request.method, url=request.url, data=request.body, headers=signed)
        SigV4Auth(boto, request.service or SIGNING_NAME, credentials.region or "us-east-1").add_auth(aws)
        return {
            k: v
            for k, v in aws.headers.items()
            if k in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token")
        }

    # -- responses ----------------------------------------------------------------------------
    def parse_created(self, body: Any) -> TrainingJob:
        """The create answer is only the ARN: the job is ``InProgress``/``Starting`` now."""
        arn = (body or {}).get("TrainingJobArn", "")
        name = arn.rsplit("/", 1)[-1]
        return TrainingJob(
            id=name, platform=self.name, state=JobState.STARTING, raw_status="InProgress/Starting"
        )

    def parse_job(self, body: Any) -> TrainingJob:
        wire = WireJob.model_validate(body)
        secondary = wire.SecondaryStatus or ""
        state = self.map_status(wire.TrainingJobStatus)
        if state is JobState.RUNNING and secondary in _STARTING:
            state = JobState.STARTING
        timed_out = wire.TrainingJobStatus == "Stopped" and secondary in _TIMED_OUT
        if timed_out:
            state = JobState.FAILED
        message = wire.FailureReason
        if timed_out and not message:
            message = f"{secondary}: the job reached its StoppingCondition"
        if wire.TrainingJobStatus == "Deleting" and not message:
            message = "the training job is being deleted"
        metrics = {m.MetricName: m.Value for m in wire.FinalMetricDataList if m.Value is not None}
        checkpoints = []
        location = (wire.CheckpointConfig or {}).get("S3Uri")
        if location:
            checkpoints.append(Checkpoint(id="checkpoints", kind="location", path=location))
        written, finals = local_final_checkpoint(body, location)  # the local platform's user code only
        # the files before the location: a retry resumes from the latest checkpoint, which must
        # stay the location (what the platform restores into the new job's checkpoint directory)
        checkpoints = finals + checkpoints
        artifacts = {}
        if model := (wire.ModelArtifacts or {}).get("S3ModelArtifacts"):
            artifacts["model"] = model
        if location:
            artifacts["checkpoints"] = location
        billable = wire.BillableTimeInSeconds
        return TrainingJob(
            id=wire.TrainingJobName,
            platform=self.name,
            state=state,
            raw_status=f"{wire.TrainingJobStatus}/{secondary}" if secondary else wire.TrainingJobStatus,
            name=wire.TrainingJobName,
            message=message,
            progress=Progress(percent=100.0 if state is JobState.SUCCEEDED else None),
            metrics=metrics,
            checkpoints=checkpoints,
            artifacts=artifacts,
            cost=Cost(billable_seconds=billable, total_usd=local_cost_usd(body)),
            final_checkpoint_written=written,
            tags=[f"{t.Key}:{t.Value}" for t in wire.Tags if t.Key.startswith(TAG_KEY_PREFIX)],
            created_at=wire.CreationTime,
            started_at=wire.TrainingStartTime,
            updated_at=wire.LastModifiedTime,
            events=[
                JobEvent(
                    type=t.Status,
                    message=t.StatusMessage or t.Status,
                    level="error" if t.Status in ("Failed", *_TIMED_OUT) else "info",
                    created_at=t.StartTime,
                )
                for t in wire.SecondaryStatusTransitions
            ],
        )

    def parse_cancel(self, job_id: str, body: Any) -> CancelResult:
        """``StopTrainingJob`` answers an empty body: the job is ``Stopping`` now."""
        return CancelResult(job_id=job_id, state=JobState.STOPPING)

    def parse_list(self, body: Any) -> list[TrainingJob]:
        """``Search`` results' ``TrainingJob`` records; a row that does not read as a job is left
        out (logged)."""
        return self.listed_jobs(WireSearch.model_validate(body or {}).Results, self._search_row)

    def _search_row(self, row: Any) -> TrainingJob:
        if not isinstance(row, dict) or not isinstance(row.get("TrainingJob"), dict):
            raise ValueError("the row holds no TrainingJob record")
        return self.parse_job(row["TrainingJob"])

    def decisive_event(self, events: list[JobEvent]) -> JobEvent | None:
        """``FailureReason`` is the reason; a transition message is only a fallback."""
        return super().decisive_event(events)

    def error_fields(self, body: Any) -> tuple[str | None, str | None, str | None]:
        code, message = _error_code(body)
        return code, message, None

    def classify_error(
        self, status: int, headers: Mapping[str, str], body: Any, text: str = ""
    ) -> TrainingPlatformError:
        """By the awsJson error code: throttling (HTTP 400) and 5xx are transient and were not
        processed; ``ValidationException`` "not found" is a missing job and "is in status ..." a
        state conflict; ``ResourceInUse`` is a name that exists; signature and key errors are auth."""
        code, message = _error_code(body)
        message = message or text[:500] or f"HTTP {status}"
        request_id = headers.get("x-amzn-RequestId") or headers.get("x-amzn-requestid")
        kw: dict[str, Any] = {"status": status, "code": code, "request_id": request_id}
        if code in _THROTTLING or status == 429:
            return TransientPlatformError(message, retry_after=retry_after_seconds(headers), sent=False, **kw)
        if code in _UNAVAILABLE or status >= 500:
            return TransientPlatformError(message, sent=code not in ("ServiceUnavailable",), **kw)
        if code in _AUTH or status in (401, 403):
            return PlatformAuthError(message, **kw)
        if code == "ResourceInUse":
            return JobAlreadyExistsError(message, **kw)
        if code in ("ResourceNotFound", "ResourceNotFoundException") or (
            code == "ValidationException" and _NOT_FOUND_TEXT.search(message)
        ):
            return JobNotFoundError(message, **kw)
        if code == "ValidationException" and _IN_STATUS_TEXT.search(message):
            return JobStateConflictError(message, **kw)
        return TrainingPlatformError(message, **kw)

    def console_url(self, base_url: str, job_id: str) -> str | None:
        match = re.search(r"api\.sagemaker\.([a-z0-9-]+)\.amazonaws\.com", base_url)
        if match is None:  # an endpoint override (e.g. the local training platform): no AWS console
            return None
        region = match.group(1)
        return f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/jobs/{job_id}"


# -- the platform: reached through Airflow's ``aws`` connection ---------------------------------------
class BotocoreCredentials(SelfRefreshingSource):
    """The keys of an AWS session (botocore's credentials: static keys, or refreshable ones from an
    assumed role, SSO, the container or instance role) as a credential source.

    botocore refreshes refreshable keys itself before their last 10 minutes, and its expiry time is
    a private attribute: the keys are held 300 s and botocore is asked again after 150 s
    (:class:`~airflow_training_provider.platforms.credentials.SelfRefreshingSource`). Static keys
    never expire and are asked for once.

    :param credentials: the session's ``get_credentials()``.
    :param key: names the connection's credential settings without their secrets
        (:meth:`AwsPlatformDescriptor.connect`).
    """

    def __init__(self, credentials: Any, key: str) -> None:
        super().__init__(key)
        self._credentials = credentials

    def current(self) -> SigningKeys | Expiring[SigningKeys]:
        from botocore.credentials import RefreshableCredentials

        frozen = self._credentials.get_frozen_credentials()  # refreshes first when botocore says so
        keys = SigningKeys(frozen.access_key, frozen.secret_key, frozen.token)
        return keys if isinstance(self._credentials, RefreshableCredentials) else Expiring(keys, None)


@dataclass(frozen=True)
class AwsPlatformDescriptor(PlatformDescriptor):
    """A platform reached through Airflow's ``aws`` connection (apache-airflow-providers-amazon,
    extra ``[sagemaker]``), whose session factory resolves the credentials: keys in the connection,
    a session token, ``role_arn`` (assume role, refreshed when it expires), a profile, the environment
    or the instance/pod role. ``region_name`` and ``endpoint_url`` (global or
    ``service_config.<service>.endpoint_url``) come from the extras."""

    service: str = SIGNING_NAME
    registers_connection_type = False  # the Amazon provider owns ``aws``

    def connect(self, conn: Any) -> ConnectionParts:
        try:
            from airflow.providers.amazon.aws.hooks.base_aws import BaseSessionFactory
        except ImportError:  # pragma: no cover - depends on the installed extras
            raise ValueError(
                f"Connection {conn.conn_id!r} is an AWS connection: install the Amazon provider "
                "(pip install 'airflow-training-provider[sagemaker]')"
            ) from None
        factory = BaseSessionFactory(conn=conn)
        session = factory.create_session()  # may call STS (assume role): the async hook runs this in a thread
        source = session.get_credentials()
        if source is None:
            raise PlatformAuthError(
                f"Connection {conn.conn_id!r} ({self.display_name}): no AWS credentials found — set the "
                "connection's login/password (access key id/secret), its role_arn or profile, or the "
                "environment/instance credentials"
            )
        region = factory.region_name or session.region_name or "us-east-1"
        endpoint = factory.conn.get_service_endpoint_url(self.service)
        base_url = base_url_of(endpoint, None, None, self.default_url(Credentials(region=region)))
        # CloudWatch Logs (program logs): service_config.logs.endpoint_url, else the endpoint_url
        # that overrides every service (the local platform serves both), else AWS's regional one
        logs_endpoint = factory.conn.get_service_endpoint_url(LOGS_SERVICE)
        logs_url = base_url_of(logs_endpoint, None, None, f"https://logs.{region}.amazonaws.com")
        # the same settings give the same keys: one held value, one HTTP session per settings
        key = f"aws:{source.method}#{secret_digest(conn.login, conn.password, conn.extra, region)}"
        credentials = Credentials(
            access_key_id=source.access_key, region=region, source=BotocoreCredentials(source, key)
        )
        return ConnectionParts(
            credentials, base_url, {}, {LOGS_SERVICE: logs_url}, self.rates_of(conn, base_url)
        )

    @property
    def credential_hint(self) -> str:
        return "AWS credentials (login/password, role_arn, profile or environment) and region_name"


PLATFORM = AwsPlatformDescriptor(
    conn_type="aws",
    display_name="AWS SageMaker",
    class_name="SageMaker",
    dialect=SageMakerDialect,
    default_base_url="https://api.sagemaker.{region}.amazonaws.com",
    docs_url="https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateTrainingJob.html",
    credentials={},
    required_credentials=(),
    labels={},
)
