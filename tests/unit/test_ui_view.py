"""The "Training job" view's data (pure logic): which kind of page, where the job comes from, curves
and checkpoint marks."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow_training_provider.links import JobReference
from airflow_training_provider.models import Checkpoint, JobState, MetricPoint, TrainingJob
from airflow_training_provider.ui.app import map_index_param, try_number_param
from airflow_training_provider.ui.tries import TaskInstanceFacts, TryFacts, _as_ref, merge_tries
from airflow_training_provider.ui.view import PROGRAM_LOG_LINES, TrySummary, build_view, curves, program_log

WHERE = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1}


def job(state: JobState, **fields) -> TrainingJob:
    return TrainingJob(id="j1", platform="tensorone", state=state, raw_status=state.value.upper(), **fields)


def ref(seen: TrainingJob | None) -> JobReference:
    return JobReference(
        conn_id="c", platform="tensorone", job_id="j1", console_url="http://console/j1", job=seen
    )


def test_a_task_without_the_console_link_is_not_a_training_task():
    tries = [TrySummary(try_number=1), TrySummary(try_number=2)]
    view = build_view(**WHERE, ti_state="success", is_training_task=False, ref=None, tries=tries)
    assert view.kind == "not_training" and "Not a training task" in view.message and not view.live
    assert view.tries == []  # no try picker


def test_a_training_task_before_submit_waits_and_refreshes():
    view = build_view(**WHERE, ti_state="running", is_training_task=True, ref=None)
    assert view.kind == "waiting" and view.live
    ended = build_view(**WHERE, ti_state="upstream_failed", is_training_task=True, ref=None)
    assert ended.kind == "waiting" and not ended.live and "ended before" in ended.message


def test_the_platform_answer_wins_and_a_missing_one_falls_back_to_xcom_and_says_so():
    now = datetime(2026, 11, 29, 12, tzinfo=UTC)
    seen = ref(job(JobState.PENDING))
    live = build_view(
        **WHERE,
        ti_state="deferred",
        is_training_task=True,
        ref=seen,
        platform_job=job(JobState.RUNNING),
        now=now,
    )
    assert live.source == "platform" and live.job.state is JobState.RUNNING and live.live
    assert live.platform == "tensorone" and live.platform_name == "TensorOne"
    assert live.seen_at == now and live.stale_reason is None and live.console_url == "http://console/j1"
    down = build_view(
        **WHERE,
        ti_state="deferred",
        is_training_task=True,
        ref=seen,
        platform_error="ConnectionError",
        now=now,
    )
    assert down.source == "xcom" and down.job.state is JobState.PENDING and down.live
    assert "did not answer (ConnectionError)" in down.stale_reason


def test_a_finished_job_stops_the_refresh_and_shows_the_reason():
    failed = job(JobState.FAILED, message="CUDA out of memory")
    view = build_view(**WHERE, ti_state="failed", is_training_task=True, ref=ref(failed))
    assert not view.live and view.reason == "CUDA out of memory" and view.source == "xcom"


def test_curves_per_epoch_from_epoch_and_step_points():
    history = [
        MetricPoint(
            step=10, kind="epoch", epoch=1, values={"loss": 0.9, "accuracy": 0.5, "validation_loss": 1.0}
        ),
        MetricPoint(step=20, kind="epoch", epoch=2, values={"loss": 0.5, "validation_loss": 0.7}),
        MetricPoint(step=25, kind="train", epoch=2.5, values={"loss": 0.4}),
        MetricPoint(step=30, kind="eval", epoch=3, values={"validation_accuracy": 0.8}),
        MetricPoint(step=31, kind="train", values={"loss": 0.1}),  # no epoch: not drawn
    ]
    charts = curves(history)
    loss = {c.name: c.points for c in charts["loss"]}
    accuracy = {c.name: c.points for c in charts["accuracy"]}
    assert loss == {"training": [(1.0, 0.9), (2.0, 0.5), (2.5, 0.4)], "validation": [(1.0, 1.0), (2.0, 0.7)]}
    assert accuracy == {"training": [(1.0, 0.5)], "validation": [(3.0, 0.8)]}


def test_checkpoints_final_and_best_are_marked():
    checkpoints = [
        Checkpoint(id="e1", epoch=1, metrics={"validation_loss": 0.9}),
        Checkpoint(id="e2", epoch=2, metrics={"validation_loss": 0.4}),
        Checkpoint(id="e3", epoch=3, metrics={"validation_loss": 0.6}),
        Checkpoint(id="fin", epoch=3, kind="final", metrics={"validation_loss": 0.6}),
    ]
    view = build_view(
        **WHERE,
        ti_state="success",
        is_training_task=True,
        ref=ref(job(JobState.CANCELLED, checkpoints=checkpoints)),
    )
    assert view.final_checkpoint_id == "fin" and view.best_checkpoint_id == "e2"
    running = job(JobState.RUNNING, checkpoints=checkpoints[:2])
    view = build_view(**WHERE, ti_state="running", is_training_task=True, ref=ref(running))
    assert view.final_checkpoint_id is None and view.best_checkpoint_id == "e2"


def test_an_unsubstituted_map_index_is_an_unmapped_task():
    assert map_index_param("{MAP_INDEX}") == -1 and map_index_param("3") == 3


def test_try_number_absent_or_not_a_try_means_the_current_try():
    assert [try_number_param(v) for v in (None, "", "x", "0", "-2", "3")] == [None] * 5 + [3]


def test_an_earlier_try_is_history_only_its_unfinished_job_keeps_the_page_live():
    tries = [TrySummary(try_number=1, ti_state="up_for_retry"), TrySummary(try_number=2, ti_state="running")]
    kept = build_view(
        **WHERE, ti_state="up_for_retry", is_training_task=True, ref=ref(job(JobState.FAILED)),
        try_number=1, tries=tries, current_try=False,
    )  # fmt: skip
    assert kept.kind == "training" and not kept.live and kept.try_number == 1 and kept.tries == tries
    left_running = build_view(
        **WHERE, ti_state="up_for_retry", is_training_task=True, ref=ref(job(JobState.RUNNING)),
        try_number=1, current_try=False,
    )  # fmt: skip
    assert left_running.live  # a job left for the retry still changes: the platform is asked
    nothing = build_view(
        **WHERE, ti_state="up_for_retry", is_training_task=True, ref=None, try_number=1, current_try=False
    )
    assert nothing.kind == "waiting" and not nothing.live and "try 1" in nothing.message
    assert nothing.program_log is None  # the program's log lines: a later change


def test_each_try_shows_its_own_record_and_only_the_current_try_falls_back_to_xcom():
    one, two = ref(job(JobState.FAILED)), ref(job(JobState.SUCCEEDED)).model_copy(update={"job_id": "j2"})
    states = {1: "failed", 2: "success"}
    tries = merge_tries(states, {1: one, 2: two}, xcom_ref=two, current=2)
    facts = TaskInstanceFacts(state="success", try_number=2, is_training=True, tries=tries)
    assert facts.pick(None).ref.job_id == "j2" and facts.pick(1).ref is one and facts.pick(7) is None
    # no records (a task run before they existed): the current try has its XCom, try 1 nothing
    bare = merge_tries(states, {}, xcom_ref=two, current=2)
    assert bare[2].ref is two and bare[1] == TryFacts(1, "failed", None)
    # an XCom another try published is not this try's (try 3 has just started)
    assert (
        merge_tries({**states, 3: "running"}, {}, two.model_copy(update={"try_number": 2}), 3)[3].ref is None
    )
    assert _as_ref(one.model_dump_json()) == one and _as_ref({"__external_ref": "s3://x"}) is None


def test_the_program_log_shows_the_last_lines_read_and_says_how_many_were_left_out():
    lines = [f"line {i}" for i in range(PROGRAM_LOG_LINES + 7)]
    log = program_log(lines, complete=False)
    assert log.lines == lines[7:] and log.earlier == 7 and not log.complete and log.note is None
    view = build_view(
        **WHERE, ti_state="success", is_training_task=True, ref=ref(job(JobState.SUCCEEDED)), program_log=log
    )
    assert view.program_log == log
    assert program_log([], True, "Not readable: x").model_dump() == {
        "lines": [],
        "earlier": 0,
        "complete": True,
        "note": "Not readable: x",
    }


def test_a_diverged_job_s_view_is_strict_json_its_nan_shown_by_name_and_left_out_of_the_curves():
    import json
    import math

    from airflow_training_provider.json_values import dump

    history = [
        MetricPoint(step=1, kind="epoch", epoch=1, values={"loss": 0.9, "validation_loss": 1.0}),
        MetricPoint(step=2, kind="epoch", epoch=2, values={"loss": math.nan, "validation_loss": math.inf}),
    ]
    diverged = job(
        JobState.SUCCEEDED,
        metrics={"loss": math.nan, "validation_loss": math.inf},
        metric_history=history,
        checkpoints=[Checkpoint(id="c2", epoch=2, metrics={"loss": math.nan})],
    )
    view = build_view(**WHERE, ti_state="success", is_training_task=True, ref=ref(diverged))
    body = json.dumps(dump(view), allow_nan=False)  # what the /data route answers
    data = json.loads(body)
    assert data["job"]["metrics"] == {"loss": "NaN", "validation_loss": "Infinity"}
    assert data["job"]["checkpoints"][0]["metrics"] == {"loss": "NaN"}
    loss = {c["metric"]: c["points"] for c in data["curves"]["loss"]}
    assert loss["loss"] == [[1.0, 0.9]] and loss["validation_loss"] == [[1.0, 1.0]]
