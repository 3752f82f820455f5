"""The in-process tier: operators, sensor and trigger run in this process (``testing.inprocess``)
against a real local platform over HTTP with real trainer processes — no scheduler, triggerer or
database. Fast, and judged by the platform's own records."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime

import pytest

from airflow_training_devel.local_fixtures import LOCAL_FIXTURES, connection_env
from airflow_training_platform.control import LocalPlatformControl


@pytest.fixture(scope="session")
def control(platform) -> LocalPlatformControl:
    """The session platform's ``/_local`` client; connections ``tensorone_local``, ``together_local``,
    ``aws_local`` (SageMaker), ``pai_local`` and ``modelarts_local`` point at it."""
    os.environ.update(connection_env(platform.url))
    for conn_type in ("tensorone", "together"):
        # a trailing slash on the host, as users write it: both drivers must build the same URLs
        fixture = LOCAL_FIXTURES[conn_type]
        os.environ[f"AIRFLOW_CONN_{fixture.conn_id.upper()}"] = fixture.connection_json(platform.url + "/")
    return LocalPlatformControl(platform.url)


FERNET_ENV, FERNET_KEY = "AIRFLOW__CORE__FERNET_KEY", "wZiJ8o1Lz0hMgFmzDXr5pRQb9hq0dM8vE8Yh6l6m7yU="


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """Airflow's tables in a SQLite database of this test process's own (pytest-xdist workers share
    ``$AIRFLOW_HOME``); Airflow's ORM pointed at it for the module, then back."""
    from airflow import settings
    from airflow.models import import_all_models
    from airflow.models.base import Base
    from airflow.models.crypto import get_fernet
    from airflow.models.dag import DagModel
    from airflow.models.dag_version import DagVersion
    from airflow.models.dagbundle import DagBundleModel
    from airflow.utils.session import create_session
    from sqlalchemy import insert

    import_all_models()
    before = settings.SQL_ALCHEMY_CONN
    settings.dispose_orm(do_log=False)
    settings.SQL_ALCHEMY_CONN = f"sqlite:///{tmp_path_factory.mktemp('listener-db')}/airflow.db"
    settings.configure_orm()
    Base.metadata.create_all(settings.engine)
    os.environ[FERNET_ENV] = FERNET_KEY  # trigger kwargs encrypted as in a deployment
    get_fernet.cache_clear()
    version = uuid.uuid4()
    now = datetime.now(UTC)
    try:
        with create_session() as session:
            session.execute(insert(DagBundleModel.__table__).values(name="b"))
            session.execute(
                insert(DagModel.__table__).values(
                    dag_id="d", bundle_name="b", max_active_tasks=16, max_consecutive_failed_dag_runs=0,
                    has_task_concurrency_limits=False,
                )
            )  # fmt: skip
            session.execute(
                insert(DagVersion.__table__).values(
                    id=version,
                    dag_id="d",
                    version_number=1,
                    bundle_name="b",
                    created_at=now,
                    last_updated=now,
                )
            )
        yield version
    finally:
        os.environ.pop(FERNET_ENV, None)
        get_fernet.cache_clear()
        settings.dispose_orm(do_log=False)
        settings.SQL_ALCHEMY_CONN = before
        settings.configure_orm()
