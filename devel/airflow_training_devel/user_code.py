"""The user's own training code the local platform's user-code tests and the kill-path stack run
(``tests/data/user_code/train.py``), and how they put it and its data under the server's S3 root
(SageMaker script mode) or OSS root (PAI). In the devel package, not under ``tests/``: the kill-path
DAGs import it in Airflow's own processes, where ``tests`` is not importable."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "tests" / "data" / "user_code" / "train.py"
CODE_URI = "s3://code/v1/sourcedir.tar.gz"
DATA_URI = "s3://data/train/"
METRIC_DEFINITIONS = [
    {"Name": "train:loss", "Regex": r"loss=([0-9.]+)"},
    {"Name": "train:accuracy", "Regex": r"accuracy=([0-9.]+)"},
]


PAI_CODE = {"Bucket": "code", "Key": "pai/v1/"}
"""``CodeDir.LocationValue`` of the script under the local OSS root (no ``Endpoint`` needed locally)."""
PAI_DATA_URI = "oss://data/train/"
PAI_COMMAND = ["sh", "-c", "python train.py $PAI_USER_ARGS"]
"""``AlgorithmSpec.Command`` as the pai SDK sends the string command ``python train.py $PAI_USER_ARGS``."""


def _rows() -> str:
    rows = [f"{i / 50:.3f},{(i * 7 % 13) / 13:.3f},{int(i >= 50)}" for i in range(100)]
    return "\n".join(rows) + "\n"


def put_pai_code_and_data(data_dir: str) -> None:
    """The script as an individual object under :data:`PAI_CODE`'s prefix (as the pai SDK uploads
    ``source_dir``) and the 100-row CSV under :data:`PAI_DATA_URI`, written straight into
    ``<data_dir>/oss``."""
    oss = Path(data_dir) / "oss"
    (oss / "data" / "train").mkdir(parents=True, exist_ok=True)
    (oss / "data" / "train" / "part-0.csv").write_text(_rows())
    code = oss / PAI_CODE["Bucket"] / PAI_CODE["Key"]
    code.mkdir(parents=True, exist_ok=True)
    (code / "train.py").write_bytes(SCRIPT.read_bytes())


def put_code_and_data(data_dir: str) -> None:
    """``sourcedir.tar.gz`` (the script at its root, as the SageMaker Python SDK packs it) at
    :data:`CODE_URI` and a 100-row CSV (two features, a 0/1 label) under :data:`DATA_URI`, written
    straight into ``<data_dir>/s3``."""
    s3 = Path(data_dir) / "s3"
    (s3 / "data" / "train").mkdir(parents=True, exist_ok=True)
    (s3 / "data" / "train" / "part-0.csv").write_text(_rows())
    (s3 / "code" / "v1").mkdir(parents=True, exist_ok=True)
    with tarfile.open(s3 / "code" / "v1" / "sourcedir.tar.gz", "w:gz") as tar:
        tar.add(SCRIPT, arcname="train.py")


def script_hyperparameters(**values: Any) -> dict[str, str]:
    """``HyperParameters`` as the SageMaker Python SDK sends script mode: every value JSON-encoded."""
    return {
        "sagemaker_program": json.dumps("train.py"),
        "sagemaker_submit_directory": json.dumps(CODE_URI),
        "sagemaker_container_log_level": "20",
        "sagemaker_region": json.dumps("us-east-1"),
        **{k: json.dumps(v) for k, v in values.items()},
    }
