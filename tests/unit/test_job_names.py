"""Job names and job lookup per task instance, on every platform: the names the provider gives
(SageMaker ``TrainingJobName``, PAI ``TrainingJobName``, ModelArts ``metadata.name``) are unique per
map index, per try and per task instance, stems included, valid by each platform's documented
limits (``docs/platforms/<platform>.md``, "Job names") with long ids, task groups, map index 9999
and try 99, and the same each time they are computed for one try; TensorOne's ``name`` and
Together's ``suffix`` are the user's; re-attach and the reaper find each map index's own job.
Pure logic, no I/O."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from airflow_training_provider.errors import JobAlreadyExistsError
from airflow_training_provider.identity import TaskIdentity
from airflow_training_provider.lifecycle.operations import JobOperations
from airflow_training_provider.platforms import PLATFORMS, modelarts, pai, sagemaker, tensorone, together
from airflow_training_provider.platforms.base import ApiRequest, Dialect, tag_pairs
from tests.unit import test_modelarts_dialect as ma
from tests.unit import test_pai_dialect as pa
from tests.unit import test_sagemaker_dialect as sm
from tests.unit.canned import Canned
from tests.unit.test_dialect_conformance import CASES as CONFORMANCE


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A function setting the dotted ``path`` of a spec copy to ``value`` (removing it for ``None``)."""
    *parents, leaf = path.split(".")

    def apply(spec: dict[str, Any]) -> dict[str, Any]:
        out = dict(spec)
        node = out
        for part in parents:
            node[part] = dict(node.get(part) or {})
            node = node[part]
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
        return out

    return apply


def _get(path: str, spec: dict[str, Any]) -> Any:
    for part in path.split("."):
        spec = spec[part]
    return spec


@dataclass(frozen=True)
class Namer:
    """A platform whose job names the provider gives: where the name goes, and the documented limits."""

    dialect: Dialect
    spec: dict[str, Any]  # a valid create body
    field: str  # dotted path of the name in the body
    limit: int  # documented maximum length
    pattern: str  # documented characters (full match)


NAMERS = {
    # docs/platforms/sagemaker.md: 1–63 of [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}, unique per account and region
    "sagemaker": Namer(sagemaker.SageMakerDialect(), sm.SPEC, "TrainingJobName", 63,
                       r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"),
    # docs/platforms/pai.md: at most 64 of [A-Za-z0-9_-], starting with a letter or digit
    "pai": Namer(pai.PaiDialect(), pa.SPEC, "TrainingJobName", 64, r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"),
    # docs/platforms/modelarts.md: metadata.name, 1–64 of [A-Za-z0-9_-]
    "modelarts": Namer(modelarts.ModelArtsDialect(), ma.SPEC, "metadata.name", 64, r"[A-Za-z0-9_-]{1,64}"),
}  # fmt: skip
RUN = "scheduled__2026-01-01T00:00:00+00:00"
#: (stem, dag_id, run_id, task_id): Airflow allows 250 characters for each id; a task in a task
#: group is ``group.task`` (its id counts the group's)
KINDS = {
    "plain": (None, "churn", RUN, "train"),
    "a stem": ("churn-20260101", "churn", RUN, "train"),
    "long ids in a task group": (None, "d" * 250, "manual__" + "r" * 242, "group." + "t" * 244),
    "a stem as long as allowed": ("s" * 63, "churn", RUN, "grp.train"),
}
MAP_INDEXES = (-1, 0, 1, 2, 9999)
TRIES = (1, 2, 99)


def identity(dag: str = "churn", run: str = RUN, task: str = "train", map_index: int = -1, try_number: int = 1,
             deployment: str = "prod") -> TaskIdentity:  # fmt: skip
    return TaskIdentity(dag, run, task, map_index, try_number, deployment)


def tagged_spec(namer: Namer, stem: str | None, ident: TaskIdentity) -> dict[str, Any]:
    """The create body the provider sends for ``ident``'s try: ``with_tags`` of the validated spec."""
    spec = namer.dialect.validate_spec(_set(namer.field, stem)(namer.spec))
    return namer.dialect.with_tags(spec, ident.tags())


def name_of(namer: Namer, stem: str | None, ident: TaskIdentity) -> str:
    return _get(namer.field, tagged_spec(namer, stem, ident))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("platform", NAMERS)
def test_names_are_unique_per_map_index_and_try_valid_and_deterministic(platform, kind):
    namer = NAMERS[platform]
    stem, dag, run, task = KINDS[kind]
    names = {}
    for map_index in MAP_INDEXES:
        for try_number in TRIES:
            ident = identity(dag, run, task, map_index, try_number)
            tagged = tagged_spec(namer, stem, ident)
            name = _get(namer.field, tagged)
            assert re.fullmatch(namer.pattern, name) and len(name) <= namer.limit, name
            assert name == name_of(namer, stem, ident), "the same for one try, every time"
            # what is sent is a spec the provider itself accepts (its name and tags within limits)
            assert _get(namer.field, namer.dialect.validate_spec(tagged)) == name
            assert name.endswith(f"-t{try_number}")
            assert (f"-m{map_index}-" in name) == (map_index >= 0), name
            if stem:  # the stem leads, cut only when the whole name would be too long
                assert name.startswith(f"{stem}-" if len(stem) < 30 else stem[:30])
            names[(map_index, try_number)] = name
    assert len(set(names.values())) == len(names), names


def test_what_the_names_look_like():
    mapped = identity(map_index=2)
    digest = "c5dcaa4a4a"  # sha256 of "prod\nchurn\n<run>\ntrain\n2", first 10 hex characters
    assert name_of(NAMERS["sagemaker"], "churn-20260101", mapped) == f"churn-20260101-m2-{digest}-t1"
    assert name_of(NAMERS["pai"], "churn-20260101", mapped) == f"churn-20260101-m2-{digest}-t1"
    assert name_of(NAMERS["modelarts"], "churn-20260101", mapped) == f"churn-20260101-m2-{digest[:8]}-t1"
    plain = identity(dag="nightly_retrain", task="group.train", try_number=3)
    assert re.fullmatch(
        r"af-nightly-retrain-group-train-[0-9a-f]{10}-t3", name_of(NAMERS["sagemaker"], None, plain)
    )
    assert re.fullmatch(
        r"af-nightly_retrain-group-train-[0-9a-f]{10}-t3", name_of(NAMERS["pai"], None, plain)
    )
    # long ids: the readable part is cut, map index, digest and try never are
    long = identity(dag="d" * 250, task="group." + "t" * 244, map_index=9999, try_number=99)
    name = name_of(NAMERS["sagemaker"], None, long)
    assert len(name) == 63 and re.fullmatch(r"af-d{39}-m9999-[0-9a-f]{10}-t99", name), name


@pytest.mark.parametrize("platform", NAMERS)
def test_equal_stems_of_different_task_instances_never_give_one_name(platform):
    # a stem that renders the same elsewhere (churn-{{ ds_nodash }} in a second DAG, a manual run on
    # the same date, another deployment on the same account) still names another job
    namer = NAMERS[platform]
    one = identity(map_index=1)
    others = [
        identity(dag="churn_copy", map_index=1),
        identity(run="manual__2026-01-01T09:00:00+00:00", map_index=1),
        identity(task="train_again", map_index=1),
        identity(map_index=1, deployment="staging"),
        identity(map_index=11),
    ]
    names = [name_of(namer, "churn-20260101", i) for i in [one, *others]]
    assert len(set(names)) == len(names), names


@pytest.mark.parametrize(
    ("platform", "spec", "field"),
    [(tensorone.PLATFORM, {"name": "sweep-lr0.01", "datasetId": "digits"}, "name"),
     (together.PLATFORM, {"model": "org/base-8b", "training_file": "file-abc", "suffix": "churn"}, "suffix")],
    ids=["tensorone", "together"],
)  # fmt: skip
def test_tensorone_and_together_keep_the_users_name(platform, spec, field):
    # neither names a job by it: TensorOne assigns jobId, Together the id (and appends its own
    # random part to the output model name); neither documents names as unique
    dialect = platform.dialect()
    for map_index in (0, 1):
        tagged = dialect.with_tags(dialect.validate_spec(spec), identity(map_index=map_index).tags())
        assert tagged[field] == spec[field] and dialect.created_job_id(tagged) is None


def test_every_platform_is_covered():
    assert sorted([*NAMERS, "tensorone", "together"]) == sorted(p.dialect.name for p in PLATFORMS.values())


# -- re-attach and the reaper: by tags, the map index included ---------------------------------------
_JOB_ID_FIELD = {
    "tensorone": "jobId",
    "together": "id",
    "sagemaker": "TrainingJobName",
    "pai": "TrainingJobId",
    "modelarts": "metadata.id",
}
#: each platform's list answer around its job objects
_LIST_BODY: dict[str, Callable[[list[dict[str, Any]]], dict[str, Any]]] = {
    "tensorone": lambda jobs: {"jobs": jobs},
    "together": lambda jobs: {"data": jobs},
    "sagemaker": lambda jobs: {"Results": [{"TrainingJob": j} for j in jobs]},
    "pai": lambda jobs: {"TrainingJobs": jobs, "TotalCount": len(jobs)},
    "modelarts": lambda jobs: {"total": len(jobs), "count": len(jobs), "items": jobs},
}
#: the list request of map index 1's task tags asks the platform for that map index only
ASKS_FOR_MAP_INDEX_1: dict[str, Callable[[ApiRequest], bool]] = {
    "tensorone": lambda r: ("tag", "airflow-map:1") in r.params,
    "together": lambda r: (together.TAG_QUERY_PARAM, "airflow-map:1") in r.params,
    "sagemaker": lambda r: (
        {"Name": "Tags.airflow-map", "Operator": "Equals", "Value": "1"}
        in r.body["SearchExpression"]["Filters"]
    ),
    "pai": lambda r: json.loads(r.params["Labels"])["airflow-map"] == "1",
    "modelarts": lambda r: {"key": "name", "operator": "like", "value": [MAP_1_DIGEST]} in r.body["filters"],
}
MAP_1_DIGEST = modelarts.identity_digest(identity(map_index=1).task_tags())


@pytest.mark.parametrize("case", CONFORMANCE, ids=[c.platform.dialect.name for c in CONFORMANCE])
def test_reattach_finds_its_own_map_index_job_not_a_siblings(case):
    dialect = case.platform.dialect()
    platform = dialect.name
    siblings = [identity(map_index=i) for i in (0, 1, 2)] + [identity(map_index=-1)]
    jobs = [
        _set(_JOB_ID_FIELD[platform], f"job-{i.map_index}")(case.with_tags_in_job(case.job, i.tags()))
        for i in siblings
    ]
    own = identity(map_index=1, try_number=2)
    request = dialect.list_request(own.task_tags())
    # the list call asks for map index 1 (ModelArts: for the name digest of map index 1's jobs)
    assert ASKS_FOR_MAP_INDEX_1[platform](request)
    # a platform that answers every sibling (filter ignored): the lifecycle keeps the one of map index 1
    canned = Canned({(request.method, request.path): [_LIST_BODY[platform](jobs)]})
    found = canned.drive(JobOperations(dialect, "http://p", canned.clock).list_jobs(own.task_tags()))
    assert [j.id for j in found] == ["job-1"]
    # the reaper reads the task instance back from the job's tags: its map index included
    everyone = canned.drive(
        JobOperations(dialect, "http://p", canned.clock).list_jobs(["airflow-deployment:prod"])
    )
    assert sorted((j.id, TaskIdentity.from_tags(j.tags).map_index) for j in everyone) == [
        ("job--1", -1),
        ("job-0", 0),
        ("job-1", 1),
        ("job-2", 2),
    ]


def test_a_resent_create_of_one_map_index_never_takes_a_siblings_job():
    # map index 1's create answered ResourceInUse: its own job (this try's tags) is read back, a
    # job carrying map index 0's tags under that name is an error, never adopted
    dialect = sagemaker.SageMakerDialect()
    own = identity(map_index=1)
    spec = dialect.with_tags(
        dialect.validate_spec({**sm.SPEC, "TrainingJobName": "churn-20260101"}), own.tags()
    )
    name = spec["TrainingJobName"]
    in_use = JobAlreadyExistsError("exists", status=400, code="ResourceInUse")

    def search(ident: TaskIdentity) -> dict[str, Any]:
        tags = [{"Key": k, "Value": v} for k, v in tag_pairs(ident.tags()).items()]
        return {"Results": [{"TrainingJob": {**sm.DESCRIBE, "TrainingJobName": name, "Tags": tags}}]}

    canned = Canned({("POST", "/"): [in_use, search(own)]})
    assert (
        canned.drive(JobOperations(dialect, "http://p", canned.clock).create_job(spec, own.tags())).id == name
    )
    canned = Canned({("POST", "/"): [in_use, search(identity(map_index=0))]})
    with pytest.raises(JobAlreadyExistsError):
        canned.drive(JobOperations(dialect, "http://p", canned.clock).create_job(spec, own.tags()))
