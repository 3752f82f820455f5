"""The connection types this provider adds, one row per platform (used by ``get_provider_info``
and the hooks' ``get_ui_field_behaviour``): host = API base URL, password = API key."""

from __future__ import annotations

from typing import Any

#: conn_type → (hook class, display name, default API base URL, API-key placeholder)
CONNECTION_TYPES: dict[str, tuple[str, str, str, str]] = {
    "tensorone": (
        "airflow_training_provider.hooks.training.TensorOneHook",
        "TensorOne",
        "https://api.tensorone.ai",
        "tpo_live_...",
    ),
    "together": (
        "airflow_training_provider.hooks.training.TogetherHook",
        "Together AI",
        "https://api.together.ai",
        "TOGETHER_API_KEY",
    ),
}


def ui_field_behaviour(conn_type: str) -> dict[str, Any]:
    """Connection form: schema/login/port hidden; host relabelled API base URL, password API key."""
    _, _, base_url, key_placeholder = CONNECTION_TYPES[conn_type]
    return {
        "hidden_fields": ["schema", "login", "port"],
        "relabeling": {"host": "API base URL (optional)", "password": "API key"},
        "placeholders": {"host": base_url, "password": key_placeholder},
    }
