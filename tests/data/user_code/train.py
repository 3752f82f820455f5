"""A user's own training script, as SageMaker script mode or a PAI training job with user code runs
it (the local platform's tests): the paths come from ``SM_*`` variables, else from PAI's ``PAI_*``.

Logistic regression in plain numpy on the CSV files of the ``train`` channel (features, then a 0/1
label, no header). Prints ``epoch=<n> loss=<x> accuracy=<y>`` after each epoch (stdout) and a
progress line on stderr. On SIGTERM it writes ``checkpoint.json`` into the checkpoint directory
(``$SAGEMAKER_BASE_DIR/checkpoints``, SageMaker's default ``/opt/ml/checkpoints``) and exits 0; at
start it resumes from a checkpoint found there. At the end it writes ``model.json`` and
``seen.json`` (its arguments, ``SM_*`` variables, channel files and ``hyperparameters.json``: what
it saw) into ``SM_MODEL_DIR``, and ``predictions.csv`` into ``SM_OUTPUT_DATA_DIR``. Under PAI: the
``train`` channel is ``PAI_INPUT_TRAIN`` (a directory, or one file), checkpoints go to
``PAI_OUTPUT_CHECKPOINTS``, the model files to ``PAI_OUTPUT_MODEL``, the configuration is read
from ``PAI_CONFIG_DIR``; there is no failure file and no ``predictions.csv``.

Hyperparameters (``--name value``): ``epochs``, ``lr``, ``seconds_per_epoch`` (sleep per epoch),
``spawn_child`` (1: start a ``sleep`` child first; its pid goes to ``child.pid`` in the model
directory), ``ignore_sigterm`` (1), ``crash_on_sigterm`` (1: its SIGTERM handler raises), ``fail_with`` (a message: write it to ``output/failure`` and
exit 1), ``dump_env`` (1: the whole environment into ``env.json`` in the model directory, at start).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

STOP = {"requested": False}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--seconds_per_epoch", type=float, default=0.0)
    parser.add_argument("--spawn_child", type=int, default=0)
    parser.add_argument("--ignore_sigterm", type=int, default=0)
    parser.add_argument("--crash_on_sigterm", type=int, default=0)
    parser.add_argument("--fail_with", default="")
    parser.add_argument("--dump_env", type=int, default=0)
    args = parser.parse_args()

    pai = "SM_MODEL_DIR" not in os.environ and "PAI_WORKING_DIR" in os.environ
    if pai:
        model_dir, checkpoint_dir = os.environ["PAI_OUTPUT_MODEL"], os.environ["PAI_OUTPUT_CHECKPOINTS"]
        channel, config_dir = os.environ["PAI_INPUT_TRAIN"], os.environ["PAI_CONFIG_DIR"]
    else:
        model_dir = os.environ["SM_MODEL_DIR"]
        checkpoint_dir = os.path.join(os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml"), "checkpoints")
        channel, config_dir = os.environ["SM_CHANNEL_TRAIN"], os.environ["SM_INPUT_CONFIG_DIR"]
    checkpoint = os.path.join(checkpoint_dir, "checkpoint.json")
    if args.dump_env:
        with open(os.path.join(model_dir, "env.json"), "w") as fh:
            json.dump(dict(os.environ), fh)
    if args.fail_with:
        if not pai:
            with open(os.path.join(os.environ["SM_OUTPUT_DIR"], "failure"), "w") as fh:
                fh.write(args.fail_with)
        print("giving up:", args.fail_with, flush=True)
        return 1
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif args.crash_on_sigterm:
        signal.signal(signal.SIGTERM, _crash)
    else:
        signal.signal(signal.SIGTERM, lambda *_: STOP.update(requested=True))
    if args.spawn_child:
        child = subprocess.Popen(["sleep", "120"])
        with open(os.path.join(model_dir, "child.pid"), "w") as fh:
            fh.write(str(child.pid))

    files = [channel] if os.path.isfile(channel) else sorted(glob.glob(os.path.join(channel, "*.csv")))
    data = np.vstack([np.loadtxt(f, delimiter=",", ndmin=2) for f in files])
    x, y = np.hstack([data[:, :-1], np.ones((len(data), 1))]), data[:, -1]
    w, start = np.zeros(x.shape[1]), 1
    if os.path.isfile(checkpoint):
        with open(checkpoint) as fh:
            saved = json.load(fh)
        w, start = np.array(saved["w"]), saved["epoch"] + 1
        print(f"resumed from epoch {saved['epoch']}", flush=True)

    with open(os.path.join(model_dir, "seen.json"), "w") as fh:
        json.dump(
            {
                "argv": sys.argv[1:],
                "cwd": os.getcwd(),
                "env": {k: v for k, v in os.environ.items() if k.startswith("SM_") or k.isupper()},
                "channel_files": [os.path.basename(f) for f in files],
                "hyperparameters": json.load(open(os.path.join(config_dir, "hyperparameters.json"))),
                "start_epoch": start,
            },
            fh,
        )

    epoch = start - 1
    for epoch in range(start, args.epochs + 1):
        p = 1 / (1 + np.exp(-x @ w))
        w = w - args.lr * x.T @ (p - y) / len(y)
        p = np.clip(1 / (1 + np.exp(-x @ w)), 1e-9, 1 - 1e-9)
        loss = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
        accuracy = float(np.mean((p > 0.5) == y))
        print(f"epoch={epoch} loss={loss:.4f} accuracy={accuracy:.4f}", flush=True)
        print(f"progress {epoch}/{args.epochs}", file=sys.stderr, flush=True)
        deadline = time.monotonic() + args.seconds_per_epoch
        while time.monotonic() < deadline and not STOP["requested"]:
            time.sleep(0.05)
        if STOP["requested"]:
            os.makedirs(checkpoint_dir, exist_ok=True)
            with open(checkpoint, "w") as fh:
                json.dump({"epoch": epoch, "w": w.tolist()}, fh)
            print(f"SIGTERM: checkpoint of epoch {epoch} written", flush=True)
            return 0

    with open(os.path.join(model_dir, "model.json"), "w") as fh:
        json.dump({"w": w.tolist(), "epochs": epoch}, fh)
    if not pai:
        np.savetxt(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "predictions.csv"), (x @ w > 0).astype(int))
    print("training complete", flush=True)
    return 0


def _crash(*_: object) -> None:
    raise RuntimeError("the SIGTERM handler failed before saving anything")


if __name__ == "__main__":
    sys.exit(main())
