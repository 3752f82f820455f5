"""The trained model as an asset: its URI per platform's storage, the event's extra, and the URI
handling this provider registers for OSS, OBS and platform-kept checkpoints."""

from __future__ import annotations

import urllib.parse

import pytest

from airflow_training_provider.assets import (
    checkpoint_uri,
    model_checkpoint,
    model_event_extra,
    normalize_uri,
)
from airflow_training_provider.get_provider_info import get_provider_info
from airflow_training_provider.models import Checkpoint, Cost, JobState, Progress, TrainingJob


def job(platform: str, checkpoints=()) -> TrainingJob:
    return TrainingJob(id="job/1", platform=platform, state=JobState.SUCCEEDED, raw_status="done",
                       checkpoints=list(checkpoints), metrics={"loss": 0.2}, progress=Progress(epoch=9),
                       cost=Cost(total_usd=1.25))  # fmt: skip


@pytest.mark.parametrize(
    ("platform", "path", "uri"),
    [
        ("aws", "s3://bucket/ckpt/run-1", "s3://bucket/ckpt/run-1"),
        ("pai", "oss://bucket/ckpt/", "oss://bucket/ckpt/"),
        ("modelarts", "/bucket/ckpt/", "obs://bucket/ckpt/"),  # ModelArts' own form of an OBS path
        ("tensorone", "/data/jobs/j/ckpt_final.joblib", "file:///data/jobs/j/ckpt_final.joblib"),
        ("together", None, "training://together/job%2F1/ckpt%201"),
    ],
)
def test_the_model_uri_is_the_checkpoint_s_storage_location(platform, path, uri):
    assert checkpoint_uri(job(platform), Checkpoint(id="ckpt 1", path=path)) == uri


def test_the_model_is_the_best_checkpoint_else_the_final_one_and_its_extra_says_what_made_it():
    final = Checkpoint(id="ckpt_final", epoch=9, kind="final", path="/f")
    best = Checkpoint(id="ckpt_epoch_4", epoch=4, metrics={"validation_loss": 0.3}, path="/b")
    trained = job("tensorone", [best, final])
    assert model_checkpoint(trained) == final and model_checkpoint(trained, best) == best
    extra = model_event_extra(trained, best, "early_stopping")
    assert extra == {"job_id": "job/1", "platform": "tensorone", "state": "succeeded", "checkpoint_id": "ckpt_epoch_4",
                     "epoch": 4, "metrics": {"validation_loss": 0.3}, "cost_usd": 1.25, "guard": "early_stopping",
                     "console_url": None}  # fmt: skip
    assert model_event_extra(trained, None)["metrics"] == {"loss": 0.2}  # no checkpoint: the job's


def test_uri_handling_is_registered_for_oss_obs_and_platform_checkpoints():
    (entry,) = get_provider_info()["asset-uris"]
    assert set(entry["schemes"]) == {"oss", "obs", "training"}
    assert entry["handler"] == "airflow_training_provider.assets.normalize_uri"
    parts = normalize_uri(urllib.parse.urlsplit("oss://My-Bucket/Models/x"))
    assert urllib.parse.urlunsplit(parts) == "oss://my-bucket/Models/x"
    with pytest.raises(ValueError, match="need a bucket"):
        normalize_uri(urllib.parse.urlsplit("obs:///no-bucket"))


def test_each_platform_names_the_training_data_of_its_spec_for_lineage():
    from airflow_training_provider.lineage import dataset_name
    from airflow_training_provider.platforms import modelarts, pai, sagemaker, tensorone, together
    from tests.unit import test_modelarts_dialect as ma
    from tests.unit import test_pai_dialect as pa
    from tests.unit import test_sagemaker_dialect as sm

    assert tensorone.TensorOneDialect().training_data({"name": "n", "datasetId": "ds_1"}) == [
        "tensorone://datasets/ds_1"
    ]
    assert together.TogetherDialect().training_data(
        {"training_file": "file-1", "validation_file": "file-2"}
    ) == [
        "together://files/file-1",
        "together://files/file-2",
    ]
    assert sagemaker.SageMakerDialect().training_data(sm.SPEC) == [
        c["DataSource"]["S3DataSource"]["S3Uri"] for c in sm.SPEC["InputDataConfig"]
    ]
    assert pai.PaiDialect().training_data(pa.SPEC) == ["oss://bucket/data/"]
    resumed = modelarts.ModelArtsDialect().resume_spec(ma.SPEC, "j", Checkpoint(id="c", path="/b/ckpt/"))
    assert modelarts.ModelArtsDialect().training_data(resumed) == [
        "obs://bucket/data/"
    ]  # not the resume input
    assert dataset_name("oss://bucket/data/") == ("oss://bucket", "data/")
    assert dataset_name("file:///tmp/x.joblib") == ("file", "/tmp/x.joblib")
