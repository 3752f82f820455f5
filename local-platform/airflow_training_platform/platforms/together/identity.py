"""Who the local Together account is: the answer to ``GET /v3/whoami`` (the CLI's, before every
command, to find the key's project) and ``GET /v1/whoami``.

The shape is the together SDK's ``WhoamiProjectAPIKey`` (together 3.1.1
``types/whoami_project_api_key.py``; ``docs/platforms/together.md``): a project API key with its
organization and project. The local platform has one of each; every accepted key is that key.
"""

from __future__ import annotations

from typing import Any

from airflow_training_platform.platforms.together.wire import USER_ID

PROJECT_ID = "proj-local"
"""The one project of the local account (``project.id``). The CLI keeps it as the client's
``project_id``, which only project-scoped paths use (models, not fine-tuning)."""

ORGANIZATION_ID = "org-local"


def whoami() -> dict[str, Any]:
    """``{"type": "project_api_key", "api_key": {"id"}, "organization": {"id", "name"},
    "project": {"id", "name", "slug"}}``: the local account's one key, organization and project."""
    return {
        "type": "project_api_key",
        "api_key": {"id": f"key-{USER_ID}"},
        "organization": {"id": ORGANIZATION_ID, "name": "Local training platform"},
        "project": {"id": PROJECT_ID, "name": "Local project", "slug": "local"},
    }
