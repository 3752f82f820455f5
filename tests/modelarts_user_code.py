"""The user's own training code the local platform's ModelArts tests run (``tests/data/user_code/
modelarts_train.py``, the boot file, beside ``train.py``), how they put it and its data in the
server's local OBS, and a create body naming them as Huawei's client sends it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from airflow_training_devel.user_code import SCRIPT

BOOT_FILE = SCRIPT.with_name("modelarts_train.py")
CODE_DIR = "/code/v1/ma-code/"
"""The OBS directory the code is in: it lands in ``${MA_JOB_DIR}/ma-code``."""
DATA_URL = "/data/train/"


def put_code_and_data(data_dir: str) -> None:
    """The boot file and ``train.py`` under :data:`CODE_DIR`, a 100-row CSV (two features, a 0/1
    label) under :data:`DATA_URL`, written straight into ``<data_dir>/obs``."""
    obs = Path(data_dir) / "obs"
    code = obs / CODE_DIR.strip("/")
    code.mkdir(parents=True, exist_ok=True)
    for script in (SCRIPT, BOOT_FILE):
        shutil.copy(script, code / script.name)
    data = obs / DATA_URL.strip("/")
    data.mkdir(parents=True, exist_ok=True)
    rows = [f"{i / 50:.3f},{(i * 7 % 13) / 13:.3f},{int(i >= 50)}" for i in range(100)]
    (data / "part-0.csv").write_text("\n".join(rows) + "\n")


def algorithm(outputs: str, checkpoints: str | None = None, **parameters: Any) -> dict[str, Any]:
    """``algorithm`` of a ``code_dir`` + ``boot_file`` job: the data as input ``data_url``, the model
    to ``<outputs>/model/`` (output ``train_url``), checkpoints to ``checkpoints`` (default
    ``<outputs>/checkpoints/``), ``parameters`` as ``[{name, value}]`` strings."""
    return {
        "code_dir": CODE_DIR,
        "boot_file": CODE_DIR + BOOT_FILE.name,
        "engine": {"engine_name": "PyTorch", "engine_version": "pytorch_2.1.0-cuda_12.1-py_3.10"},
        "parameters": [{"name": k, "value": str(v)} for k, v in parameters.items()],
        "inputs": [{"name": "data_url", "remote": {"obs": {"obs_url": DATA_URL}}}],
        "outputs": [
            {"name": "train_url", "remote": {"obs": {"obs_url": f"{outputs.rstrip('/')}/model/"}}},
            {
                "name": "checkpoints",
                "remote": {"obs": {"obs_url": checkpoints or f"{outputs.rstrip('/')}/checkpoints/"}},
            },
        ],
    }
