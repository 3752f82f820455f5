"""The local platform's settings: a secret is declared so where its option is, and never shown."""

from __future__ import annotations

import re

from airflow_training_platform.settings import SECRET_FIELDS, PlatformSettings


def test_every_secret_option_is_declared_secret_where_it_is_defined():
    looks_secret = {
        name for name in PlatformSettings.model_fields if re.search(r"secret|token|api_key", name)
    }
    assert looks_secret == SECRET_FIELDS
    assert {"api_key", "sagemaker_secret_access_key", "pai_access_key_secret"} <= SECRET_FIELDS


def test_the_shown_settings_redact_every_secret_and_nothing_else():
    shown = PlatformSettings(
        data_dir="d", pai_access_key_id="LTAIX", **dict.fromkeys(SECRET_FIELDS, "s3cr3t")
    ).shown()
    assert {name for name, value in shown.items() if value == "***"} == SECRET_FIELDS
    assert shown["pai_access_key_id"] == "LTAIX" and "s3cr3t" not in str(shown)
