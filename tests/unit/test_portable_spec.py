"""The portable training spec: validation, each platform's compiled body (the compile table of
``docs/portable-spec.md``), the vendors' own clients taking those bodies, and one test per field a
platform cannot serve."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from airflow_training_provider.platforms.modelarts import ModelArtsDialect
from airflow_training_provider.platforms.pai import PaiDialect
from airflow_training_provider.platforms.sagemaker import SageMakerDialect
from airflow_training_provider.platforms.tensorone import TensorOneDialect
from airflow_training_provider.platforms.together import TogetherDialect
from airflow_training_provider.portable import (
    Placement,
    PortableSpecError,
    PortableTrainingSpec,
    metrics_from_lines,
    parse_portable,
)

DIALECTS = {"sagemaker": SageMakerDialect(), "pai": PaiDialect(), "modelarts": ModelArtsDialect()}
ROOTS = {"sagemaker": "s3://b/ml/", "pai": "oss://b/ml/", "modelarts": "obs://b/ml/"}
DISPLAY = {"sagemaker": "SageMaker", "pai": "PAI", "modelarts": "ModelArts"}
DIGEST = "0123456789abcdef"
ROLE = "arn:aws:iam::123456789012:role/Train"
ENGINE = {"engine_name": "PyTorch", "engine_version": "pytorch_2.1.0-cuda_12.1-py_3.10"}


def changed(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes`` (a ``None`` drops the field)."""
    return {
        **{k: v for k, v in base.items() if k not in changes},
        **{k: v for k, v in changes.items() if v is not None},
    }


def spec(**changes: Any) -> dict[str, Any]:
    """A script-mode spec every platform serves; ``changes`` replace its fields (``None`` drops one)."""
    base: dict[str, Any] = {
        "name": "digits",
        "image": {"sagemaker": "sm/sklearn:1", "pai": "pai/pytorch:2.1"},
        "source_dir": "training_code",
        "entry_point": "train.py",
        "inputs": {"train": "data/digits/"},
        "output": "models/",
        "checkpoints": "checkpoints/run-1/",
        "hyperparameters": {"epochs": "10", "learning_rate": 0.05, "shuffle": True},
        "environment": {"LOG_LEVEL": "info", "HF_TOKEN": {"secret": {"variable": "hf_token"}}},
        "resources": {
            "instance_type": {
                "sagemaker": "ml.g5.xlarge",
                "pai": "ecs.gn7i-c8g1.2xlarge",
                "modelarts": "modelarts.vm.gpu.t4u8",
            },
            "instance_count": 2,
        },  # fmt: skip
        "max_runtime": 7200,
        "metric_definitions": {
            "loss": r"\bloss=([0-9.]+)",
            "validation_accuracy": r"validation_accuracy=([0-9.]+)",
        },
        "tags": {"team": "ml"},
        "options": {"sagemaker": {"RoleArn": ROLE}, "modelarts": {"algorithm": {"engine": ENGINE}}},
    }
    return changed(base, changes)


def compile_for(platform: str, given: dict[str, Any], root: str | None = "default") -> dict[str, Any]:
    place = Placement(
        DIALECTS[platform].storage_scheme or "",
        DISPLAY[platform],
        ROOTS[platform] if root == "default" else root,
        DIGEST,
    )
    return DIALECTS[platform].compile_portable(parse_portable(given), place)


def refused(platform: str, given: dict[str, Any], root: str | None = "default") -> PortableSpecError:
    with pytest.raises(PortableSpecError) as info:
        compile_for(platform, given, root)
    return info.value


def resolved(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with its secret reference replaced by a value, as the worker does before submit."""
    out = json.loads(json.dumps(body))
    for env in (
        out.get("Environment"),
        out.get("Environments"),
        (out.get("algorithm") or {}).get("environments"),
    ):
        if env and "HF_TOKEN" in env:
            env["HF_TOKEN"] = "hf_not_a_real_token"
    return out


# -- the compile table ------------------------------------------------------------------------------
def test_sagemaker_script_mode_body():
    body = compile_for("sagemaker", spec())
    assert body == {
        "TrainingJobName": "digits",
        "RoleArn": ROLE,
        "AlgorithmSpecification": {
            "TrainingImage": "sm/sklearn:1",  # TrainingInputMode: File, filled by the validation
            "MetricDefinitions": [
                {"Name": "loss", "Regex": r"\bloss=([0-9.]+)"},
                {"Name": "validation_accuracy", "Regex": r"validation_accuracy=([0-9.]+)"},
            ],
        },
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": "s3://b/ml/data/digits/",
                        "S3DataDistributionType": "FullyReplicated",
                    }
                },
            }
        ],
        "OutputDataConfig": {"S3OutputPath": "s3://b/ml/models/"},
        "CheckpointConfig": {"S3Uri": "s3://b/ml/checkpoints/run-1/"},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 7200},
        # as the SageMaker Python SDK sends them: every value JSON-encoded
        "HyperParameters": {
            "sagemaker_program": '"train.py"',
            "sagemaker_submit_directory": f'"s3://b/ml/code/{DIGEST}/sourcedir.tar.gz"',
            "epochs": '"10"',
            "learning_rate": "0.05",
            "shuffle": "true",
        },
        "Environment": {"LOG_LEVEL": "info", "HF_TOKEN": {"secret": {"variable": "hf_token"}}},
        "Tags": [{"Key": "team", "Value": "ml"}],
    }


def test_pai_algorithm_spec_body():
    body = compile_for("pai", spec())
    assert body == {
        "TrainingJobName": "digits",
        "AlgorithmSpec": {
            "Image": "pai/pytorch:2.1",
            "Command": ["sh", "-c", "python train.py $PAI_USER_ARGS"],
            "MetricDefinitions": [
                {"Name": "loss", "Regex": r"\bloss=([0-9.]+)"},
                {"Name": "validation_accuracy", "Regex": r"validation_accuracy=([0-9.]+)"},
            ],
        },
        "CodeDir": {"LocationType": "oss", "LocationValue": {"Bucket": "b", "Key": f"ml/code/{DIGEST}/"}},
        "ComputeResource": {"EcsSpec": "ecs.gn7i-c8g1.2xlarge", "EcsCount": 2},
        "InputChannels": [{"Name": "train", "InputUri": "oss://b/ml/data/digits/"}],
        "OutputChannels": [
            {"Name": "model", "OutputUri": "oss://b/ml/models/"},
            {"Name": "checkpoints", "OutputUri": "oss://b/ml/checkpoints/run-1/"},
        ],
        "HyperParameters": [
            {"Name": "epochs", "Value": "10"},
            {"Name": "learning_rate", "Value": "0.05"},
            {"Name": "shuffle", "Value": "true"},
        ],
        "Environments": {"LOG_LEVEL": "info", "HF_TOKEN": {"secret": {"variable": "hf_token"}}},
        "Scheduler": {"MaxRunningTimeInSeconds": 7200},
        "Labels": [{"Key": "team", "Value": "ml"}],
    }


def test_modelarts_algorithm_body():
    body = compile_for("modelarts", spec())
    assert body == {
        "kind": "job",
        "metadata": {"name": "digits", "annotations": {"team": "ml"}},
        "algorithm": {
            "code_dir": f"/b/ml/code/{DIGEST}/",
            "boot_file": f"/b/ml/code/{DIGEST}/train.py",
            "engine": ENGINE,
            "parameters": [
                {"name": "epochs", "value": "10"},
                {"name": "learning_rate", "value": "0.05"},
                {"name": "shuffle", "value": "true"},
            ],
            "inputs": [{"name": "train", "remote": {"obs": {"obs_url": "/b/ml/data/digits/"}}}],
            "outputs": [
                {"name": "model_url", "remote": {"obs": {"obs_url": "/b/ml/models/"}}},
                {"name": "checkpoints", "remote": {"obs": {"obs_url": "/b/ml/checkpoints/run-1/"}}},
            ],
            "environments": {"LOG_LEVEL": "info", "HF_TOKEN": {"secret": {"variable": "hf_token"}}},
        },
        # no metric regexes: the operator applies metric_definitions to the program log
        "spec": {
            "resource": {"flavor_id": "modelarts.vm.gpu.t4u8", "node_count": 2},
            "auto_stop": {"time_unit": "HOURS", "duration": 2},
        },
    }


def command_spec() -> dict[str, Any]:
    """The image's own program (no source_dir), one image for all."""
    return spec(source_dir=None, entry_point=None, command=["python", "-m", "trainer", "--fast"], image="registry/trainer:3", options={"sagemaker": {"RoleArn": ROLE}})  # fmt: skip


def test_a_command_runs_in_the_image_on_each_platform():
    sagemaker = compile_for("sagemaker", command_spec())
    assert sagemaker["AlgorithmSpecification"]["ContainerEntrypoint"] == ["python", "-m", "trainer", "--fast"]
    assert sagemaker["AlgorithmSpecification"]["TrainingImage"] == "registry/trainer:3"
    assert sagemaker["HyperParameters"] == {"epochs": "10", "learning_rate": "0.05", "shuffle": "true"}
    pai = compile_for("pai", command_spec())
    assert pai["AlgorithmSpec"]["Command"] == ["python", "-m", "trainer", "--fast"] and "CodeDir" not in pai
    modelarts = compile_for("modelarts", command_spec())["algorithm"]
    assert modelarts["command"] == "python -m trainer --fast"
    assert modelarts["engine"] == {"image_url": "registry/trainer:3"} and "code_dir" not in modelarts


def test_absolute_uris_of_the_platforms_storage_are_used_as_given():
    body = compile_for("pai", spec(inputs={"train": "oss://other/data/"}, output="oss://other/models/"))
    assert body["InputChannels"] == [{"Name": "train", "InputUri": "oss://other/data/"}]
    assert body["OutputChannels"][0] == {"Name": "model", "OutputUri": "oss://other/models/"}
    assert compile_for("modelarts", spec(output="obs://other/m/"))["algorithm"]["outputs"][0]["remote"] == {
        "obs": {"obs_url": "/other/m/"}
    }


def test_options_add_native_fields_and_defaults_fill_what_sagemaker_requires():
    body = compile_for(
        "sagemaker",
        spec(
            max_runtime=None,
            options={
                "sagemaker": {
                    "RoleArn": ROLE,
                    "EnableManagedSpotTraining": True,
                    "StoppingCondition": {"MaxWaitTimeInSeconds": 90000},
                }
            },  # fmt: skip
        ),
    )
    assert body["EnableManagedSpotTraining"] is True
    assert body["StoppingCondition"] == {"MaxRuntimeInSeconds": 86400, "MaxWaitTimeInSeconds": 90000}
    assert compile_for("pai", spec(options={"pai": {"WorkspaceId": "123"}}))["WorkspaceId"] == "123"


# -- accepted by the provider's own validation and the vendors' clients ----------------------------
@pytest.mark.parametrize("given", [spec(), command_spec()], ids=["entry_point", "command"])
@pytest.mark.parametrize("platform", list(DIALECTS))
def test_the_provider_validates_each_compiled_body_unchanged(platform, given):
    body = resolved(compile_for(platform, given))
    if platform == "pai":
        body["WorkspaceId"] = "86995"  # from the connection's workspace_id, merged before validation
    validated = DIALECTS[platform].validate_spec(copy.deepcopy(body))
    if platform == "sagemaker":  # the API's required default, filled by the validation
        body["AlgorithmSpecification"]["TrainingInputMode"] = "File"
    assert validated == body


@pytest.mark.parametrize("given", [spec(), command_spec()], ids=["entry_point", "command"])
def test_botocore_validates_the_sagemaker_body(given):
    import botocore.session
    from botocore.validate import validate_parameters

    dialect = DIALECTS["sagemaker"]
    validated = dialect.validate_spec(resolved(compile_for("sagemaker", given)))  # what is sent
    body = dialect.with_tags(validated, ["airflow-dag:d", "airflow-task:t"])
    model = botocore.session.get_session().get_service_model("sagemaker")
    validate_parameters(body, model.operation_model("CreateTrainingJob").input_shape)  # raises when wrong


def _without_empty(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_empty(v) for k, v in node.items() if v not in ([], None)}
    if isinstance(node, list):
        return [_without_empty(v) for v in node]
    return node


@pytest.mark.parametrize("given", [spec(), command_spec()], ids=["entry_point", "command"])
def test_the_pai_client_models_every_field_of_the_pai_body(given):
    from alibabacloud_paistudio20220112 import models

    body = resolved(compile_for("pai", given))
    body["WorkspaceId"] = "86995"
    body = PaiDialect().with_tags(body, ["airflow-dag:d"])
    request = models.CreateTrainingJobRequest().from_map(copy.deepcopy(body))
    assert _without_empty(request.to_map()) == body  # a field the SDK does not model would be lost


@pytest.mark.parametrize("given", [spec(), command_spec()], ids=["entry_point", "command"])
def test_the_modelarts_client_models_every_field_of_the_modelarts_body(given):
    from huaweicloudsdkcore.utils.http_utils import sanitize_for_serialization
    from huaweicloudsdkmodelarts.v1 import ModelArtsClient

    body = ModelArtsDialect().with_tags(resolved(compile_for("modelarts", given)), ["airflow-dag:d"])
    job = ModelArtsClient()._deserialize(copy.deepcopy(body), "Job")
    assert sanitize_for_serialization(job) == body  # a field the SDK does not model would be lost


# -- validation -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        (
            {"command": ["python"]},
            "portable_spec",
            "entry_point (a script in source_dir) or command, not both",
        ),
        ({"entry_point": None}, "portable_spec", "or command, not both nor neither"),
        ({"source_dir": None}, "portable_spec", "entry_point needs source_dir"),
        ({"entry_point": "../train.py"}, "portable_spec", "a path inside source_dir"),
        ({"hyperparamters": {}}, "hyperparamters", "unknown field (did you mean 'hyperparameters'?)"),
        ({"resources": {"instance_typ": "x"}}, "resources.instance_typ", "did you mean 'instance_type'?"),
        ({"options": {"vertex": {}}}, "options", "unknown platform 'vertex'"),
        (
            {"metric_definitions": {"loss": "loss=[0-9.]+"}},
            "metric_definitions",
            "needs a group around the value",
        ),
        ({"metric_definitions": {"loss": "loss=([0-9."}}, "metric_definitions", "not a regular expression"),
        (
            {"resources": {"instance_type": "x", "instance_count": 0}},
            "resources.instance_count",
            "greater than or equal to 1",
        ),  # fmt: skip
        ({"max_runtime": "soon"}, "max_runtime", "valid integer"),
        ({"output": None}, "output", "Field required"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_field(changes, field, says):
    with pytest.raises(PortableSpecError) as info:
        parse_portable(spec(**changes))
    assert info.value.field == field and says in str(info.value), str(info.value)
    assert str(info.value).startswith("Invalid portable spec: field ")


def test_max_runtime_takes_a_timedelta():
    from datetime import timedelta

    assert parse_portable(spec(max_runtime=timedelta(hours=2))).max_runtime == 7200


def test_modelarts_names_the_whole_hours_around_a_max_runtime():
    assert "give 3600 or 7200" in str(refused("modelarts", spec(max_runtime=5400)))


def test_an_entry_point_not_in_source_dir_is_refused_before_anything_is_uploaded(tmp_path):
    from airflow_training_provider.portable_submit import compile_for as compile_for_connection

    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "fit.py").write_text("print('hi')\n")

    class Connection:  # what compile_for reads of a resolved connection
        dialect, conn_id, storage_root = PaiDialect(), "pai_prod", "oss://b/ml/"

        class platform:
            display_name = "PAI"

    with pytest.raises(PortableSpecError) as info:
        compile_for_connection(Connection(), spec(source_dir="code"), tmp_path)
    assert info.value.field == "entry_point" and "'train.py' is not in source_dir" in str(info.value)
    assert "fit.py" in str(info.value)


def test_templated_numbers_are_read_as_numbers():
    parsed = parse_portable(
        spec(max_runtime="3600", resources={"instance_type": "ml.m5.large", "instance_count": "2"})
    )
    assert (parsed.max_runtime, parsed.resources.instance_count) == (3600, 2)


def test_a_model_instance_is_taken_as_it_is():
    model = PortableTrainingSpec.model_validate(spec())
    assert parse_portable(model) is model


# -- one refusal per field a platform cannot serve ---------------------------------------------------
@pytest.mark.parametrize(
    ("platform", "changes", "field", "says"),
    [
        ("sagemaker", {"image": {"pai": "p"}}, "image.sagemaker", "a training image"),
        ("sagemaker", {"options": {}}, "options.sagemaker.RoleArn", "IAM role"),
        (
            "sagemaker",
            {"resources": {"instance_type": {"pai": "ecs.c6.large"}}},
            "resources.instance_type.sagemaker",
            "needs a machine type",
        ),  # fmt: skip
        (
            "pai",
            {"resources": {"instance_type": "ecs.c6.large", "volume_size_gb": 100}},
            "resources.volume_size_gb",
            "EcsSpec",
        ),  # fmt: skip
        ("pai", {"image": {"sagemaker": "s"}}, "image.pai", "an image"),
        ("modelarts", {"max_runtime": 5400}, "max_runtime", "whole hours"),
        (
            "modelarts",
            {"resources": {"instance_type": "f", "volume_size_gb": 100}},
            "resources.volume_size_gb",
            "flavor",
        ),  # fmt: skip
        (
            "modelarts",
            {"image": "registry/trainer:3"},
            "options.modelarts.algorithm.engine",
            "a preset engine and an image",
        ),  # fmt: skip
        ("modelarts", {"options": {}}, "options.modelarts.algorithm.engine", "a preset engine"),
        (
            "modelarts",
            {"image": "reg/img:1", "options": {}},
            "image",
            "runs a boot file (entry_point) on a preset engine",
        ),  # fmt: skip
        ("modelarts", {"inputs": {"checkpoints": "c/"}}, "inputs.checkpoints", "the checkpoints'"),
    ],
)
def test_a_field_the_platform_cannot_serve_is_refused_naming_platform_and_field(
    platform, changes, field, says
):
    error = refused(platform, spec(**changes))
    assert error.field == field and error.platform == DISPLAY[platform]
    assert str(error).startswith(f"Invalid portable spec on {DISPLAY[platform]}: field '{field}'")
    assert says in str(error), str(error)


def test_an_accelerator_becomes_sagemakers_instance_type_and_a_named_type_wins():
    gpus = {"accelerator": {"type": "a10g", "count": 4}, "instance_count": 2}
    resource = compile_for("sagemaker", spec(resources=gpus))["ResourceConfig"]
    assert resource == {"InstanceType": "ml.g5.12xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30}
    named = {**gpus, "instance_type": {"sagemaker": "ml.g5.24xlarge", "pai": "ecs.gn7i-c32g1.32xlarge"}}
    assert (
        compile_for("sagemaker", spec(resources=named))["ResourceConfig"]["InstanceType"] == "ml.g5.24xlarge"
    )
    assert (
        compile_for("pai", spec(resources=named))["ComputeResource"]["EcsSpec"] == "ecs.gn7i-c32g1.32xlarge"
    )


@pytest.mark.parametrize(
    ("platform", "resources", "says"),
    [
        ("sagemaker", {"accelerator": {"type": "A100", "count": 2}}, "no machine type with 2 x A100"),
        ("pai", {"accelerator": {"type": "A10", "count": 1}}, "give resources.instance_type"),
        ("modelarts", {"accelerator": {"type": "T4"}}, "vary by region"),
    ],
)
def test_an_accelerator_a_platform_has_no_machine_type_for_is_refused(platform, resources, says):
    error = refused(platform, spec(resources=resources))
    assert error.field == "resources.accelerator" and says in str(error), str(error)


def test_resources_name_a_machine_type_or_an_accelerator():
    with pytest.raises(PortableSpecError) as info:
        parse_portable(spec(resources={"instance_count": 2}))
    assert (
        info.value.field == "resources"
        and "instance_type" in str(info.value)
        and "accelerator" in str(info.value)
    )


def test_sagemaker_runs_a_source_dir_only_in_script_mode():
    error = refused("sagemaker", spec(entry_point=None, command=["python", "train.py"]))
    assert error.field == "source_dir" and "only in script mode" in str(error)


def test_a_modelarts_command_needs_an_image():
    error = refused("modelarts", spec(source_dir=None, entry_point=None, command=["python", "x.py"]))
    assert error.field == "image.modelarts" and "custom image" in str(error)


def test_a_modelarts_command_runs_where_the_source_dir_is_downloaded():
    given = spec(entry_point=None, command=["python", "x.py"], image="reg/img:1", options={})
    algorithm = compile_for("modelarts", given)["algorithm"]
    assert algorithm["code_dir"] == f"/b/ml/code/{DIGEST}/" and "boot_file" not in algorithm
    assert algorithm["local_code_dir"] == algorithm["working_dir"] == "/home/ma-user/code"
    assert algorithm["command"] == "python x.py" and algorithm["engine"] == {"image_url": "reg/img:1"}


def test_pai_refuses_a_hyperparameter_its_user_args_would_split():
    error = refused("pai", spec(hyperparameters={"note": "hello world"}))
    assert error.field == "hyperparameters.note" and "PAI_USER_ARGS" in str(error)
    assert (
        compile_for("sagemaker", spec(hyperparameters={"note": "hello world"}))["HyperParameters"]["note"]
        == '"hello world"'
    )


def test_pai_takes_an_input_channel_named_like_an_output():
    body = compile_for("pai", spec(inputs={"model": "pretrained/", "train": "data/"}))
    assert body["InputChannels"][0] == {"Name": "model", "InputUri": "oss://b/ml/pretrained/"}
    assert {c["Name"] for c in body["OutputChannels"]} == {"model", "checkpoints"}


def test_the_input_mode_is_an_option_on_sagemaker():
    options = {"sagemaker": {"RoleArn": ROLE, "AlgorithmSpecification": {"TrainingInputMode": "FastFile"}}}
    body = compile_for("sagemaker", spec(options=options))
    assert body["AlgorithmSpecification"]["TrainingInputMode"] == "FastFile"


def test_tags_of_the_providers_own_are_refused():
    with pytest.raises(PortableSpecError) as info:
        parse_portable(spec(tags={"airflow-dag": "x"}))
    assert info.value.field == "tags" and "provider's own" in str(info.value)


@pytest.mark.parametrize("root", ["oss://b/ml/", "s3:/b", "s3:///ml/"])
def test_a_storage_root_of_another_shape_is_refused_where_it_is_used(root):
    from airflow_training_provider.portable import check_storage_root

    with pytest.raises(PortableSpecError) as info:
        check_storage_root(root, "s3", "aws_prod")
    assert (
        info.value.field == "storage_root"
        and "aws_prod" in str(info.value)
        and "s3://<bucket>" in str(info.value)
    )
    assert check_storage_root("s3://b/ml/", "s3", "aws_prod") == "s3://b/ml/"


@pytest.mark.parametrize("platform", list(DIALECTS))
def test_another_platforms_storage_is_refused(platform):
    foreign = {"sagemaker": "oss://b/data/", "pai": "obs://b/data/", "modelarts": "s3://b/data/"}[platform]
    error = refused(platform, spec(inputs={"train": foreign}))
    assert error.field == "inputs.train" and f"{DIALECTS[platform].storage_scheme}://" in str(error)


@pytest.mark.parametrize("platform", list(DIALECTS))
def test_a_relative_location_needs_the_connections_storage_root(platform):
    error = refused(platform, spec(), root=None)
    assert error.field in ("inputs.train", "output", "source_dir") and "no storage_root extra" in str(error)


def test_a_local_path_is_refused():
    error = refused("pai", spec(output="/tmp/models"))
    assert error.field == "output" and "local path" in str(error)


def test_an_option_that_a_portable_field_sets_is_refused():
    error = refused("pai", spec(options={"pai": {"Scheduler": {"MaxRunningTimeInSeconds": 60}}}))
    assert (
        error.field == "options.pai.Scheduler.MaxRunningTimeInSeconds"
        and "set by a portable field" in str(error)
    )


@pytest.mark.parametrize("dialect", [TensorOneDialect(), TogetherDialect()], ids=["tensorone", "together"])
def test_fine_tuning_platforms_take_no_portable_training_spec(dialect):
    with pytest.raises(PortableSpecError) as info:
        dialect.compile_portable(parse_portable(spec()), Placement("", "Together AI", None))
    assert info.value.field == "portable_spec" and "takes no portable training spec" in str(info.value)
    assert str(info.value).startswith("Invalid portable spec on Together AI: field 'portable_spec'")


@pytest.mark.parametrize("platform", list(DIALECTS))
def test_training_platforms_take_no_portable_fine_tune_spec(platform):
    with pytest.raises(PortableSpecError) as info:
        DIALECTS[platform].compile_portable(parse_portable(fine_tune()), Placement("", platform, None))
    assert info.value.field == "base_model" and "takes no portable fine-tune spec" in str(info.value)


# -- the portable fine-tune spec ---------------------------------------------------------------------
def fine_tune(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "base_model": "meta-llama/Meta-Llama-3.1-8B-Instruct-Reference",
        "training_file": "file-abc123",
        "epochs": "3",
        "learning_rate": 1e-5,
        "batch_size": 16,
        "suffix": "support-bot",
    }
    return changed(base, changes)


def test_together_fine_tune_body():
    body = TogetherDialect().compile_portable(
        parse_portable(
            fine_tune(validation_file="file-val", checkpoints=2, options={"together": {"n_evals": 4}})
        ),
        Placement("", "Together AI", None),
    )
    assert body == {
        "model": "meta-llama/Meta-Llama-3.1-8B-Instruct-Reference",
        "training_file": "file-abc123",
        "validation_file": "file-val",
        "n_epochs": 3,
        "learning_rate": 1e-5,
        "batch_size": 16,
        "n_checkpoints": 2,
        "suffix": "support-bot",
        "n_evals": 4,
    }
    assert TogetherDialect().validate_spec(copy.deepcopy(body)) == body


def test_tensorone_fine_tune_body():
    body = TensorOneDialect().compile_portable(
        parse_portable(fine_tune(options={"tensorone": {"gpuType": "h100", "config": {"strategy": "lora"}}})),
        Placement("", "TensorOne", None),
    )
    assert body == {
        "name": "support-bot",
        "modelType": "llm",
        "datasetId": "file-abc123",
        "config": {
            "baseModel": "meta-llama/Meta-Llama-3.1-8B-Instruct-Reference",
            "training": {"epochs": 3, "learning_rate": 1e-5, "batch_size": 16},
            "strategy": "lora",
        },
        "gpuType": "h100",
    }
    assert TensorOneDialect().validate_spec(copy.deepcopy(body)) == body
    unnamed = TensorOneDialect().compile_portable(
        parse_portable(fine_tune(suffix=None)), Placement("", "", None)
    )
    assert unnamed["name"] == "Meta-Llama-3.1-8B-Instruct-Reference-fine-tune"


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        ({"validation_file": "file-val"}, "validation_file", "one dataset"),
        ({"checkpoints": 3}, "checkpoints", "saves checkpoints on its own"),
        (
            {"options": {"tensorone": {"datasetId": "other"}}},
            "options.tensorone.datasetId",
            "set by a portable field",
        ),
    ],
)
def test_tensorone_refuses_what_its_create_has_no_field_for(changes, field, says):
    with pytest.raises(PortableSpecError) as info:
        TensorOneDialect().compile_portable(
            parse_portable(fine_tune(**changes)), Placement("", "TensorOne", None)
        )
    assert info.value.field == field and says in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        ({"epoch": 3}, "epoch", "did you mean 'epochs'?"),
        ({"training_file": None}, "training_file", "Field required"),
        ({"learning_rate": 0}, "learning_rate", "greater than 0"),
        ({"options": {"sagemaker": {}}}, "options", "unknown platform 'sagemaker'"),
    ],
)
def test_a_bad_fine_tune_spec_is_refused_naming_the_field(changes, field, says):
    with pytest.raises(PortableSpecError) as info:
        parse_portable(fine_tune(**changes))
    assert info.value.field == field and says in str(info.value), str(info.value)


# -- metrics read from a program log (ModelArts) -----------------------------------------------------
def test_metrics_are_the_last_value_each_regex_found():
    lines = [
        "data: 1797 rows",
        "epoch=1 loss=0.90 validation_loss=0.95 validation_accuracy=0.71",
        "epoch=2 loss=0.40 validation_loss=0.42 validation_accuracy=0.93",
        "model written; loss=n/a",
    ]
    definitions = {"epoch": r"epoch=(\d+)", "loss": r"\bloss=([0-9.]+)", "validation_accuracy": r"validation_accuracy=([0-9.]+)", "f1": r"f1=([0-9.]+)"}  # fmt: skip
    assert metrics_from_lines(lines, definitions) == {"epoch": 2.0, "loss": 0.40, "validation_accuracy": 0.93}
