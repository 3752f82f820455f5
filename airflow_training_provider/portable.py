"""One training job for any platform: the portable spec and what every platform's compiler shares.

A :class:`PortableTrainingSpec` says what to run (your script and its directory, or a command in
an image), on what data, where the model and checkpoints go, with which hyperparameters,
environment, machines, time limit, metric regexes and tags. Each training platform's dialect
compiles it into that platform's native create body (:meth:`Dialect.compile_portable
<airflow_training_provider.platforms.base.Dialect.compile_portable>`): SageMaker script mode or its
own image, PAI ``AlgorithmSpec``, ModelArts ``algorithm``. A field a platform cannot serve is
refused before anything is submitted, naming the platform and the field
(:class:`PortableSpecError`); nothing is dropped silently. The table of portable fields and the
native field each becomes is ``docs/portable-spec.md``.

**Locations.** ``inputs``, ``output`` and ``checkpoints`` are URIs in the platform's object storage
(``s3://``, ``oss://``, ``obs://``) or paths relative to the connection's ``storage_root`` extra
(``s3://my-bucket/ml/`` on an ``aws`` connection): with relative paths, the same spec runs on
another platform by changing the connection alone. A URI of another platform's storage is refused.

**Your code.** ``source_dir`` is a directory on the worker (absolute, or relative to the DAG
file's folder) holding ``entry_point``; the operator uploads it to
``<storage_root>/code/<digest>/`` before submitting (:mod:`airflow_training_provider.storage`),
as each platform wants it: a ``sourcedir.tar.gz`` for SageMaker script mode, the files themselves
for PAI's ``CodeDir`` and ModelArts' ``code_dir``. The digest is of the files' names and contents,
so a retry or a second run with the same code uploads nothing new.

**The program's contract.** With ``entry_point`` every platform runs ``python <entry_point>`` with
the hyperparameters as arguments (``--epochs 10``; ModelArts ``--epochs=10``); the script finds an
input channel, the model directory and the checkpoint directory where the platform documents
them (``docs/portable-spec.md``, "Your script on each platform").
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from airflow_training_provider.errors import InvalidJobSpecError

#: the training platforms a portable training spec compiles for (their dialects' ``name``)
TRAINING_PLATFORMS = ("sagemaker", "pai", "modelarts")
#: the platforms a portable fine-tune spec compiles for
FINE_TUNE_PLATFORMS = ("together", "tensorone")

Scalar = str | int | float | bool
PerPlatform = str | dict[str, str]
"""One value for every platform, or one per platform (``{"sagemaker": …, "pai": …}``)."""


def known_platforms(value: dict[str, Any], platforms: tuple[str, ...]) -> dict[str, Any]:
    """``value`` (a per-platform mapping) when each key names one of ``platforms``.

    :raises ValueError: naming the first unknown key and the platforms known."""
    for key in value:
        if key not in platforms:
            raise ValueError(f"unknown platform {key!r}: one of {', '.join(platforms)}")
    return value


class PortableSpecError(InvalidJobSpecError):
    """A portable spec's field is wrong, or the platform cannot serve it; nothing was submitted.

    :param field: dotted path of the portable field (``resources.volume_size_gb``).
    :param expected: what is wrong and what to do instead.
    :param platform: the platform's display name when the field is valid but that platform has no
        place for it (``"ModelArts"``); ``None`` for a field wrong on every platform.
    """

    def __init__(self, field: str, expected: str, platform: str | None = None) -> None:
        super().__init__(field, expected)
        where = f"portable spec on {platform}" if platform else "portable spec"
        Exception.__init__(self, f"Invalid {where}: field '{field}': {expected}")
        self.platform = platform


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Accelerator(_Strict):
    """GPUs per machine.

    :ivar type: the GPU model as NVIDIA names it (``T4``, ``A10G``, ``L4``, ``L40S``, ``V100``,
        ``A100``, ``H100``; any case).
    :ivar count: GPUs on each machine, at least 1.
    """

    type: str = Field(min_length=1)
    count: int = Field(default=1, ge=1)


class Resources(_Strict):
    """The machines a job runs on: a machine type, or the GPUs a machine needs (the platform's
    machine type for them where the provider knows it: SageMaker), or both (the platform's machine
    type, where given, is used there).

    :ivar instance_type: the platform's machine type, one for all or one per platform: SageMaker
        ``ml.g5.xlarge`` (``ResourceConfig.InstanceType``), PAI ``ecs.gn7i-c8g1.2xlarge``
        (``ComputeResource.EcsSpec``), ModelArts ``modelarts.vm.gpu.t4u8`` (``spec.resource.flavor_id``).
    :ivar accelerator: the GPUs per machine (:class:`Accelerator`), turned into the platform's
        machine type by its table (SageMaker's); refused where the platform has none (PAI and
        ModelArts name their GPU machines per region: give their ``instance_type``).
    :ivar instance_count: machines (nodes), at least 1.
    :ivar volume_size_gb: each machine's storage volume (GB): SageMaker only (its default: 30);
        refused elsewhere (the machine type sizes it).
    """

    instance_type: PerPlatform | None = None
    accelerator: Accelerator | None = None
    instance_count: int = Field(default=1, ge=1)
    volume_size_gb: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _some_machine(self) -> Resources:
        if self.instance_type is None and self.accelerator is None:
            raise ValueError(
                "give instance_type (one, or one per platform) or accelerator (GPU type and count)"
            )
        return self


class PortableTrainingSpec(_Strict):
    """A training job for SageMaker, PAI or ModelArts (templated like any spec: every string may
    hold Jinja). Validated before anything is compiled or submitted.

    :ivar name: the job name's stem (the provider adds the task instance's digest and try, as for
        native specs); default ``af-<dag>-<task>``.
    :ivar image: the training image, one for all or one per platform (SageMaker ``TrainingImage``,
        PAI ``AlgorithmSpec.Image``, ModelArts ``engine.image_url`` with ``command``). With
        ``entry_point`` ModelArts runs a preset engine instead, given in
        ``options.modelarts.algorithm.engine`` (an image for ModelArts is then refused).
    :ivar source_dir: your code's directory on the worker (absolute, or relative to the DAG
        file's folder), uploaded by the operator before submit.
    :ivar entry_point: the Python script in ``source_dir`` the job runs (``train.py``).
    :ivar command: instead of ``entry_point``, the command the image runs (a list of arguments).
    :ivar inputs: input channel name → location (``{"train": "data/digits/"}``).
    :ivar output: where the trained model goes (a location; required).
    :ivar checkpoints: where the job's checkpoints are kept (a location): restored into the
        checkpoint directory when a job starts, so a retry resumes.
    :ivar hyperparameters: name → value, given to the program as arguments.
    :ivar environment: variable name → value or secret reference
        (``{"secret": {"conn_id": "hub"}}``, resolved on the worker right before submit).
    :ivar resources: the machines (:class:`Resources`).
    :ivar max_runtime: seconds (or a ``timedelta``) of training after which the platform stops the job (SageMaker,
        PAI: any; ModelArts: whole hours). SageMaker's default when unset: 86,400 (one day).
    :ivar metric_definitions: metric name → regex with one group, read from the program's output
        (SageMaker and PAI ``MetricDefinitions``).
    :ivar tags: key → value, on the job (SageMaker ``Tags``, PAI ``Labels``, ModelArts
        ``metadata.annotations``).
    :ivar options: per platform, native fields that have no portable word (SageMaker ``RoleArn``,
        PAI ``WorkspaceId``, a ModelArts preset ``algorithm.engine``), merged into the compiled
        body; a field the portable spec already sets is refused.
    """

    name: str | None = Field(default=None, min_length=1)
    image: PerPlatform | None = None
    source_dir: str | None = Field(default=None, min_length=1)
    entry_point: str | None = Field(default=None, min_length=1)
    command: list[str] | None = Field(default=None, min_length=1)
    inputs: dict[str, str] = Field(default_factory=dict)
    output: str = Field(min_length=1)
    checkpoints: str | None = Field(default=None, min_length=1)
    hyperparameters: dict[str, Scalar] = Field(default_factory=dict)
    environment: dict[str, str | dict[str, Any]] = Field(default_factory=dict)
    resources: Resources
    max_runtime: int | None = Field(default=None, ge=1)
    metric_definitions: dict[str, str] = Field(default_factory=dict)
    tags: dict[str, str] = Field(default_factory=dict)
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("max_runtime", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> Any:
        return int(value.total_seconds()) if isinstance(value, timedelta) else value

    @field_validator("tags")
    @classmethod
    def _own_tags(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if key.startswith("airflow-"):
                raise ValueError(
                    f"{key!r}: keys starting with airflow- are the provider's own (the task's identity)"
                )
        return value

    @field_validator("options")
    @classmethod
    def _known_platforms(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return known_platforms(value, TRAINING_PLATFORMS)

    @field_validator("metric_definitions")
    @classmethod
    def _regexes(cls, value: dict[str, str]) -> dict[str, str]:
        for name, regex in value.items():
            try:
                groups = re.compile(regex).groups
            except re.error as exc:
                raise ValueError(f"{name!r}: not a regular expression ({exc})") from None
            if groups < 1:
                raise ValueError(f"{name!r}: the regex needs a group around the value, e.g. loss=([0-9.]+)")
        return value

    @model_validator(mode="after")
    def _one_program(self) -> PortableTrainingSpec:
        if (self.entry_point is None) == (self.command is None):
            raise ValueError("give entry_point (a script in source_dir) or command, not both nor neither")
        if self.entry_point is not None and self.source_dir is None:
            raise ValueError("entry_point needs source_dir, the directory it is in")
        if self.entry_point is not None and (self.entry_point.startswith("/") or ".." in self.entry_point):
            raise ValueError("entry_point is a path inside source_dir (train.py, src/train.py)")
        return self


class PortableFineTuneSpec(_Strict):
    """A managed fine-tune for Together or TensorOne (templated like any spec). A mapping with
    ``base_model`` is one of these.

    :ivar base_model: the model to fine-tune (Together ``model``, TensorOne ``config.baseModel``).
    :ivar training_file: the training data (Together ``training_file``: a file id; TensorOne
        ``datasetId``).
    :ivar validation_file: the validation data (Together ``validation_file``); refused on TensorOne.
    :ivar epochs: passes over the data (Together ``n_epochs``, TensorOne ``config.training.epochs``).
    :ivar learning_rate: (Together ``learning_rate``, TensorOne ``config.training.learning_rate``).
    :ivar batch_size: examples per step (Together ``batch_size``, TensorOne ``config.training.batch_size``).
    :ivar checkpoints: checkpoints to save over the run (Together ``n_checkpoints``); refused on
        TensorOne, which saves its own.
    :ivar suffix: the fine-tuned model's name suffix (Together ``suffix``); TensorOne's job
        ``name`` (default: the base model's last path part + ``-fine-tune``).
    :ivar options: per platform (``together``, ``tensorone``), native fields merged into the
        compiled body (Together ``wandb_project_name``, TensorOne ``gpuType``); a field the portable
        spec already sets is refused.
    """

    base_model: str = Field(min_length=1)
    training_file: str = Field(min_length=1)
    validation_file: str | None = Field(default=None, min_length=1)
    epochs: int | None = Field(default=None, ge=1)
    learning_rate: float | None = Field(default=None, gt=0)
    batch_size: int | None = Field(default=None, ge=1)
    checkpoints: int | None = Field(default=None, ge=1)
    suffix: str | None = Field(default=None, min_length=1, max_length=64)
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("options")
    @classmethod
    def _known_platforms(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return known_platforms(value, FINE_TUNE_PLATFORMS)


PortableSpec = PortableTrainingSpec | PortableFineTuneSpec


def parse_portable(spec: Any) -> PortableSpec:
    """``spec`` (a mapping, e.g. a rendered operator parameter, or a model instance) validated: a
    :class:`PortableFineTuneSpec` when it names a ``base_model``, else a :class:`PortableTrainingSpec`.

    :raises PortableSpecError: naming the first offending field and what was expected (an unknown
        field with the closest known one)."""
    if isinstance(spec, PortableTrainingSpec | PortableFineTuneSpec):
        return spec
    if not isinstance(spec, dict):
        raise PortableSpecError("portable_spec", f"a mapping (dict), got {type(spec).__name__}")
    kind: type[PortableTrainingSpec] | type[PortableFineTuneSpec] = (
        PortableFineTuneSpec if "base_model" in spec else PortableTrainingSpec
    )
    try:
        return kind.model_validate(spec)
    except ValidationError as exc:
        errors = exc.errors()
        # a misspelt field first: the "required" error beside it is its consequence
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        where = ".".join(str(p) for p in err["loc"]) or "portable_spec"
        if err["type"] == "extra_forbidden":
            *parent, name = [str(p) for p in err["loc"]]
            model = Resources if parent == ["resources"] else kind
            close = difflib.get_close_matches(name, list(model.model_fields), n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(model.model_fields)}"
            raise PortableSpecError(where, f"unknown field ({hint})") from None
        raise PortableSpecError(where, err["msg"].removeprefix("Value error, ")) from None


class Placement:
    """Where a compiled job's locations are: the connection's storage root, and the code's
    uploaded location when the spec has a ``source_dir``.

    :param scheme: the platform's object storage scheme (``s3``, ``oss``, ``obs``).
    :param platform: the platform's display name (for errors).
    :param storage_root: the connection's ``storage_root`` extra (``s3://bucket/prefix/``), if set.
    :param code_digest: the digest naming the uploaded ``source_dir`` (:func:`~airflow_training_provider.storage.source_digest`).
    """

    def __init__(
        self, scheme: str, platform: str, storage_root: str | None, code_digest: str | None = None
    ) -> None:
        self.scheme = scheme
        self.platform = platform
        self.storage_root = storage_root
        self.code_digest = code_digest

    def uri(self, location: str, field: str) -> str:
        """``location`` as a URI of the platform's storage (``s3://bucket/key``).

        :raises PortableSpecError: a URI of another storage, a local path, or a relative path
            without a ``storage_root`` on the connection."""
        if "://" in location:
            scheme = location.split("://", 1)[0].lower()
            if scheme != self.scheme:
                raise PortableSpecError(
                    field,
                    f"'{location}' is in {scheme}:// storage; {self.platform} reads {self.scheme}:// — give "
                    "a path relative to the connection's storage_root to run the spec on any platform",
                    self.platform,
                )
            return location
        if location.startswith("/"):
            raise PortableSpecError(
                field, f"'{location}' is a local path: give a {self.scheme}:// URI or a relative path"
            )
        if not self.storage_root:
            raise PortableSpecError(
                field,
                f"'{location}' is relative, and the connection has no storage_root extra to resolve it "
                f"against (e.g. {self.scheme}://my-bucket/ml/)",
                self.platform,
            )
        return f"{self.storage_root.rstrip('/')}/{location}"

    def code_uri(self) -> str:
        """The directory the operator uploads ``source_dir`` to: ``<storage_root>/code/<digest>/``."""
        if self.code_digest is None:
            raise PortableSpecError("source_dir", "the code's digest is not known (internal error)")
        return self.uri(f"code/{self.code_digest}/", "source_dir")


def check_storage_root(root: str | None, scheme: str, conn_id: str) -> str | None:
    """A connection's ``storage_root`` extra, checked: a ``<scheme>://<bucket>/…`` URI of the
    platform's object storage (or ``None``: not set).

    :raises PortableSpecError: naming ``storage_root`` and the connection."""
    if root is not None and not re.match(rf"{re.escape(scheme)}://[^/]+/", root):
        raise PortableSpecError(
            "storage_root",
            f"connection {conn_id!r} has extra storage_root {root!r}; expected {scheme}://<bucket>/<prefix>/",
        )
    return root


def bucket_key(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` → (``bucket``, ``a/b``)."""
    rest = uri.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    return bucket, key


def merge_options(body: dict[str, Any], options: dict[str, Any], platform: str, path: str = "") -> None:
    """Merge ``options`` (the spec's ``options.<platform>``) into the compiled ``body`` in place:
    mappings merge key by key; a field the portable spec already set is refused.

    :raises PortableSpecError: naming ``options.<platform>.<field>``."""
    for key, value in options.items():
        where = f"{path}.{key}" if path else key
        if key not in body:
            body[key] = value
        elif isinstance(body[key], dict) and isinstance(value, dict):
            merge_options(body[key], value, platform, where)
        else:
            raise PortableSpecError(
                f"options.{platform}.{where}",
                "set by a portable field; set it there (or use a native spec for full control)",
            )


def refuse(field: str, platform: str, why: str) -> PortableSpecError:
    """The error for a portable field ``platform`` has no place for."""
    return PortableSpecError(field, f"{platform} cannot serve it: {why}", platform)


def pick(
    value: PerPlatform | None, field: str, platform: str, display: str, needed: str | None = None
) -> str | None:
    """A :data:`PerPlatform` ``value`` (the spec's ``field``) for ``platform``: the one value, or the
    platform's entry of a per-platform mapping.

    :param needed: why ``platform`` needs a value; ``None`` when it may have none.
    :raises PortableSpecError: a mapping key naming no training platform; no value where one is
        ``needed`` (naming ``<field>.<platform>`` for a mapping without the platform's entry)."""
    chosen: str | None = value if not isinstance(value, dict) else None
    if isinstance(value, dict):
        unknown = [k for k in value if k not in TRAINING_PLATFORMS]
        if unknown:
            raise PortableSpecError(
                f"{field}.{unknown[0]}", f"unknown platform: one of {', '.join(TRAINING_PLATFORMS)}"
            )
        chosen = value.get(platform)
    if not chosen and needed:
        where = f"{field}.{platform}" if isinstance(value, dict) else field
        raise PortableSpecError(where, needed, display)
    return chosen


def machine_type(
    resources: Resources,
    platform: str,
    display: str,
    catalog: Mapping[tuple[str, int], str] | None = None,
) -> str:
    """The machine type ``platform`` runs ``resources`` on: its ``instance_type``, else the type its
    ``catalog`` (GPU model upper-cased, GPUs per machine → machine type) has for the accelerator.

    :raises PortableSpecError: neither gives one (naming ``resources.instance_type[.<platform>]``
        or ``resources.accelerator`` and the combinations the catalog knows)."""
    chosen = pick(resources.instance_type, "resources.instance_type", platform, display)
    if chosen:
        return chosen
    where = "resources.instance_type" + (f".{platform}" if isinstance(resources.instance_type, dict) else "")
    if resources.accelerator is None:
        raise PortableSpecError(where, f"{display} needs a machine type (or resources.accelerator)", display)
    if not catalog:
        raise refuse(
            "resources.accelerator",
            display,
            f"the provider knows no table of its GPU machines (they vary by region): give {where}",
        )
    wanted = (resources.accelerator.type.upper(), resources.accelerator.count)
    if wanted not in catalog:
        known = ", ".join(f"{n} x {t}" for t, n in sorted(catalog))
        raise refuse(
            "resources.accelerator",
            display,
            f"no machine type with {wanted[1]} x {wanted[0]} in the provider's table ({known}): give {where}",
        )
    return catalog[wanted]


def stringify(value: Scalar) -> str:
    """A hyperparameter as the platforms carry it: a string (``True`` → ``true``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def metrics_from_lines(lines: Iterable[str], definitions: Mapping[str, str]) -> dict[str, float]:
    """Each metric's last value in a program's ``lines``: ``definitions`` maps a metric name to a
    regex whose first group is the value (as ``MetricDefinitions`` on SageMaker and PAI); a match
    that is not a number is skipped. What the operator reports for a platform that has no metric
    regexes of its own (ModelArts), from the program log its API serves."""
    patterns = {name: re.compile(regex) for name, regex in definitions.items()}
    found: dict[str, float] = {}
    for line in lines:
        for name, pattern in patterns.items():
            match = pattern.search(line)
            if match is None or not match.groups():
                continue
            try:
                found[name] = float(match.group(1))
            except (TypeError, ValueError):
                continue
    return found
