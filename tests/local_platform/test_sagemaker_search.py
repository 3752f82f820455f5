"""The local platform's SageMaker ``ListTrainingJobs`` and ``Search``, driven by boto3: the documented
defaults (ListTrainingJobs CreationTime ascending; Search LastModifiedTime descending), every Search
operator on top-level, nested, ``HyperParameters.*``, ``Metrics.*`` and ``Tags.*`` properties,
``NestedFilters``/``SubExpressions``/``Or``, paging, and a ``ValidationException`` naming whatever is
not implemented — never a filter dropped silently. Three one-epoch jobs, made once for the module."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import boto3
import botocore.exceptions
import pytest

from airflow_training_platform.platforms.sagemaker import search
from tests.conftest import API_KEY, AWS_ACCESS_KEY_ID
from tests.local_platform.test_sagemaker_api import body, wait

RUN = uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def sm(platform):
    return boto3.client(
        "sagemaker",
        endpoint_url=platform.url,
        region_name="us-east-1",
        aws_access_key_id=AWS_ACCESS_KEY_ID,
        aws_secret_access_key=API_KEY,
    )


@pytest.fixture(scope="module")
def jobs(sm) -> list[dict]:
    """Three completed jobs, created in this order: ``a`` (lr 0.1, ml.g5.xlarge, team=ml),
    ``b`` (lr 0.5, ml.p4d.24xlarge, team=ml), ``c`` (lr 0.05, ml.g5.xlarge, team=ops)."""
    specs = [("a", "0.1", "ml.g5.xlarge", "ml"), ("b", "0.5", "ml.p4d.24xlarge", "ml"),
             ("c", "0.05", "ml.g5.xlarge", "ops")]  # fmt: skip
    names = []
    for suffix, lr, instance, team in specs:
        name = f"search-{RUN}-{suffix}"
        spec = body(name, epochs=1)
        spec["HyperParameters"]["learning_rate"] = lr
        spec["ResourceConfig"]["InstanceType"] = instance
        sm.create_training_job(**spec, Tags=[{"Key": "run", "Value": RUN}, {"Key": "team", "Value": team}])
        names.append(name)
        time.sleep(0.02)  # distinct CreationTimes
    return [wait(sm, n, lambda j: j["TrainingJobStatus"] == "Completed") for n in names]


def found(sm, *filters, **extra) -> list[str]:
    """The job-name suffixes a Search of this run's jobs (``Tags.run``) and ``filters`` returns."""
    expression = {"Filters": [{"Name": "Tags.run", "Operator": "Equals", "Value": RUN}, *filters]}
    extra.setdefault("SortBy", "CreationTime")  # newest first (SortOrder's default): c, b, a
    results = sm.search(Resource="TrainingJob", SearchExpression=expression, **extra)["Results"]
    return [r["TrainingJob"]["TrainingJobName"].rsplit("-", 1)[1] for r in results]


def refusal(call) -> str:
    with pytest.raises(botocore.exceptions.ClientError) as err:
        call()
    assert err.value.response["Error"]["Code"] == "ValidationException"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    return err.value.response["Error"]["Message"]


def test_list_training_jobs_defaults_to_creation_time_ascending_and_honours_sort_and_filters(sm, jobs):
    def listed(**params) -> list[str]:
        summaries = sm.list_training_jobs(NameContains=f"search-{RUN}", **params)["TrainingJobSummaries"]
        return [s["TrainingJobName"].rsplit("-", 1)[1] for s in summaries]

    assert listed() == ["a", "b", "c"]  # AWS: SortBy CreationTime, SortOrder Ascending by default
    assert listed(SortOrder="Descending") == ["c", "b", "a"]
    assert listed(SortBy="Name", SortOrder="Descending") == ["c", "b", "a"]
    assert listed(StatusEquals="Completed", SortBy="Status") == ["a", "b", "c"]
    assert listed(StatusEquals="Failed") == []
    ab, bc = between(jobs[0], jobs[1]), between(jobs[1], jobs[2])
    assert listed(CreationTimeAfter=bc) == ["c"] and listed(CreationTimeBefore=ab) == ["a"]
    later = max(j["LastModifiedTime"] for j in jobs) + timedelta(seconds=1)
    assert listed(LastModifiedTimeAfter=later) == [] and listed(LastModifiedTimeBefore=later) == [
        "a",
        "b",
        "c",
    ]
    first = sm.list_training_jobs(NameContains=f"search-{RUN}", MaxResults=2)
    rest = sm.list_training_jobs(NameContains=f"search-{RUN}", MaxResults=2, NextToken=first["NextToken"])
    assert len(first["TrainingJobSummaries"]) == 2 and "NextToken" not in rest
    assert [s["TrainingJobName"][-1] for s in rest["TrainingJobSummaries"]] == ["c"]

    assert "WarmPoolStatusEquals" in refusal(lambda: sm.list_training_jobs(WarmPoolStatusEquals="Available"))
    assert "sortBy" in refusal(lambda: sm.list_training_jobs(SortBy="LastModifiedTime"))


def test_search_operators_on_top_level_nested_hyperparameter_metric_and_tag_properties(sm, jobs):
    a = jobs[0]
    run = {"Filters": [{"Name": "Tags.run", "Value": RUN}]}  # Operator: Equals when only a Value is given
    default = sm.search(Resource="TrainingJob", SearchExpression=run)["Results"]
    modified = [r["TrainingJob"]["LastModifiedTime"] for r in default]
    assert len(default) == 3 and modified == sorted(modified, reverse=True)  # LastModifiedTime, Descending

    def where(name: str, op: str, value: str | None = None) -> list[str]:
        return found(sm, {"Name": name, "Operator": op, **({"Value": value} if value else {})})

    assert where("TrainingJobName", "Equals", a["TrainingJobName"]) == ["a"]
    names = ",".join(j["TrainingJobName"] for j in jobs[:2])
    assert where("TrainingJobName", "In", names + ",no-such") == ["b", "a"]
    assert where("Tags.team", "NotEquals", "ml") == ["c"]
    assert where("TrainingJobName", "Contains", f"{RUN}-b") == ["b"]  # RUN may start with b
    assert where("ResourceConfig.InstanceType", "Equals", "ml.g5.xlarge") == ["c", "a"]
    assert where("ResourceConfig.InstanceCount", "GreaterThan", "1") == []
    assert where("ResourceConfig.InstanceCount", "LessThanOrEqualTo", "1") == ["c", "b", "a"]
    assert where("OutputDataConfig.S3OutputPath", "Equals", "s3://b/output") == ["c", "b", "a"]
    assert where("OutputDataConfig.KmsKeyId", "Equals", "s3://b/output") == []
    assert where("HyperParameters.learning_rate", "LessThan", "0.2") == ["c", "a"]
    assert where("HyperParameters.learning_rate", "GreaterThanOrEqualTo", "0.5") == ["b"]
    assert where("HyperParameters.learning_rate", "In", "0.5,0.05") == ["c", "b"]
    accuracy = {j["TrainingJobName"][-1]: _metric(j, "validation:accuracy") for j in jobs}
    low = str(min(accuracy.values()))
    above = sorted((k for k, v in accuracy.items() if v > float(low)), reverse=True)
    at_most = sorted((k for k, v in accuracy.items() if v <= float(low)), reverse=True)
    metric = "Metrics.validation:accuracy"
    assert where(metric, "GreaterThan", low) == above and where(metric, "LessThanOrEqualTo", low) == at_most
    assert where(metric, "Exists") == ["c", "b", "a"] and where("Metrics.no-such-metric", "Exists") == []
    assert where("FailureReason", "NotExists") == ["c", "b", "a"]
    assert where("TrainingEndTime", "GreaterThanOrEqualTo", "2000-01-01T00:00:00") == ["c", "b", "a"]
    assert where("CreationTime", "GreaterThan", str(between(jobs[1], jobs[2]).timestamp())) == ["c"]
    # a list property: any element matches; NestedFilters: one element matches all
    channel = {"Name": "InputDataConfig.ChannelName", "Operator": "Equals", "Value": "train"}
    assert found(sm, channel) == ["c", "b", "a"]
    nested = {
        "NestedPropertyName": "InputDataConfig",
        "Filters": [
            channel,
            {
                "Name": "InputDataConfig.DataSource.S3DataSource.S3Uri",
                "Operator": "Equals",
                "Value": "s3://b/digits/",
            },
        ],
    }
    expression = {"Filters": [{"Name": "Tags.run", "Value": RUN}], "NestedFilters": [nested]}
    assert sm.search(Resource="TrainingJob", SearchExpression=expression)["Results"] == []
    nested["Filters"][1]["Value"] = "s3://b/iris/"
    assert len(sm.search(Resource="TrainingJob", SearchExpression=expression)["Results"]) == 3


def test_search_sub_expressions_or_sort_and_paging(sm, jobs):
    either = {
        "SubExpressions": [
            {"Filters": [{"Name": "Tags.team", "Value": "ops"}]},
            {"Filters": [{"Name": "HyperParameters.learning_rate", "Value": "0.5"}]},
        ],
        "Operator": "Or",
    }
    expression = {"Filters": [{"Name": "Tags.run", "Value": RUN}], "SubExpressions": [either]}
    answer = sm.search(
        Resource="TrainingJob", SearchExpression=expression, SortBy="TrainingJobName", SortOrder="Ascending"
    )
    assert [r["TrainingJob"]["TrainingJobName"][-1] for r in answer["Results"]] == ["b", "c"]
    assert answer["TotalHits"] == {"Value": 2, "Relation": "EqualTo"}
    assert found(sm, SortBy="HyperParameters.learning_rate", SortOrder="Ascending") == ["c", "a", "b"]
    assert found(sm, SortBy="CreationTime", SortOrder="Ascending") == ["a", "b", "c"]
    run = {"Filters": [{"Name": "Tags.run", "Value": RUN}]}
    first = sm.search(Resource="TrainingJob", SearchExpression=run, MaxResults=2, SortBy="CreationTime")
    second = sm.search(
        Resource="TrainingJob",
        SearchExpression=run,
        MaxResults=2,
        SortBy="CreationTime",
        NextToken=first["NextToken"],
    )
    pages = [r["TrainingJob"]["TrainingJobName"][-1] for r in first["Results"] + second["Results"]]
    assert pages == ["c", "b", "a"] and "NextToken" not in second


def test_search_refuses_what_it_does_not_implement_naming_it(sm, jobs):
    def search(**params):
        return lambda: sm.search(**{"Resource": "TrainingJob", **params})

    def one(flt):
        return search(SearchExpression={"Filters": [flt]})

    assert "Experiment" in refusal(search(Resource="Experiment"))
    assert "NoSuchField" in refusal(one({"Name": "NoSuchField", "Value": "x"}))
    assert "GreaterThan" in refusal(one({"Name": "TrainingJobName", "Operator": "GreaterThan", "Value": "a"}))
    assert "In" in refusal(one({"Name": "TrainingTimeInSeconds", "Operator": "In", "Value": "1,2"}))
    assert "must be a number" in refusal(
        one({"Name": "Metrics.loss", "Operator": "LessThan", "Value": "low"})
    )
    assert "ISO 8601" in refusal(
        one({"Name": "CreationTime", "Operator": "GreaterThan", "Value": "yesterday"})
    )
    contains = {"Name": "TrainingJobName", "Operator": "Contains", "Value": "a"}
    assert "CONTAINS" in refusal(search(SearchExpression={"Filters": [contains, contains]}))
    assert "NestedPropertyName" in refusal(
        search(SearchExpression={"NestedFilters": [{"NestedPropertyName": "RoleArn", "Filters": [contains]}]})
    )
    many = [{"Name": "TrainingJobName", "Value": str(i)} for i in range(21)]
    assert "20" in refusal(search(SearchExpression={"Filters": many}))
    assert "CrossAccount" in refusal(search(CrossAccountFilterOption="CrossAccount"))
    assert "sortOrder" in refusal(search(SortOrder="Sideways"))
    assert "NoSuchField" in refusal(search(SortBy="NoSuchField"))


def test_search_by_name_or_tag_looks_up_those_jobs_alone(sm, jobs):
    """``TrainingJobName`` ``In``/``Equals`` and ``Tags.<key>`` ``Equals`` in a top-level ``And`` are
    answered from the named or tagged jobs alone (the coalesced polls of many jobs rely on it):
    the engine is asked for those names, or for that tag, not for every job."""
    asked: list[tuple] = []

    class Engine:  # records what the search asks the engine for
        def get(self, job_id, platform=None):
            asked.append(("get", job_id))
            raise search.JobNotFound(job_id)

        def list(self, platform=None, tags=()):
            asked.append(("list", tuple(tags)))
            return []

    names = ",".join(j["TrainingJobName"] for j in jobs[:2])
    search._candidates(Engine(), {"Filters": [{"Name": "TrainingJobName", "Operator": "In", "Value": names}]})
    search._candidates(Engine(), {"Filters": [{"Name": "Tags.team", "Value": "ml"}], "Operator": "And"})
    search._candidates(Engine(), {"Filters": [{"Name": "Tags.team", "Value": "ml"}], "Operator": "Or"})
    assert asked == [
        ("get", jobs[0]["TrainingJobName"]),
        ("get", jobs[1]["TrainingJobName"]),
        ("list", ("team:ml",)),
        ("list", ()),  # Or: any job may match
    ]
    by_name = {"Filters": [{"Name": "TrainingJobName", "Operator": "In", "Value": names + ",no-such-job"}]}
    results = sm.search(Resource="TrainingJob", SearchExpression=by_name)["Results"]
    assert sorted(r["TrainingJob"]["TrainingJobName"] for r in results) == sorted(names.split(","))
    assert found(sm, {"Name": "Tags.team", "Value": "ml"}) == ["b", "a"]


def between(first: dict, second: dict):
    """A moment between two jobs' CreationTimes (boto3's datetimes keep microseconds only)."""
    return first["CreationTime"] + (second["CreationTime"] - first["CreationTime"]) / 2


def _metric(job: dict, name: str) -> float:
    return next(m["Value"] for m in job["FinalMetricDataList"] if m["MetricName"] == name)
