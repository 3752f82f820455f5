"""Each try's job stays visible: a real run with a retry against the local platform (try 1's job
fails, try 2 submits its own), each try's record in the task state store, then what the API
server answers from Airflow's own tables (a throw-away SQLite metadata database): the console link
for try 1 and try 2 (``ti_key.try_number``) and the "Training job" tab's JSON for each try."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest

from airflow_training_devel.local_fixtures import LOCAL_SECRET
from airflow_training_provider.job_task import TrainingJobFailed
from airflow_training_provider.links import JOB_REF_XCOM_KEY, TrainingJobConsoleLink, try_record_key
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.testing.inprocess import run_task, task_context
from airflow_training_provider.ui.app import training_job_view
from airflow_training_provider.ui.tries import TryConsoleLink

FAST = {"seconds_per_epoch": 0.2}


def operator(name: str, **training) -> SubmitTrainingJobOperator:
    spec = {"name": name, "datasetId": "digits", "config": {"training": {"epochs": 2, **FAST, **training}}}
    return SubmitTrainingJobOperator(
        task_id="train", conn_id="tensorone_local", spec=spec, retries=1, poll_interval=0.5
    )


@pytest.fixture(scope="module")
def two_tries(control):
    """Try 1 submits a job that fails (a bad learning rate), the task fails; try 2 (the spec fixed
    meanwhile, as a re-rendered template would be) submits its own job, which succeeds. Returns both
    tries' contexts (the task state store is shared: what a retry sees)."""
    name = f"tries-{uuid.uuid4().hex[:8]}"
    first_op = operator(name, learning_rate=-0.5)
    first = task_context(first_op)
    with pytest.raises(TrainingJobFailed):
        run_task(first_op, first)
    second_op = operator(name)
    second = task_context(second_op, try_number=2, state=first)
    second["returned"] = run_task(second_op, second)  # what Airflow writes as XCom return_value
    return first, second


def test_each_try_keeps_its_own_job_record_while_xcom_holds_the_current_try_only(two_tries):
    first, second = two_tries
    store = second["task_state_store"]
    one, two = store.get(try_record_key(1)), store.get(try_record_key(2))
    assert one["try_number"] == 1 and two["try_number"] == 2
    assert one["job_id"] != two["job_id"]
    assert one["job"]["state"] == "failed"  # the final job; a succeeded try's is its return value:
    assert two["job"] is None and two["job_in_return_value"] and second["returned"]["state"] == "succeeded"
    assert one["console_url"] and one["console_url"] != two["console_url"]
    assert first["ti"].xcoms[JOB_REF_XCOM_KEY]["job_id"] == one["job_id"]
    assert second["ti"].xcoms[JOB_REF_XCOM_KEY]["job_id"] == two["job_id"]  # a try's XComs: its own
    assert second["ti"].xcoms[TrainingJobConsoleLink().xcom_key] == two["console_url"]


def store_in_airflow(two_tries) -> tuple[str, dict, dict]:
    """What the metadata database holds after the two tries: the task instance (try 2, success),
    try 1 in the task instance history (failed), try 2's XComs (a new try cleared try 1's) and both
    records in the task state store. Returns ``(run_id, try 1's record, try 2's record)``."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.models.xcom import XComModel
    from airflow.state import TaskScope, get_state_backend
    from airflow.utils.session import create_session
    from sqlalchemy import insert

    first, second = two_tries
    run_id, now = f"manual__{uuid.uuid4().hex[:8]}", datetime.now(UTC)
    store = second["task_state_store"]
    ti_row = {
        "dag_id": "d", "run_id": run_id, "task_id": "train", "map_index": -1, "pool": "default_pool",
        "pool_slots": 1, "priority_weight": 1, "max_tries": 1, "hostname": "", "unixname": "",
        "queue": "default", "custom_operator_name": "",
    }  # fmt: skip
    with create_session() as session:
        dag_run = DagRun(dag_id="d", run_id=run_id, run_type="manual", state="success", run_after=now)
        session.add(dag_run)
        session.flush()
        session.execute(
            insert(TaskInstance.__table__).values(id=uuid.uuid4(), try_number=2, state="success", **ti_row)
        )
        session.execute(
            insert(TaskInstanceHistory.__table__).values(
                task_instance_id=uuid.uuid4(), try_number=1, state="failed", **ti_row
            )
        )
        xcoms = {**second["ti"].xcoms, "return_value": second["returned"]}
        for key in (JOB_REF_XCOM_KEY, TrainingJobConsoleLink().xcom_key, "return_value"):
            session.execute(
                insert(XComModel.__table__).values(
                    dag_run_id=dag_run.id, dag_id="d", run_id=run_id, task_id="train", map_index=-1,
                    key=key, value=json.dumps(xcoms[key]), timestamp=now,
                )
            )  # fmt: skip
        scope = TaskScope(dag_id="d", run_id=run_id, task_id="train", map_index=-1)
        for number in (1, 2):
            key = try_record_key(number)
            get_state_backend().set(scope, key, json.dumps(store.get(key)), session=session)
    return run_id, store.get(try_record_key(1)), store.get(try_record_key(2))


def test_the_console_link_and_the_tab_of_each_try_show_that_trys_job(db, two_tries):
    from airflow.models.taskinstancekey import TaskInstanceKey

    run_id, one, two = store_in_airflow(two_tries)
    link = TryConsoleLink()
    for number, record in ((1, one), (2, two)):
        key = TaskInstanceKey("d", "train", run_id, number, -1)
        assert link.get_link(None, ti_key=key) == record["console_url"]
    assert link.get_link(None, ti_key=TaskInstanceKey("d", "train", run_id, 3, -1)) == ""  # no such try

    views = {n: training_job_view("d", run_id, "train", -1, n).model_dump(mode="json") for n in (1, 2)}
    latest = training_job_view("d", run_id, "train", -1).model_dump(mode="json")
    assert latest == {**views[2], "seen_at": latest["seen_at"]}  # default: the current try
    for number, record in ((1, one), (2, two)):
        view = views[number]
        assert view["kind"] == "training" and view["try_number"] == number
        assert view["job_id"] == record["job_id"] and view["console_url"] == record["console_url"]
        assert view["source"] == "xcom" and not view["live"]  # an ended job: the platform is not asked
        assert view["program_log"] is None
    assert views[1]["ti_state"] == "failed" and views[1]["job"]["state"] == "failed" and views[1]["reason"]
    assert views[2]["ti_state"] == "success" and views[2]["job"]["state"] == "succeeded"
    assert [(t["try_number"], t["ti_state"], t["job_id"], t["job_state"]) for t in views[1]["tries"]] == [
        (1, "failed", one["job_id"], "failed"),
        (2, "success", two["job_id"], "succeeded"),
    ]
    assert LOCAL_SECRET not in json.dumps(views)  # the connection's key is never in a view
    unknown = training_job_view("d", run_id, "train", -1, 9)
    assert unknown.kind == "waiting" and not unknown.live and "try 9" in unknown.message


def test_the_api_server_answers_the_console_link_through_the_plugins_per_try_link():
    """Deserializing a DAG (what the API server does) puts the plugin's link in place of the one
    read from XCom (``_link_…``: the latest try's), for the operator and the sensor."""
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_training_provider.sensors.training_job import TrainingJobSensor

    with DAG(f"tries_{uuid.uuid4().hex[:6]}") as dag:
        SubmitTrainingJobOperator(task_id="train", conn_id="c", spec={})
        TrainingJobSensor(task_id="watch", conn_id="c", job_id="j")
    served = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    for task_id in ("train", "watch"):
        link = served.get_task(task_id).operator_extra_link_dict[TrainingJobConsoleLink.name]
        assert isinstance(link, TryConsoleLink)
