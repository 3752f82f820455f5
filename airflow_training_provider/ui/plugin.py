"""The Airflow plugin behind the "Training job" tab: registered through the ``airflow.plugins``
entry point (Airflow loads it in the API server), it mounts the view's FastAPI sub-application and
adds the tab to every task instance (Airflow 3.3 cannot limit a tab to some operators; the page
says "not a training task" elsewhere)."""

from __future__ import annotations

from urllib.parse import urlparse

from airflow.configuration import conf
from airflow.plugins_manager import AirflowPlugin

from airflow_training_provider.ui.app import create_app

URL_PREFIX = "/training-job"


def view_href() -> str:
    """The tab's address: same origin as the UI (relative to the host, under a non-root
    ``[api] base_url`` too). Airflow fills the ``{…}`` tokens; ``{MAP_INDEX}`` stays literal on an
    unmapped task, which the page reads as -1."""
    base_path = urlparse(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    query = "dag_id={DAG_ID}&run_id={RUN_ID}&task_id={TASK_ID}&map_index={MAP_INDEX}"
    return f"{base_path}{URL_PREFIX}/view?{query}"


class TrainingJobViewPlugin(AirflowPlugin):
    """The "Training job" task-instance tab and its routes."""

    name = "training_job_view"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Training job view"}]
    external_views = [
        {
            "name": "Training job",
            "href": view_href(),
            "destination": "task_instance",
            "url_route": "training-job",
        }
    ]
