"""The platforms this provider supports, one module each (descriptor + dialect), looked up by
Airflow connection type. Adding a platform adds its module to :data:`PLATFORMS` (docs/adding-a-platform.md)."""

from __future__ import annotations

from airflow_training_provider.models import TrainingJob
from airflow_training_provider.platforms import modelarts, pai, sagemaker, tensorone, together
from airflow_training_provider.platforms.base import (
    ApiRequest,
    Capabilities,
    Dialect,
    HttpRequest,
)
from airflow_training_provider.platforms.credentials import (
    TOKEN_CACHE,
    Credentials,
    CredentialSource,
    Expiring,
    SigningKeys,
    TokenCache,
)
from airflow_training_provider.platforms.descriptor import PlatformDescriptor

PLATFORMS: dict[str, PlatformDescriptor] = {
    p.conn_type: p
    for p in (tensorone.PLATFORM, together.PLATFORM, sagemaker.PLATFORM, pai.PLATFORM, modelarts.PLATFORM)
}
"""Connection type → platform descriptor."""


def get_platform(conn_type: str) -> PlatformDescriptor:
    """The platform served by Airflow connection type ``conn_type`` (``"tensorone"``, ``"together"``...).

    :raises ValueError: if no platform uses that connection type.
    """
    try:
        return PLATFORMS[conn_type]
    except KeyError:
        raise ValueError(
            f"Connection type {conn_type!r} is not a training platform; expected one of {sorted(PLATFORMS)}"
        ) from None


def display_name(platform: str | None) -> str | None:
    """The display name of the platform whose dialect is named ``platform`` (a job's ``platform``:
    ``"sagemaker"`` → ``"AWS SageMaker"``); an unknown name as it is."""
    return next((p.display_name for p in PLATFORMS.values() if p.dialect.name == platform), platform)


def dialect_class(platform: str | None) -> type[Dialect]:
    """The dialect class named ``platform`` (a job's ``platform``: ``"sagemaker"`` →
    ``SageMakerDialect``), for what it knows without a connection (:meth:`Dialect.storage_uri`);
    the base :class:`Dialect` (its generic rules) for an unknown name."""
    return next((p.dialect for p in PLATFORMS.values() if p.dialect.name == platform), Dialect)


def platform_job(
    job: TrainingJob | None = None, *, platform: str | None = None, job_id: str | None = None
) -> str:
    """How every failure names a job: ``"AWS SageMaker training job churn-1-t1"``, from ``job``
    or from ``platform`` (a dialect name) and ``job_id``."""
    shown = display_name(job.platform if job is not None else platform)
    return f"{shown + ' ' if shown else ''}training job {job.id if job is not None else job_id}"


def get_dialect(conn_type: str) -> Dialect:
    """A new dialect for connection type ``conn_type``. :raises ValueError: unknown type."""
    return get_platform(conn_type).dialect()


__all__ = [
    "PLATFORMS",
    "TOKEN_CACHE",
    "ApiRequest",
    "Capabilities",
    "CredentialSource",
    "Credentials",
    "Dialect",
    "Expiring",
    "HttpRequest",
    "PlatformDescriptor",
    "SigningKeys",
    "TokenCache",
    "dialect_class",
    "display_name",
    "get_dialect",
    "get_platform",
    "platform_job",
]
