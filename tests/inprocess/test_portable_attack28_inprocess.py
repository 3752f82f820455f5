"""Attack on the portable spec's failure paths (issue 28), in-process against a local platform that
runs user code: a retry after the first try submitted, a resume from a failed job's checkpoint on
each platform, the code upload failing, secret references in ``environment``, and a deferred
ModelArts job's log-read metrics on a fresh operator."""

from __future__ import annotations

import json
import socket
import uuid
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_training_devel.local_fixtures import LOCAL_FIXTURES
from airflow_training_platform.control import LocalPlatformControl
from airflow_training_provider.errors import TrainingPlatformError
from airflow_training_provider.operators import training_job as training_job_module
from airflow_training_provider.operators.training_job import SubmitTrainingJobOperator
from airflow_training_provider.testing.inprocess import first_event, run_task, task_context
from tests.inprocess.test_portable_inprocess import (  # noqa: F401  (the fixture)
    CODE_DIR,
    CONNECTIONS,
    FIXTURE,
    portable_platform,
    portable_spec,
)


def _count_uploads(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = training_job_module.upload_source

    def counting(connection, compiled, log):
        calls.append(compiled.code_uri)
        return real(connection, compiled, log)

    monkeypatch.setattr(training_job_module, "upload_source", counting)
    return calls


def test_a_retry_after_the_first_try_submitted_reattaches_without_a_second_upload(
    portable_platform, monkeypatch
):
    uploads = _count_uploads(monkeypatch)
    control = LocalPlatformControl(portable_platform.url)
    run = uuid.uuid4().hex[:8]
    first = SubmitTrainingJobOperator(
        task_id="train", conn_id="pai_local", portable_spec=portable_spec(run, epochs=3),
        deferrable=True, poll_interval=0.3, retries=2,
    )  # fmt: skip
    ctx = task_context(first)
    with pytest.raises(TaskDeferred):  # the worker dies while deferred: the trigger never runs
        first.execute(ctx)
    job_id = ctx["ti"].xcoms["job_id"]
    second = SubmitTrainingJobOperator(
        task_id="train", conn_id="pai_local", portable_spec=portable_spec(run, epochs=3),
        deferrable=True, poll_interval=0.3, retries=2,
    )  # fmt: skip
    retry = task_context(second, try_number=2, state=ctx)
    result = run_task(second, retry)
    assert result["id"] == job_id and result["state"] == "succeeded"
    assert len(uploads) == 1, uploads
    assert len([j for j in control.jobs() if run in json.dumps(j.get("request", {}))]) <= 1


def _failing_once_code(tmp_path: Path) -> Path:
    """The example script, made to fail (exit 3) after epoch 2 when it did not resume."""
    source = (CODE_DIR / "train.py").read_text()
    anchor = '        save_checkpoint(paths["checkpoints"], model, epoch)\n\n    if first_epoch'
    assert anchor in source
    patched = source.replace(
        anchor,
        '        save_checkpoint(paths["checkpoints"], model, epoch)\n'
        "        if first_epoch == 1 and epoch == 2:\n"
        '            print("failing on purpose after epoch 2", flush=True)\n'
        "            sys.exit(3)\n\n    if first_epoch",
    )
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(patched)
    return code


@pytest.mark.parametrize("platform", list(CONNECTIONS))
def test_resume_from_checkpoint_with_a_portable_spec_lands_where_the_script_reads_it(
    portable_platform, platform, tmp_path
):
    control = LocalPlatformControl(portable_platform.url)
    run = uuid.uuid4().hex[:8]
    spec = portable_spec(run, epochs=4)
    spec["source_dir"] = str(_failing_once_code(tmp_path))

    def op():
        return SubmitTrainingJobOperator(
            task_id="train", conn_id=CONNECTIONS[platform], portable_spec=spec, deferrable=False,
            poll_interval=0.3, retries=1, resume_from_checkpoint=True,
        )  # fmt: skip

    first = op()
    ctx = task_context(first)
    with pytest.raises(AirflowException):
        run_task(first, ctx)
    failed = control.job(ctx["ti"].xcoms["job_id"])
    assert failed["state"] == "failed", failed["state"]
    second = op()
    retry = task_context(second, try_number=2, state=ctx)
    result = run_task(second, retry)
    job = control.job(retry["ti"].xcoms["job_id"])
    assert result["state"] == "succeeded"
    assert any(line.startswith("resuming from the checkpoint of epoch 2") for line in job["logs"]), job[
        "logs"
    ][:6]
    assert not any(line.startswith("epoch=1 ") for line in job["logs"]), job["logs"][:6]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("failure", ["store_down", "wrong_secret"])
@pytest.mark.parametrize("platform", list(CONNECTIONS))
def test_a_failed_code_upload_fails_before_submit_as_a_platform_error_naming_the_object(
    portable_platform, platform, failure, monkeypatch
):
    """The object store is down (its endpoint refuses connections), or refuses the connection's
    key: nothing is submitted, and the task fails with what ``PlatformStorage.put`` documents — a
    ``TrainingPlatformError`` whose message names the object (bucket and key) — not the cloud
    SDK's own exception (``oss2`` shows a dict, OBS a bare ``[Errno 111] Connection refused``)."""
    control = LocalPlatformControl(portable_platform.url)
    before = len(control.jobs())
    conn_id = CONNECTIONS[platform]
    fixture = LOCAL_FIXTURES[FIXTURE[platform]]
    secret = "wrong-secret" if failure == "wrong_secret" else None
    conn = json.loads(
        fixture.connection_json(portable_platform.url, **({"secret": secret} if secret else {}))
    )
    if failure == "store_down":
        down = f"http://127.0.0.1:{_free_port()}"
        if platform == "sagemaker":
            conn["extra"]["service_config"] = {"s3": {"endpoint_url": down}}
        else:
            monkeypatch.setattr("airflow_training_provider.storage._local_endpoint", lambda connection: down)
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
    op = SubmitTrainingJobOperator(
        task_id="train", conn_id=conn_id, portable_spec=portable_spec(uuid.uuid4().hex[:8], epochs=1),
        deferrable=False, poll_interval=0.3, retries=1,
    )  # fmt: skip
    with pytest.raises(Exception) as raised:
        run_task(op, task_context(op))
    assert len(control.jobs()) == before, "nothing was submitted"
    message = str(raised.value)
    assert isinstance(raised.value, TrainingPlatformError), (type(raised.value), message[:300])
    assert "/code/" in message, message[:300]


SECRET = "portable-env-secret-" + uuid.uuid4().hex


def test_a_secret_reference_in_environment_leaks_nowhere(portable_platform, monkeypatch, capfd):
    monkeypatch.setenv("AIRFLOW_VAR_PORTABLE_SECRET", SECRET)
    control = LocalPlatformControl(portable_platform.url)
    spec = portable_spec(uuid.uuid4().hex[:8], epochs=1)
    spec["environment"] = {"HF_TOKEN": {"secret": {"variable": "portable_secret"}}, "PLAIN": "x"}
    op = SubmitTrainingJobOperator(
        task_id="train", conn_id="aws_local", portable_spec=spec, deferrable=True, poll_interval=0.3
    )
    ctx = task_context(op)
    kwargs_seen: list[str] = []
    try:
        op.execute(ctx)
    except TaskDeferred as deferred:
        kwargs_seen.append(json.dumps(deferred.trigger.serialize()[1], default=str))
    result = run_task(op, ctx)
    request = control.job(ctx["ti"].xcoms["job_id"])["request"]
    assert request["Environment"]["HF_TOKEN"] == SECRET
    assert SECRET not in json.dumps(ctx["ti"].xcoms, default=str)
    assert SECRET not in json.dumps(result, default=str)
    assert SECRET not in "".join(kwargs_seen)
    assert SECRET not in json.dumps(op.spec) and SECRET not in json.dumps(op.portable_spec)
    assert SECRET not in "".join(capfd.readouterr())


def test_a_deferred_modelarts_job_reports_log_metrics_on_a_fresh_operator_and_a_failing_log_read_does_not_fail_it(
    portable_platform,
):
    control = LocalPlatformControl(portable_platform.url)
    run = uuid.uuid4().hex[:8]

    def op():
        return SubmitTrainingJobOperator(
            task_id="train", conn_id="modelarts_local", portable_spec=portable_spec(run, epochs=2),
            deferrable=True, poll_interval=0.3,
        )  # fmt: skip

    first = op()
    ctx = task_context(first)
    with pytest.raises(TaskDeferred) as deferred:
        first.execute(ctx)
    import asyncio

    classpath, kwargs = deferred.value.trigger.serialize()
    from airflow.sdk.module_loading import import_string

    kwargs = json.loads(json.dumps(kwargs))
    kwargs.update(resume_settle=0.0, spread_polls=False)
    event = asyncio.run(first_event(import_string(classpath)(**kwargs)))
    fresh = op()  # the task runner resumes on a new operator instance
    result = fresh.resume_execution(
        deferred.value.method_name, {**(deferred.value.kwargs or {}), "event": event.payload}, ctx
    )
    assert result["state"] == "succeeded"
    assert result["metrics"].get("epoch") == 2.0, result["metrics"]
    # the same, with the log preview failing: the job succeeded, so must the task
    rule = control.add_fault(path_suffix="/logs/preview", status=500, count=-1)
    try:
        again = op()
        result2 = again.resume_execution(
            deferred.value.method_name, {**(deferred.value.kwargs or {}), "event": event.payload}, ctx
        )
        fired = control.fault(rule["id"])["fired"]
    finally:
        control.clear_faults(rule_id=rule["id"])
    assert fired >= 1, "the log preview was read"
    assert result2["state"] == "succeeded"


@pytest.mark.parametrize("deferrable", [False, True])
def test_a_kill_while_the_code_uploads_submits_no_job(portable_platform, monkeypatch, deferrable):
    """SIGTERM (a user marks the task failed) lands while ``source_dir`` uploads: Airflow's handler
    calls ``on_kill`` (no job yet: nothing to cancel) and returns into the upload. The try must
    then stop, not go on to submit a job that nobody waits for or cancels."""
    control = LocalPlatformControl(portable_platform.url)
    run = uuid.uuid4().hex[:8]
    op = SubmitTrainingJobOperator(
        task_id="train", conn_id="pai_local", portable_spec=portable_spec(run, epochs=200),
        deferrable=deferrable, poll_interval=0.3,
    )  # fmt: skip
    real = training_job_module.upload_source

    def killed_while_uploading(connection, compiled, log):
        op.on_kill()  # what Airflow's SIGTERM handler does, on the main thread, mid-upload
        return real(connection, compiled, log)

    monkeypatch.setattr(training_job_module, "upload_source", killed_while_uploading)
    ctx = task_context(op)
    with pytest.raises(BaseException) as raised:  # noqa: B017 - whatever it raises, it must not go on
        op.execute(ctx)
    assert not isinstance(raised.value, TaskDeferred), "the killed try deferred on a job it submitted"
    submitted = ctx["ti"].xcoms.get("job_id")
    if submitted is not None:
        job = control.job(submitted)
        assert job["state"] in ("cancelled", "cancelling", "stopping"), (
            f"job {submitted} was submitted after the kill and left {job['state']}"
        )


def test_a_succeeded_deferred_job_is_not_failed_by_recompiling_on_the_resuming_worker(
    portable_platform, tmp_path
):
    """The job succeeded; the task resumes (``execute_complete``) on a fresh operator, on a worker
    where ``source_dir`` is not where the submitting worker had it (another worker, a new DAG
    bundle version). Nothing is left to upload or compile on SageMaker (its metrics come from the
    platform): the task must succeed, not fail with ``source_dir ... is not a directory``."""
    import asyncio
    import shutil

    from airflow.sdk.module_loading import import_string

    code = tmp_path / "code"
    shutil.copytree(CODE_DIR, code)
    spec = portable_spec(uuid.uuid4().hex[:8], epochs=2)
    spec["source_dir"] = str(code)

    def op():
        return SubmitTrainingJobOperator(
            task_id="train", conn_id="aws_local", portable_spec=spec, deferrable=True, poll_interval=0.3
        )

    first = op()
    ctx = task_context(first)
    with pytest.raises(TaskDeferred) as deferred:
        first.execute(ctx)
    classpath, kwargs = deferred.value.trigger.serialize()
    kwargs = json.loads(json.dumps(kwargs))
    kwargs.update(resume_settle=0.0, spread_polls=False)
    event = asyncio.run(first_event(import_string(classpath)(**kwargs)))
    shutil.rmtree(code)  # not on the worker that resumes the task
    result = op().resume_execution(
        deferred.value.method_name, {**(deferred.value.kwargs or {}), "event": event.payload}, ctx
    )
    assert result["state"] == "succeeded"


def test_the_local_oss_store_refuses_a_body_that_does_not_match_its_signed_content_md5(portable_platform):
    """OSS (and OBS) sign ``Content-MD5``; the real stores answer 400 ``InvalidDigest`` when the
    body does not match it. The local store must not keep a body the signature does not cover."""
    import base64
    import hashlib
    from email.utils import formatdate

    import requests

    from airflow_training_platform.platforms.object_put import signature

    date = formatdate(usegmt=True)
    md5 = base64.b64encode(hashlib.md5(b"signed body").digest()).decode()
    key = f"attack28/{uuid.uuid4().hex}.txt"
    to_sign = f"PUT\n{md5}\napplication/octet-stream\n{date}\n/ml-training-local/{key}"
    from airflow_training_devel.local_fixtures import LOCAL_SECRET

    answer = requests.put(
        f"{portable_platform.url}/ml-training-local/{key}",
        data=b"another body",
        headers={
            "Date": date,
            "Content-MD5": md5,
            "Content-Type": "application/octet-stream",
            "Authorization": f"OSS LTAILOCALTEST:{signature(LOCAL_SECRET, to_sign)}",
        },
        timeout=10,
    )
    stored = Path(portable_platform.data_dir) / "oss" / "ml-training-local" / key
    assert answer.status_code == 400 and not stored.exists(), (answer.status_code, answer.text[:200])


@pytest.mark.parametrize("platform", list(CONNECTIONS))
def test_a_retry_finds_the_first_tries_job_by_its_tags_when_the_store_write_was_lost(
    portable_platform, platform, monkeypatch
):
    """The worker died between the submit and the task state store write (K13): the retry finds
    the job by its identity tags (merged with the portable spec's own tags) and re-attaches: one
    job, one upload."""
    uploads = _count_uploads(monkeypatch)
    run = uuid.uuid4().hex[:8]

    def op():
        return SubmitTrainingJobOperator(
            task_id="train", conn_id=CONNECTIONS[platform], portable_spec=portable_spec(run, epochs=2),
            deferrable=True, poll_interval=0.3, retries=2,
        )  # fmt: skip

    first = op()
    ctx = task_context(first)
    with pytest.raises(TaskDeferred):
        first.execute(ctx)
    job_id = ctx["ti"].xcoms["job_id"]
    ctx["task_state_store"].values.clear()  # the store write never happened
    second = op()
    result = run_task(second, task_context(second, try_number=2, state=ctx))
    assert result["id"] == job_id and result["state"] == "succeeded"
    assert len(uploads) == 1, uploads


def test_templated_portable_fields_render_numbers_from_strings_and_compile_at_render(portable_platform):
    """Jinja in the portable spec (numbers rendered as strings) renders and compiles at render
    time: the rendered ``spec`` is the native body, with the numbers as the platform wants them."""
    import datetime as dt

    from airflow.sdk import DAG

    spec = portable_spec("{{ params.run }}", epochs="{{ params.epochs }}")
    spec["resources"]["instance_count"] = "{{ params.nodes }}"
    spec["max_runtime"] = "{{ params.hours * 3600 }}"
    with DAG("attack28_tpl", schedule=None, start_date=dt.datetime(2026, 1, 1),
             params={"run": "r1", "epochs": 3, "nodes": 2, "hours": 2}):  # fmt: skip
        op = SubmitTrainingJobOperator(task_id="train", conn_id="pai_local", portable_spec=spec)
    ctx = task_context(op)
    ctx["params"] = {"run": "r1", "epochs": 3, "nodes": 2, "hours": 2}
    op.render_template_fields(ctx)
    assert op.compile_error is None, op.compile_error
    assert op.spec["ComputeResource"]["EcsCount"] == 2
    assert op.spec["Scheduler"]["MaxRunningTimeInSeconds"] == 7200
    assert {"Name": "epochs", "Value": "3"} in op.spec["HyperParameters"]
    assert op.spec["OutputChannels"][0]["OutputUri"].endswith("portable/models/r1/")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({**portable_spec("r", epochs=1), "ouput": "models/"}, "ouput"),
        ({**portable_spec("r", epochs=1), "options": {"sagemker": {}}}, "options"),
        ({k: v for k, v in portable_spec("r", epochs=1).items() if k != "resources"}, "resources"),
    ],
)
def test_a_malformed_portable_spec_without_templates_fails_the_dag_parse(spec, field):
    """A portable spec with no Jinja in it can be validated when the DAG is parsed (it needs no
    connection): a misspelt or missing field is a bad parameter value, which the operator's
    docstring says raises ``ValueError`` at parse time — not a task failure on every run."""
    with pytest.raises(ValueError, match=field):
        SubmitTrainingJobOperator(task_id="train", conn_id="pai_local", portable_spec=spec)


def test_a_templated_portable_spec_is_still_accepted_at_parse():
    spec = portable_spec("{{ run_id }}", epochs="{{ params.epochs }}")
    SubmitTrainingJobOperator(task_id="train", conn_id="pai_local", portable_spec=spec)


@pytest.mark.parametrize("platform", list(CONNECTIONS))
def test_one_transient_503_from_the_object_store_does_not_fail_the_try(portable_platform, platform):
    """The store answers one 503 (SlowDown / ServiceUnavailable) to a code upload, then recovers:
    as for the platform's API (K14), a transient answer is retried, not the end of the try."""
    control = LocalPlatformControl(portable_platform.url)
    rule = control.add_fault(method="PUT", path_prefix="/ml-training-local/code/", status=503, count=1)
    try:
        op = SubmitTrainingJobOperator(
            task_id="train", conn_id=CONNECTIONS[platform],
            portable_spec=portable_spec(uuid.uuid4().hex[:8], epochs=1),
            deferrable=False, poll_interval=0.3, wait_for_completion=False,
        )  # fmt: skip
        run_task(op, task_context(op))
        fired = control.fault(rule["id"])["fired"]
    finally:
        control.clear_faults(rule_id=rule["id"])
    assert fired == 1
