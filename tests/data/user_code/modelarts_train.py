"""The example script (``train.py`` beside this file, written for SageMaker script mode) run by
ModelArts' contract: a boot file that takes its channels as ``--<name>=<local dir>`` arguments.

Reads ``--data_url`` (the CSV files to train on), ``--train_url`` (where the model, the predictions
and what it saw go) and ``--checkpoints`` (the checkpoints output's directory) with
``parse_known_args``, as Huawei advises for boot files; every other argument (``--epochs=3``...)
goes to ``train.py``. Writes ``modelarts_seen.json`` into ``--train_url`` (its arguments, working
directory, whole environment at start, the data files, the head of ``sys.path``), then points the
SageMaker variables ``train.py`` reads at those directories and runs it in this process (so a
SIGTERM reaches it).
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--data_url", "--train_url", "--checkpoints"):
        parser.add_argument(name, required=True)
    known, rest = parser.parse_known_args()
    os.makedirs(known.train_url, exist_ok=True)
    seen = {
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "data_files": sorted(os.listdir(known.data_url)),
        "sys_path": sys.path[:3],
    }
    Path(known.train_url, "modelarts_seen.json").write_text(json.dumps(seen))

    base = Path(os.environ["TMPDIR"], "sagemaker-layout")  # what train.py expects under /opt/ml
    config = base / "input" / "config"
    config.mkdir(parents=True, exist_ok=True)
    if not (base / "checkpoints").exists():
        (base / "checkpoints").symlink_to(known.checkpoints, target_is_directory=True)
    hyper = dict(arg[2:].split("=", 1) for arg in rest if arg.startswith("--") and "=" in arg)
    (config / "hyperparameters.json").write_text(json.dumps(hyper))
    os.environ.update(
        SAGEMAKER_BASE_DIR=str(base),
        SM_CHANNEL_TRAIN=known.data_url,
        SM_MODEL_DIR=known.train_url,
        SM_OUTPUT_DIR=known.train_url,
        SM_OUTPUT_DATA_DIR=known.train_url,
        SM_INPUT_CONFIG_DIR=str(config),
    )
    sys.argv = [str(Path(__file__).with_name("train.py")), *rest]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
