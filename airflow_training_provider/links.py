"""What a training task publishes about its job, for people: the platform console link (an extra
link) and the job reference the Airflow UI's "Training job" view reads.

Airflow 3 does not call :meth:`get_link` while the UI is open: it shows the value the task pushed
to XCom under the link's ``xcom_key``. So the task pushes it itself right after submit — the
button then works while the task is deferred — and the task runner pushes the same value again
when the task ends (it calls :meth:`get_link`, which reads the job reference).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import BaseOperatorLink
from pydantic import BaseModel

from airflow_training_provider.models import TrainingJob

#: XCom key of the :class:`JobReference` a training task publishes (per try, per map index).
JOB_REF_XCOM_KEY = "training_job"


class JobReference(BaseModel):
    """Which job a task instance runs, and the job as last seen by the task (never a secret).

    :ivar conn_id: the Airflow connection of the platform (the UI asks the platform through it).
    :ivar platform: the dialect name (``tensorone``, ``together``, ``sagemaker``...).
    :ivar job_id: the platform's job id.
    :ivar console_url: a link a person can open for this job (``None`` if the platform has none).
    :ivar job: the job as the task last saw it: at submit, then the final job when the task ended.
    :ivar seen_at: when ``job`` was seen (UTC).
    """

    conn_id: str
    platform: str
    job_id: str
    console_url: str | None = None
    job: TrainingJob | None = None
    seen_at: datetime | None = None


class TrainingJobConsoleLink(BaseOperatorLink):
    """The "Training job console" button: the platform's page for the task's job."""

    name = "Training job console"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        # The task runner asks at the end of every try, failed ones too. A try that failed before
        # submitting (a bad spec) published nothing; asking would log a 404 as an error.
        if getattr(operator, "job_reference_published", None) is False:
            return ""

        ref = XCom.get_value(ti_key=ti_key, key=JOB_REF_XCOM_KEY)
        return (ref or {}).get("console_url") or "" if isinstance(ref, dict) else ""
