"""The user's own training code the local platform's script-mode tests run
(``tests/data/user_code/train.py``), and how they put it and its data under the server's S3 root."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).parent / "data" / "user_code" / "train.py"
CODE_URI = "s3://code/v1/sourcedir.tar.gz"
DATA_URI = "s3://data/train/"
METRIC_DEFINITIONS = [
    {"Name": "train:loss", "Regex": r"loss=([0-9.]+)"},
    {"Name": "train:accuracy", "Regex": r"accuracy=([0-9.]+)"},
]


def put_code_and_data(data_dir: str) -> None:
    """``sourcedir.tar.gz`` (the script at its root, as the SageMaker Python SDK packs it) at
    :data:`CODE_URI` and a 100-row CSV (two features, a 0/1 label) under :data:`DATA_URI`, written
    straight into ``<data_dir>/s3``."""
    s3 = Path(data_dir) / "s3"
    (s3 / "data" / "train").mkdir(parents=True, exist_ok=True)
    rows = [f"{i / 50:.3f},{(i * 7 % 13) / 13:.3f},{int(i >= 50)}" for i in range(100)]
    (s3 / "data" / "train" / "part-0.csv").write_text("\n".join(rows) + "\n")
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
