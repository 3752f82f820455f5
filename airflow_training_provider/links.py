"""What a training task publishes about its job, for people: the platform console link (an extra
link) and the job reference the Airflow UI's "Training job" view reads.

Each try's reference is also kept in the task state store under :func:`try_record_key`: a new try
clears every XCom of its task instance (Airflow 3 XComs are per task instance, not per try), while
the task state store is kept across retries and clears. The UI reads try N's job from there, so the
console link and the tab of try 1 still show try 1's job after a retry
(:mod:`airflow_training_provider.ui.tries`).

Airflow 3 does not call :meth:`get_link` while the UI is open: it shows the value the task pushed
to XCom under the link's ``xcom_key``. So the task pushes it itself right after submit — the
button then works while the task is deferred — and the task runner pushes the same value again
when the task ends (it calls :meth:`get_link`, which reads the job reference).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import BaseOperatorLink
from pydantic import BaseModel, Field

from airflow_training_provider.models import TrainingJob

#: XCom key of the :class:`JobReference` a training task publishes (per map index; the current try's).
JOB_REF_XCOM_KEY = "training_job"
#: task state store key prefix of each try's :class:`JobReference` (:func:`try_record_key`).
TRY_RECORD_PREFIX = "training_job.try"


def try_record_key(try_number: int) -> str:
    """The task state store key of try ``try_number``'s job reference (``training_job.try2``)."""
    return f"{TRY_RECORD_PREFIX}{try_number}"


class JobReference(BaseModel):
    """Which job a task instance runs, and the job as last seen by the task (never a secret).

    :ivar conn_id: the Airflow connection of the platform (the UI asks the platform through it).
    :ivar platform: the dialect name (``tensorone``, ``together``, ``sagemaker``...).
    :ivar job_id: the platform's job id.
    :ivar console_url: a link a person can open for this job (``None`` if the platform has none).
    :ivar job: the job as the task last saw it (bounded: ``results.bounded_job``): at submit, then
        the final job when the task ended — ``None`` when the task returned it (``job_in_return_value``).
    :ivar job_in_return_value: the task succeeded and returned the job (XCom ``return_value``): the
        reference does not repeat it; the UI reads it there (or, once a later try cleared it, from
        the platform).
    :ivar seen_at: when ``job`` was seen (UTC).
    :ivar try_number: the try that published this reference (a try that re-attached to an earlier
        try's job publishes that job under its own number).
    :ivar secret_references: the spec's secret references (``{"conn_id", "field"}`` or
        ``{"variable"}``: names, never values), so that whoever shows the program's log lines (the
        UI) masks the values the program may print.
    :ivar spec_known: published by the task that submitted the job from its spec (the submit
        operator), so ``secret_references`` names its secrets; ``False`` (a sensor, or a record of
        an older version): the UI shows none of the program's lines.
    :ivar unreferenced_secrets: the rendered spec holds secret values written in it or rendered
        from a template (never the values themselves): only the worker could mask them, so the UI
        shows none of the program's lines.
    """

    conn_id: str
    platform: str
    job_id: str
    console_url: str | None = None
    job: TrainingJob | None = None
    job_in_return_value: bool = False
    seen_at: datetime | None = None
    try_number: int | None = None
    secret_references: list[dict[str, str]] = Field(default_factory=list)
    spec_known: bool = False
    unreferenced_secrets: bool = False


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
