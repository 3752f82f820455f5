"""The platforms the local training platform emulates, one folder each (routes, wire, error format).
Adding one adds its folder and a line here (docs/adding-a-platform.md)."""

from __future__ import annotations

from airflow_training_platform.platforms import modelarts, pai, sagemaker, tensorone, together
from airflow_training_platform.platforms.base import AppContext, LocalPlatform

LOCAL_PLATFORMS: tuple[LocalPlatform, ...] = (
    sagemaker.PLATFORM,  # first: told apart by its signature, and S3's /<bucket> may be any path
    modelarts.PLATFORM,  # before TensorOne: a project id may start with 'training'
    tensorone.PLATFORM,
    pai.PLATFORM,  # before Together: an OSS bucket may be named v1
    together.PLATFORM,  # last: it takes whatever else is under /v1/ and /v3/
)

__all__ = ["LOCAL_PLATFORMS", "AppContext", "LocalPlatform"]
