"""The "Training job" tab on the real stack: the local platform, PostgreSQL and Airflow (api-server,
scheduler, dag-processor, triggerer) with a login, the example DAGs and a mapped test DAG; the page
driven in Debian's headless Chromium through Playwright. Judged against the platform's own records.
A screenshot of the view is saved in ``test-artifacts/``."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from airflow_training_devel.devstack import connections, dev_stack
from airflow_training_devel.local_fixtures import LOCAL_FIXTURES, LOCAL_SECRET
from airflow_training_devel.stack import AirflowStack
from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.server import LocalPlatformServer

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
DAG = "tensorone_retrain_digits"
MAPPED = "ui_mapped_training"
CHROMIUM = shutil.which("chromium-headless-shell") or shutil.which("chromium")
# as root on a closed network: no sandbox, no background connections (they are refused here)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@dataclass
class UI:
    platform: LocalPlatformServer
    stack: AirflowStack
    control: LocalPlatformControl

    def data(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int | str = "{MAP_INDEX}",
        try_number: int | None = None,
        **kw,
    ):
        params = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index}
        if try_number is not None:
            params["try_number"] = try_number
        return requests.get(f"{self.stack.url}/training-job/data", params=params, timeout=30, **kw)

    def view(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int | str = "{MAP_INDEX}",
        try_number: int | None = None,
    ) -> dict:
        response = self.data(
            dag_id,
            run_id,
            task_id,
            map_index,
            try_number,
            headers={"Authorization": f"Bearer {self.stack.token()}"},
        )
        assert response.status_code == 200, response.text
        return response.json()

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str, map_index: int = -1):
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        return self.stack.call("GET", path, params={"map_index": map_index, "deserialize": "true"})["value"]


@pytest.fixture(scope="module")
def ui(tmp_path_factory) -> UI:
    dags = tmp_path_factory.mktemp("ui-dags")
    for src in [*(ROOT / "example_dags").glob("*.py"), *(Path(__file__).parent / "dags").glob("*.py")]:
        shutil.copy(src, dags / src.name)
    with dev_stack(tmp_path_factory.mktemp("ui"), dags, seconds_per_epoch=1.0) as (platform, stack):
        stack.wait_for_dags([DAG, MAPPED])
        yield UI(platform, stack, LocalPlatformControl(platform.url))


@pytest.fixture
def page(ui):
    """A headless Chromium page, logged in through Airflow's login form."""
    if CHROMIUM is None:
        pytest.fail(
            "Debian's chromium-headless-shell (or chromium) is not installed; `make test` installs it"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1440, "height": 1300})
        page = context.new_page()
        user, password = ui.stack.login
        page.goto(f"{ui.stack.url}/")
        page.get_by_label("Username").fill(user)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(lambda url: "/auth/login" not in url, timeout=30_000)
        try:
            yield page
        finally:
            browser.close()


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_the_plugin_routes_refuse_a_request_without_a_valid_token(ui):
    params = (DAG, "no-such-run", "train")
    assert ui.data(*params).status_code == 401
    assert ui.data(*params, headers={"Authorization": "Bearer not-a-jwt"}).status_code in (401, 403)
    assert ui.data(*params, cookies={"_token": "not-a-jwt"}).status_code in (401, 403)
    page = requests.get(f"{ui.stack.url}/training-job/view", params={"dag_id": DAG}, timeout=30)
    assert page.status_code == 401
    assert ui.view(*params)["kind"] == "not_training"  # with a token: answered (no such task instance)


def test_the_training_job_tab_shows_the_job_live_and_after_it_ended(ui, page):
    epochs = 12
    run_id = ui.stack.trigger(DAG, {"epochs": epochs, "seconds_per_epoch": 1.5})
    wait_for(lambda: ui.stack.ti_state(DAG, run_id, "train") == "deferred", 120, "the train task to defer")
    job_id = ui.xcom(DAG, run_id, "train", "job_id")
    record = ui.control.job(job_id)
    # the console link exists while the task is deferred
    links = ui.stack.call("GET", f"/dags/{DAG}/dagRuns/{run_id}/taskInstances/train/links")["extra_links"]
    assert links["Training job console"].endswith(f"/v2/training/jobs/{job_id}")

    page.goto(f"{ui.stack.url}/dags/{DAG}/runs/{run_id}/tasks/train/plugin/training-job")
    frame = page.frame_locator("iframe[src*='/training-job/view']")
    app = frame.locator("#app[data-kind='training']")
    app.wait_for(timeout=60_000)
    assert frame.locator("#job-id").inner_text() == job_id

    def loss_points() -> int:
        return int(frame.locator("#chart-loss").get_attribute("data-points-training") or 0)

    first = wait_for(lambda: loss_points(), 60, "a first epoch on the loss chart")
    grown = wait_for(lambda: loss_points() > first and loss_points(), 60, "the loss curve to grow on its own")
    assert first < grown < epochs + 1

    wait_for(lambda: ui.stack.ti_state(DAG, run_id, "train") == "success", 180, "the train task to succeed")
    record = ui.control.job(job_id)
    assert record["state"] == "succeeded"
    # the page refreshes itself until the job ended, then stops
    frame.locator("#state[data-state='succeeded']").wait_for(timeout=60_000)
    wait_for(lambda: loss_points() == epochs, 30, "one loss point per epoch")
    for chart in ("loss", "accuracy"):
        for series in ("training", "validation"):
            name = f"data-points-{series}"
            assert frame.locator(f"#chart-{chart}").get_attribute(name) == str(epochs), (chart, series)
    assert frame.locator("#chart-loss canvas").count() >= 1  # uPlot drew it
    assert frame.locator("#raw-status").inner_text() == "completed"  # TensorOne's own status
    assert "epoch 12/12" in frame.locator("#progress").inner_text()
    assert frame.locator("#cost").inner_text().startswith("$")
    rows = frame.locator("#checkpoints tbody tr")
    assert rows.count() == len(record["checkpoints"]) == epochs
    assert frame.locator("#checkpoints tr[data-marks~='final']").count() == 1
    assert frame.locator("#checkpoints tr[data-marks~='best']").count() == 1
    best = min(record["checkpoints"], key=lambda c: c["metrics"]["val_loss"])
    assert (
        frame.locator("#checkpoints tr[data-marks~='best']").get_attribute("data-checkpoint-id")
        == best["checkpoint_id"]
    )
    console = frame.locator("#console-link")
    assert console.get_attribute("href") == links["Training job console"]
    # the task instance ended too: the page stops refreshing
    frame.locator("#app[data-live='false']").wait_for(timeout=30_000)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "training-job-view.png"), full_page=True)


def test_each_map_index_and_each_try_shows_its_own_job_and_other_tasks_say_they_are_not_training(ui, page):
    run_id = ui.stack.trigger(MAPPED)
    for index in (0, 1):
        wait_for(
            lambda i=index: (
                ui.stack.call("GET", f"/dags/{MAPPED}/dagRuns/{run_id}/taskInstances/train/{i}")["state"]
                == "success"
            ),
            180,
            f"map index {index} to succeed",
        )
    views = [ui.view(MAPPED, run_id, "train", index) for index in (0, 1)]
    job_ids = [ui.xcom(MAPPED, run_id, "train", "job_id", map_index=index) for index in (0, 1)]
    assert [v["job_id"] for v in views] == job_ids and len(set(job_ids)) == 2
    for view, epochs in zip(views, (2, 3), strict=True):
        assert view["job"]["state"] == "succeeded" and view["source"] == "xcom"
        assert [len(c["points"]) for c in view["curves"]["loss"]] == [epochs, epochs]
    runs = ui.stack.call("GET", f"/dags/{DAG}/dagRuns")["dag_runs"]
    done = [r["dag_run_id"] for r in runs if r["state"] == "success"]
    assert done, "an example DAG run succeeded (the browser test's)"
    assert ui.view(DAG, done[0], "evaluate")["kind"] == "not_training"

    # after a retry each try keeps its own job: the data route, the console link, the tab's picker
    wait_for(lambda: ui.stack.ti_state(MAPPED, run_id, "retried") == "success", 120, "the retry to succeed")
    tries = {n: ui.view(MAPPED, run_id, "retried", try_number=n) for n in (1, 2)}
    assert tries[1]["job"]["state"] == "failed" and tries[1]["ti_state"] == "failed"
    assert tries[2]["job"]["state"] == "succeeded" and tries[2]["ti_state"] == "success"
    assert tries[1]["job_id"] != tries[2]["job_id"] == ui.xcom(MAPPED, run_id, "retried", "job_id")
    assert ui.view(MAPPED, run_id, "retried")["try_number"] == 2  # default: the current try
    links_path = f"/dags/{MAPPED}/dagRuns/{run_id}/taskInstances/retried/links"
    for n in (1, 2):
        links = ui.stack.call("GET", links_path, params={"try_number": n})["extra_links"]
        assert links["Training job console"] == tries[n]["console_url"], n

    page.goto(f"{ui.stack.url}/dags/{MAPPED}/runs/{run_id}/tasks/retried/plugin/training-job")
    frame = page.frame_locator("iframe[src*='/training-job/view']")
    frame.locator("#app[data-try-number='2'][data-kind='training']").wait_for(timeout=60_000)
    assert frame.locator("#job-id").inner_text() == tries[2]["job_id"]
    frame.locator("#try-picker").select_option("1")
    frame.locator("#app[data-try-number='1']").wait_for(timeout=30_000)
    assert frame.locator("#job-id").inner_text() == tries[1]["job_id"]
    assert frame.locator("#state").get_attribute("data-state") == "failed"
    assert frame.locator("#console-link").get_attribute("href") == tries[1]["console_url"]
    assert frame.locator("#program-log").is_hidden()  # TensorOne has no program log

    # a job with a log (SageMaker's CloudWatch stream): the tab shows its lines, as the data route has them
    wait_for(
        lambda: ui.stack.ti_state(MAPPED, run_id, "logged") == "success", 120, "the logged task to succeed"
    )
    program_log = ui.view(MAPPED, run_id, "logged")["program_log"]
    lines = program_log["lines"]
    assert any(line.startswith("Epoch 2") for line in lines) and program_log["complete"], program_log
    page.goto(f"{ui.stack.url}/dags/{MAPPED}/runs/{run_id}/tasks/logged/plugin/training-job")
    frame = page.frame_locator("iframe[src*='/training-job/view']")
    frame.locator("#program-log-lines").wait_for(timeout=60_000)
    assert frame.locator("#program-log-lines").inner_text().splitlines() == lines
    # Airflow's own try selector puts ?try_number= in the page's address: the tab starts on that try
    page.goto(f"{ui.stack.url}/dags/{MAPPED}/runs/{run_id}/tasks/retried/plugin/training-job?try_number=1")
    frame = page.frame_locator("iframe[src*='/training-job/view']")
    frame.locator("#app[data-try-number='1'][data-kind='training']").wait_for(timeout=60_000)


def test_while_the_platform_does_not_answer_the_view_shows_the_last_state_from_xcom(ui):
    run_id = ui.stack.trigger(DAG, {"epochs": 40, "seconds_per_epoch": 1.0})
    wait_for(lambda: ui.stack.ti_state(DAG, run_id, "train") == "deferred", 120, "the train task to defer")
    job_id = ui.xcom(DAG, run_id, "train", "job_id")
    assert ui.view(DAG, run_id, "train")["source"] == "platform"
    rule = ui.control.add_fault(method="GET", path_prefix=f"/v2/training/jobs/{job_id}", status=503, count=-1)
    try:
        time.sleep(4)  # past the view's few seconds of caching
        view = ui.view(DAG, run_id, "train")
        assert view["source"] == "xcom" and "did not answer" in view["stale_reason"]
        assert view["job"]["id"] == job_id and view["live"] is True
    finally:
        ui.control.clear_faults(rule_id=rule["id"])
    ui.stack.set_ti_state(DAG, run_id, "train", "failed")  # and the job is cancelled (on_kill)
    ui.control.wait_job(job_id, {"cancelled"}, timeout=60)
    time.sleep(4)
    view = ui.view(DAG, run_id, "train")
    assert view["source"] == "platform" and view["job"]["state"] == "cancelled" and view["live"] is False
    assert view["reason"], "the cancel reason is shown"


def test_the_connection_test_button_works_for_each_platform_connection_type(ui):
    for conn_type in ("tensorone", "together"):
        body = {"connection_id": f"{conn_type}_try", "conn_type": conn_type, "host": ui.platform.url}
        ok = ui.stack.call("POST", "/connections/test", json={**body, "password": LOCAL_SECRET})
        assert ok["status"] is True and "accepted the credentials" in ok["message"], ok
        bad = ui.stack.call("POST", "/connections/test", json={**body, "password": "wrong-key"})
        assert bad["status"] is False and bad["message"].startswith("authentication failed"), bad
    # SageMaker: Airflow's aws connection, tested by the Amazon provider (STS GetCallerIdentity)
    (aws,) = [c for c in connections(ui.platform.url) if c["conn_type"] == "aws"]
    ok = ui.stack.call("POST", "/connections/test", json=aws)
    assert ok["status"] is True and LOCAL_FIXTURES["aws"].login in ok["message"], ok
    bad = ui.stack.call("POST", "/connections/test", json={**aws, "password": "wrong-secret"})
    assert bad["status"] is False and "InvalidSignatureException" in bad["message"], bad
