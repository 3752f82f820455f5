"""A portable spec on its way to a platform: compiled for the connection, its code uploaded.

The submit operator calls :func:`compile_for` when it renders its fields (so the Rendered Template
view shows the native body) and :func:`upload_source` right before it submits a new job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_training_provider.hooks.connection import PlatformConnection
from airflow_training_provider.models import TrainingJob
from airflow_training_provider.portable import (
    Placement,
    PortableFineTuneSpec,
    PortableSpecError,
    check_storage_root,
    metrics_from_lines,
    parse_portable,
    refuse,
)
from airflow_training_provider.storage import PlatformStorage, source_digest, source_files
from airflow_training_provider.task_log import TaskLog


@dataclass(frozen=True)
class CompiledSpec:
    """A portable spec compiled for one connection.

    :ivar spec: the platform's native create body (secret references still unresolved).
    :ivar source: ``source_dir``'s files by their path in it (``None``: no ``source_dir``).
    :ivar code_uri: the directory URI they are uploaded to (``<storage_root>/code/<digest>/``).
    :ivar packed: uploaded as one ``sourcedir.tar.gz`` (SageMaker) rather than file by file.
    :ivar log_metrics: metric regexes the operator applies to the program log when the job ends
        (a platform without metric regexes of its own: ModelArts); empty elsewhere.
    """

    spec: dict[str, Any]
    source: Mapping[str, Path] | None = None
    code_uri: str | None = None
    packed: bool = False
    log_metrics: Mapping[str, str] = field(default_factory=dict)


def compile_for(connection: PlatformConnection, portable: Any, base_dir: Path) -> CompiledSpec:
    """Portable spec ``portable`` (a rendered mapping: a training or fine-tune spec) compiled for
    ``connection``'s platform.

    :param base_dir: what a relative ``source_dir`` is relative to (the DAG file's folder).
    :raises InvalidJobSpecError: (:class:`~airflow_training_provider.portable.PortableSpecError`)
        naming the portable field that is wrong or that the platform cannot serve; for
        ``source_dir``, not a directory of files."""
    spec = parse_portable(portable)
    dialect = connection.dialect
    if isinstance(spec, PortableFineTuneSpec):
        return CompiledSpec(
            dialect.compile_portable(spec, Placement("", connection.platform.display_name, None))
        )
    display = connection.platform.display_name
    scheme = dialect.storage_scheme or ""
    files = digest = None
    if spec.source_dir is not None and scheme:
        files = source_files(base_dir / spec.source_dir)
        if spec.entry_point is not None and spec.entry_point not in files:
            shown = ", ".join(list(files)[:10]) + (", …" if len(files) > 10 else "")
            raise PortableSpecError(
                "entry_point",
                f"'{spec.entry_point}' is not in source_dir '{base_dir / spec.source_dir}' ({shown})",
            )
        digest = source_digest(files)
    root = check_storage_root(connection.storage_root, scheme, connection.conn_id) if scheme else None
    place = Placement(scheme, display, root, digest)
    native = dialect.compile_portable(spec, place)
    log_metrics: dict[str, str] = {}
    if spec.metric_definitions and not dialect.metric_regexes:
        if not dialect.capabilities.program_logs:
            raise refuse(
                "metric_definitions", display, "it has no metric regexes, and its API serves no program log"
            )
        log_metrics = dict(spec.metric_definitions)
    code_uri = place.code_uri() if files is not None else None
    return CompiledSpec(native, files, code_uri, dialect.code_packed, log_metrics)


def upload_source(connection: PlatformConnection, compiled: CompiledSpec, log: TaskLog) -> None:
    """Upload the compiled spec's ``source_dir`` where the job reads it (nothing without one).

    :raises TrainingPlatformError: the object store refused a write."""
    if compiled.source is None or compiled.code_uri is None:
        return
    written = PlatformStorage(connection).upload_source(compiled.source, compiled.code_uri, compiled.packed)
    size = sum(p.stat().st_size for p in compiled.source.values())
    log.info(
        "Uploaded source_dir (%d files, %.1f kB) to %s%s",
        len(compiled.source),
        size / 1000,
        compiled.code_uri,
        " as sourcedir.tar.gz" if compiled.packed else "",
    )
    log.debug("Code objects written: %s", written)


def with_log_metrics(hook: Any, compiled: CompiledSpec | None, job: TrainingJob) -> TrainingJob:
    """``job`` (ended) with the metrics its program printed, read from the program log by the
    compiled spec's :attr:`~CompiledSpec.log_metrics` (the platform's own metrics kept where it
    reports one of the same name); ``job`` itself when there are none to read.

    :param hook: the connection's sync hook (:class:`~airflow_training_provider.hooks.training.TrainingPlatformHook`)."""
    if compiled is None or not compiled.log_metrics:
        return job
    found = metrics_from_lines(hook.program_log(job), compiled.log_metrics)
    return job.model_copy(update={"metrics": {**found, **job.metrics}}) if found else job
