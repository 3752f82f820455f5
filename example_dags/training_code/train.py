"""Train a digit classifier on your own data — one script for SageMaker, PAI and ModelArts.

Copy this file as the start of your own training code. It runs unchanged on the three platforms
because it reads everything from the places each one documents, and only there:

============  ==================================  ==========================  ===========================
              SageMaker (script mode)             PAI (CodeDir + Command)     ModelArts (code_dir +
                                                                              boot_file)
============  ==================================  ==========================  ===========================
detected by   ``SM_MODEL_DIR``                    ``PAI_OUTPUT_MODEL``        ``MA_JOB_DIR``
data          ``SM_CHANNEL_TRAIN``                ``PAI_INPUT_TRAIN``         ``--data_url=<dir>`` (or
                                                                              ``--train=<dir>``)
model out     ``SM_MODEL_DIR`` (→ model.tar.gz)   ``PAI_OUTPUT_MODEL``        ``--model_url=<dir>``
checkpoints   ``/opt/ml/checkpoints``             ``PAI_OUTPUT_CHECKPOINTS``  ``--checkpoints=<dir>``
              (``CheckpointConfig``)                                          (resume: ``--resume_from``)
hyperparams   ``--epochs 10`` (argv)              ``--epochs 10`` (argv, via  ``--epochs=10`` (argv)
                                                  ``$PAI_USER_ARGS``)
============  ==================================  ==========================  ===========================

One script rather than one per platform: the platforms differ only in those paths, so a small
``platform_paths()`` keeps the training itself in one place.

What it does: reads ``*.csv`` files from the data channel (64 pixel values 0–16, then the label
0–9, no header), holds out 20 % for validation, and trains a linear classifier
(scikit-learn's ``SGDClassifier``, logistic loss) one epoch at a time. After each epoch it prints::

    epoch=3 loss=0.3388 validation_loss=0.3713 validation_accuracy=0.9500

which the job spec's ``MetricDefinitions`` turn into the job's metrics (``epoch=(\\d+)``,
``\\bloss=([0-9.]+)``, ``validation_loss=([0-9.]+)``, ``validation_accuracy=([0-9.]+)``).

Stopping and resuming: the platform stops a job with SIGTERM and kills it after a grace period
(SageMaker 120 s). The script then saves a checkpoint and exits; it also saves one after every
epoch. At start it resumes from the newest checkpoint in its checkpoint directory (where the
platform restores the last job's checkpoints), so a restarted job continues instead of starting
over.

Outputs: ``model.joblib`` (the trained classifier) and ``metrics.json`` (the last epoch's
metrics) in the model directory, which the platform uploads when the script exits.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import sys

import joblib
import numpy as np
from sklearn.linear_model import SGDClassifier
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split

CLASSES = np.arange(10)
CHECKPOINT = "checkpoint.joblib"
stop_requested = False


def on_sigterm(signum: int, frame: object) -> None:
    """The platform is stopping the job: finish the current epoch, save, exit (see ``train``).
    Only a flag here: printing from a signal handler can collide with the print it interrupted."""
    global stop_requested
    stop_requested = True


def platform_paths(args: argparse.Namespace) -> dict[str, str]:
    """Where this platform puts the data and wants the model and checkpoints, by its own contract."""
    env = os.environ
    if "SM_MODEL_DIR" in env:  # SageMaker script mode
        base = env.get("SAGEMAKER_BASE_DIR", "/opt/ml")
        checkpoints = os.path.join(base, "checkpoints")  # CheckpointConfig.LocalPath's default
        return {
            "platform": "sagemaker",
            "data": env["SM_CHANNEL_TRAIN"],
            "model": env["SM_MODEL_DIR"],
            "checkpoints": checkpoints,
            "resume_from": checkpoints,
        }
    if "PAI_OUTPUT_MODEL" in env:  # PAI: channels as PAI_INPUT_<NAME> / PAI_OUTPUT_<NAME>
        return {
            "platform": "pai",
            "data": env["PAI_INPUT_TRAIN"],
            "model": env["PAI_OUTPUT_MODEL"],
            "checkpoints": env["PAI_OUTPUT_CHECKPOINTS"],
            "resume_from": env["PAI_OUTPUT_CHECKPOINTS"],
        }
    if "MA_JOB_DIR" in env:  # ModelArts: inputs and outputs as --<name>=<local dir>
        return {
            "platform": "modelarts",
            "data": args.data_url,
            "model": args.model_url,
            "checkpoints": args.checkpoints,
            # a retry of a failed job gets the failed job's checkpoints as the resume_from input
            "resume_from": args.resume_from or args.checkpoints,
        }
    sys.exit("not on SageMaker, PAI or ModelArts: no SM_MODEL_DIR, PAI_OUTPUT_MODEL or MA_JOB_DIR")


def read_data(channel: str) -> tuple[np.ndarray, np.ndarray]:
    """The channel's CSV rows as features scaled to 0–1 and integer labels."""
    files = [channel] if os.path.isfile(channel) else sorted(glob.glob(os.path.join(channel, "*.csv")))
    if not files:
        sys.exit(f"no .csv file in the data channel {channel}")
    rows = np.vstack([np.loadtxt(f, delimiter=",", ndmin=2) for f in files])
    print(f"data: {len(rows)} rows from {', '.join(os.path.basename(f) for f in files)} in {channel}")
    return rows[:, :-1] / 16.0, rows[:, -1].astype(int)


def save_checkpoint(directory: str, model: SGDClassifier, epoch: int) -> None:
    """The model and its epoch, in one file the next job resumes from (the platform copies the
    checkpoint directory's files to its storage as they change)."""
    os.makedirs(directory, exist_ok=True)
    joblib.dump({"model": model, "epoch": epoch}, os.path.join(directory, CHECKPOINT))


def train(args: argparse.Namespace, paths: dict[str, str]) -> dict[str, float]:
    """Train epoch by epoch from the last checkpoint; returns the last epoch's metrics."""
    x, y = read_data(paths["data"])
    x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)

    model = SGDClassifier(loss="log_loss", learning_rate="constant", eta0=args.learning_rate, random_state=0)
    first_epoch = 1
    saved = os.path.join(paths["resume_from"], CHECKPOINT)
    if os.path.isfile(saved):
        state = joblib.load(saved)
        model, first_epoch = state["model"], state["epoch"] + 1
        print(f"resuming from the checkpoint of epoch {state['epoch']} in {paths['resume_from']}")

    def evaluate() -> dict[str, float]:
        return {
            "loss": log_loss(y_train, model.predict_proba(x_train), labels=CLASSES),
            "validation_loss": log_loss(y_val, model.predict_proba(x_val), labels=CLASSES),
            "validation_accuracy": model.score(x_val, y_val),
        }

    for epoch in range(first_epoch, args.epochs + 1):
        model.partial_fit(x_train, y_train, classes=CLASSES)
        metrics = evaluate()
        # the fixed format the job's MetricDefinitions parse: keep it in step with them
        print(
            f"epoch={epoch} loss={metrics['loss']:.4f} validation_loss={metrics['validation_loss']:.4f} "
            f"validation_accuracy={metrics['validation_accuracy']:.4f}",
            flush=True,
        )
        if stop_requested:  # saved after the flag was seen, so the checkpoint always follows the stop
            save_checkpoint(paths["checkpoints"], model, epoch)
            print("SIGTERM received: saved a checkpoint, stopping", flush=True)
            print(f"stopped after epoch {epoch}; the checkpoint is in {paths['checkpoints']}", flush=True)
            sys.exit(0)
        save_checkpoint(paths["checkpoints"], model, epoch)

    if first_epoch > args.epochs:  # resumed from a checkpoint of the last epoch: nothing left to train
        metrics = evaluate()
    os.makedirs(paths["model"], exist_ok=True)
    joblib.dump(model, os.path.join(paths["model"], "model.joblib"))
    with open(os.path.join(paths["model"], "metrics.json"), "w") as fh:
        json.dump({"epochs": args.epochs, **{k: round(v, 4) for k, v in metrics.items()}}, fh)
    print(f"model and metrics written to {paths['model']}", flush=True)
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--learning_rate", type=float, default=0.05)
    # ModelArts passes its channels as arguments; SageMaker and PAI leave these unset
    # the input channel: data_url by Huawei's custom, train as a portable spec names it
    parser.add_argument("--data_url", "--train", dest="data_url")
    parser.add_argument("--model_url", "--train_url", dest="model_url")  # train_url: Huawei's older name
    parser.add_argument("--checkpoints")
    parser.add_argument("--resume_from")
    # parse_known_args: a platform may pass arguments this script does not know (Huawei advises it)
    args, unknown = parser.parse_known_args()
    signal.signal(signal.SIGTERM, on_sigterm)

    paths = platform_paths(args)
    print(f"platform: {paths['platform']}; data channel: {paths['data']}; model directory: {paths['model']}")
    print(f"hyperparameters: epochs={args.epochs} learning_rate={args.learning_rate} (ignored: {unknown})")
    train(args, paths)


if __name__ == "__main__":
    main()
