"""The local training platform's settings: ONE definition. The ``serve`` command's flags, the
``LocalPlatformServer`` options and ``GET /_local/settings`` are all generated from it.

Common settings are :class:`CommonSettings`; each emulated platform adds its own
(``LocalPlatform.options``, fields named ``<platform>_<option>``), composed into
:data:`PlatformSettings`.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from airflow_training_platform.engine import EngineConfig
from airflow_training_platform.platforms import LOCAL_PLATFORMS
from airflow_training_platform.platforms.base import secret_setting
from airflow_training_platform.quotas import QuotaError, Quotas, parse_quotas

API_KEY_ENV = "AIRFLOW_TRAINING_PLATFORM_API_KEY"


class CommonSettings(BaseModel):
    """Settings of the engine and every platform (money in USD, times in seconds)."""

    model_config = ConfigDict(extra="forbid")

    data_dir: str = Field(description="job directories and checkpoints go here (created if missing)")
    gpus: int = Field(1, ge=1, description="simulated GPUs = concurrent job slots")
    usd_per_gpu_hour: float = Field(2.50, ge=0, description="price of one GPU hour in USD")
    seconds_per_epoch: float = Field(1.0, ge=0, description="default epoch pacing for jobs that set none (s)")
    grace_seconds: float = Field(
        10.0, ge=0, description="after a graceful stop signal, SIGKILL after this (s)"
    )
    cancel_delay_seconds: float = Field(
        0.0, ge=0, description="test: every cancel sleeps this long before acting (s)"
    )
    spawn_delay_seconds: float = Field(
        0.0,
        ge=0,
        description="test: every trainer start takes this much longer, as on a cold fork server (s)",
    )
    api_key: str | None = secret_setting(
        f"required API key (default ${API_KEY_ENV}; unset: any non-empty key)"
    )
    max_log_lines: int = Field(2000, ge=1, description="trainer output lines kept per job")
    allow_user_code: bool = Field(
        False,
        description="run training code named in requests (SageMaker script mode, PAI CodeDir, ModelArts code_dir, "
        "mapped images) as "
        "local processes; off: such creates are refused",
    )

    quotas: str | None = Field(
        None,
        description="API quotas per platform and route class (read, create, write), fixed windows: "
        "'tensorone:read=500/3600,create=10/3600;sagemaker:read=20/1' (LIMIT/SECONDS), a preset "
        "'tensorone=documented', or the JSON of PUT /_local/quotas (default: none, nothing throttled)",
    )

    @field_validator("quotas")
    @classmethod
    def _readable_quotas(cls, value: str | None) -> str | None:
        try:
            parse_quotas(value, [p.name for p in LOCAL_PLATFORMS])
        except QuotaError as exc:
            raise ValueError(str(exc)) from None
        return value

    def parsed_quotas(self) -> Quotas:
        """The ``quotas`` setting read (:func:`~.quotas.parse_quotas`)."""
        return parse_quotas(self.quotas, [p.name for p in LOCAL_PLATFORMS])

    def engine_config(self) -> EngineConfig:
        """The engine part of these settings."""
        return EngineConfig(
            data_dir=os.path.abspath(self.data_dir),
            gpus=self.gpus,
            usd_per_gpu_hour=self.usd_per_gpu_hour,
            seconds_per_epoch=self.seconds_per_epoch,
            grace_seconds=self.grace_seconds,
            cancel_delay_seconds=self.cancel_delay_seconds,
            spawn_delay_seconds=self.spawn_delay_seconds,
            max_log_lines=self.max_log_lines,
            allow_user_code=self.allow_user_code,
        )

    def shown(self) -> dict[str, Any]:
        """The settings as JSON, secrets redacted."""
        data = self.model_dump()
        return {k: ("***" if k in SECRET_FIELDS and v else v) for k, v in data.items()}


PlatformSettings: type[CommonSettings] = create_model(  # type: ignore[call-overload]
    "PlatformSettings",
    # Bases in reverse so the fields list the common settings first, then each platform's in order.
    __base__=(*reversed([p.options for p in LOCAL_PLATFORMS if p.options is not None]), CommonSettings),
    __doc__="All settings of the local training platform: common ones and every platform's own.",
)

SECRET_FIELDS = frozenset(
    name
    for name, field in PlatformSettings.model_fields.items()
    if (field.json_schema_extra or {}).get("secret")
)
"""Settings never shown back (``/_local/settings`` redacts them): those declared with
:func:`~airflow_training_platform.platforms.base.secret_setting`."""
