"""The provider's Airflow plugin, registered through the ``airflow.plugins`` entry point: the
"Training job" tab — it mounts the view's FastAPI sub-application (in the API server) and adds the
tab to every task instance (Airflow 3.3 cannot limit a tab to some operators; the page says "not a
training task" elsewhere) —, the console link of the try the user looks at
(:class:`~airflow_training_provider.ui.tries.TryConsoleLink`, in place of the latest try's link
Airflow reads from XCom), and the mark-failed listener (:mod:`airflow_training_provider.listeners`:
a deferred training task set to failed while no triggerer runs its trigger has its job cancelled by
the API server)."""

from __future__ import annotations

from urllib.parse import urlparse

from airflow.configuration import conf
from airflow.plugins_manager import AirflowPlugin

from airflow_training_provider.listeners import LISTENER, warm_up
from airflow_training_provider.ui.app import create_app
from airflow_training_provider.ui.tries import TryConsoleLink

URL_PREFIX = "/training-job"


def view_href() -> str:
    """The tab's address: same origin as the UI (relative to the host, under a non-root
    ``[api] base_url`` too). Airflow fills the ``{…}`` tokens; ``{MAP_INDEX}`` stays literal on an
    unmapped task, which the page reads as -1."""
    base_path = urlparse(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    query = "dag_id={DAG_ID}&run_id={RUN_ID}&task_id={TASK_ID}&map_index={MAP_INDEX}"
    return f"{base_path}{URL_PREFIX}/view?{query}"


class TrainingJobViewPlugin(AirflowPlugin):
    """The "Training job" task-instance tab and its routes, and the mark-failed listener (Airflow
    loads plugins in every component; the listener acts only on the API server's manual
    set-to-failed path)."""

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
    operator_extra_links = [TryConsoleLink()]
    listeners = [LISTENER]


warm_up()  # in the API server: the listener's first cancel without cold imports
