"""The training program each local-platform job runs as a child OS process.

Run as::

    python -m airflow_training_platform.trainer --job-dir DIR --config-json JSON

or forked, already warm, by the engine's fork server (``--fork-server FD``, see
:mod:`airflow_training_platform.engine.forkserver`): scikit-learn takes seconds to
import, so it is imported once, not once per job.

It trains a real :class:`sklearn.neural_network.MLPClassifier` on a dataset bundled with
scikit-learn (no downloads), one epoch at a time over seeded, shuffled mini-batches fed to
``partial_fit``, and reports progress on stdout, one JSON object per line, flushed: ``started``, ``step``,
``epoch`` and ``checkpoint`` reports, then ``completed`` or ``stopped`` (exit 0) or ``error`` (exit 1), as
defined in :mod:`airflow_training_platform.engine.reports`. A checkpoint's ``kind`` is ``"automatic"``
(after every epoch, or after the epochs in ``checkpoint_epochs``; id ``ckpt_epoch_<n>``) or ``"final"``
(id ``ckpt_final``).

Config keys (all optional): ``dataset`` (``digits`` default, ``iris``, ``wine``, ``breast_cancer``),
``epochs`` (int, default 10), ``batch_size`` (int, default 32), ``learning_rate`` (float, default 0.001; handed
to sklearn unchecked, so sklearn's own validation decides), ``hidden_units`` (int, default 64), ``seed`` (int,
default 0), ``seconds_per_epoch`` (float seconds, default 0: each epoch is paced to last at least this long to
simulate a slow GPU), ``validation_fraction`` (default 0.2), ``report_interval_seconds`` (default 0.5), ``checkpoint_seconds``
(default 0: every checkpoint write takes at least this long, simulating a big model's slow upload),
``checkpoint_epochs`` (list of epoch numbers after which to write an automatic checkpoint; default None = every
epoch),
``resume_from`` (path of a checkpoint file written by this program; training resumes at the epoch after the
checkpoint's ``epoch`` with the checkpoint's model, optimizer state and scaler), ``checkpoint_dir`` (where
checkpoint files go; default ``<job-dir>/checkpoints``).

Signals: SIGTERM = stop gracefully *with* a final checkpoint: finish the current mini-batch, write
``checkpoints/ckpt_final.joblib``, print its checkpoint line and ``stopped``, exit 0. SIGINT = stop gracefully
*without* a final checkpoint (same, minus the checkpoint). Both handlers are installed before the heavy
imports: a signal during start-up (before the ``started`` line) prints ``stopped`` and exits 0 at once,
without a checkpoint (nothing has been trained yet).

Checkpoint files are joblib pickles of ``{"model", "scaler", "classes", "dataset", "epoch", "step",
"metrics", "config", "kind", "checkpoint_id", "created_at"}``; ``epoch`` is the number of *fully completed*
epochs (a final checkpoint written mid-epoch records the last completed epoch and the exact global step).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_training_platform.engine.reports import (
    CheckpointReport,
    CompletedReport,
    EpochReport,
    ErrorReport,
    Metrics,
    Report,
    StartedReport,
    StepReport,
    StoppedReport,
    encode,
)

DATASETS = ("digits", "iris", "wine", "breast_cancer")
"""Dataset names the trainer accepts (all bundled with scikit-learn)."""

DATASET_SIZES = {"digits": 1797, "iris": 150, "wine": 178, "breast_cancer": 569}
"""Number of samples in each bundled dataset (lets the engine size jobs without importing scikit-learn)."""

DEFAULTS: dict[str, Any] = {
    "dataset": "digits",
    "epochs": 10,
    "batch_size": 32,
    "learning_rate": 0.001,
    "hidden_units": 64,
    "seed": 0,
    "seconds_per_epoch": 0.0,
    "validation_fraction": 0.2,
    "report_interval_seconds": 0.5,
    "checkpoint_seconds": 0.0,
    "checkpoint_epochs": None,
    "resume_from": None,
    "fail_with": None,
    "diverge_at_epoch": None,
    "checkpoint_dir": None,
}
"""Default value of every config key. ``fail_with`` (fault injection for tests): fail right after
loading the data, with this message — a job that fails without bad hyperparameters.
``diverge_at_epoch`` (fault injection): from that epoch on the run has diverged — its loss reports
are NaN and its validation loss +Infinity, as a real run's are after an exploding gradient; the
job still ends succeeded (the program does not crash)."""

_stop: dict[str, Any] = {"requested": False, "final_checkpoint": False, "signal": None, "training": False}


def steps_per_epoch(dataset: str, batch_size: int, validation_fraction: float = 0.2) -> int:
    """Mini-batches per epoch for ``dataset`` (same split arithmetic as sklearn's ``train_test_split``).

    Raises KeyError for an unknown dataset.
    """
    n = DATASET_SIZES[dataset]
    n_train = n - math.ceil(validation_fraction * n)
    return -(-n_train // max(1, int(batch_size)))


def emit(report: Report) -> None:
    """Print one report line on stdout and flush it."""
    sys.stdout.write(encode(report) + "\n")
    sys.stdout.flush()


def _on_signal(signum: int, _frame: Any) -> None:
    if not _stop["training"]:  # still starting up (importing, loading data): nothing to save, stop now
        name = signal.Signals(signum).name
        emit(StoppedReport(type="stopped", signal=name, epoch=0, step=0, final_checkpoint_id=None))
        os._exit(0)
    _stop["requested"] = True
    _stop["signal"] = signal.Signals(signum).name
    if signum == signal.SIGTERM:
        _stop["final_checkpoint"] = True


def _install_signal_handlers() -> None:
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)


def _pace(deadline: float) -> None:
    """Sleep until ``deadline`` (time.monotonic seconds) in short slices, returning early on a stop request."""
    while not _stop["requested"]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        time.sleep(min(remaining, 0.05))


def load_dataset(name: str):
    """Return ``(X, y)`` numpy arrays of the bundled scikit-learn dataset ``name``.

    Raises ValueError for a name outside :data:`DATASETS`.
    """
    from sklearn import datasets

    loaders = {
        "digits": datasets.load_digits,
        "iris": datasets.load_iris,
        "wine": datasets.load_wine,
        "breast_cancer": datasets.load_breast_cancer,
    }
    if name not in loaders:
        raise ValueError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")
    return loaders[name](return_X_y=True)


def checkpoint_dir(job_dir: str, config: dict[str, Any]) -> str:
    """Where checkpoints go: ``config["checkpoint_dir"]``, else ``<job_dir>/checkpoints``."""
    return config.get("checkpoint_dir") or os.path.join(job_dir, "checkpoints")


def _save_checkpoint(ckpt_dir: str, state: dict[str, Any]) -> tuple[str, int]:
    import joblib

    os.makedirs(ckpt_dir, exist_ok=True)
    path = os.path.abspath(os.path.join(ckpt_dir, f"{state['checkpoint_id']}.joblib"))
    # jobs may share a checkpoint location (mapped tasks whose output path omits the map index):
    # each writes its own temporary file and the last rename wins, as a put to an object store does
    tmp = f"{path}.{os.getpid()}.tmp"
    joblib.dump(state, tmp)
    os.replace(tmp, path)
    return path, os.path.getsize(path)


@dataclass
class _Training:
    """One job's training in this process: its settings, its scaled data and model, and how far it got."""

    job_dir: str
    cfg: dict[str, Any]  # DEFAULTS overlaid with the job's config
    epochs: int
    batch_size: int
    seed: int
    seconds_per_epoch: float
    report_interval: float
    model: Any  # MLPClassifier
    scaler: Any  # StandardScaler
    classes: Any
    X_tr: Any
    y_tr: Any
    X_val: Any
    y_val: Any
    start_epoch: int
    step: int  # mini-batches trained over the whole job
    metrics: Metrics | dict[str, Any] = field(default_factory=dict)  # the last completed epoch's
    last_report: float | None = None  # time.monotonic() of the last step report
    completed_epochs: int = field(init=False)
    steps_per_epoch: int = field(init=False)
    total_steps: int = field(init=False)

    def __post_init__(self) -> None:
        self.completed_epochs = self.start_epoch - 1
        self.steps_per_epoch = -(-len(self.X_tr) // self.batch_size)
        self.total_steps = self.steps_per_epoch * self.epochs


def train(job_dir: str, config: dict[str, Any]) -> int:
    """Run one training job; report on stdout; return the process exit code (0 ok/stopped, 1 error)."""
    import warnings

    warnings.filterwarnings("ignore")
    cfg = {**DEFAULTS, **{k: v for k, v in config.items() if v is not None}}
    training = _prepare(job_dir, cfg)
    _stop["training"] = True  # from here on a stop signal is handled between mini-batches
    emit(_started_report(training))
    checkpoint_epochs = (
        None if cfg["checkpoint_epochs"] is None else {int(e) for e in cfg["checkpoint_epochs"]}
    )
    for epoch in range(training.start_epoch, training.epochs + 1):
        if _stop["requested"]:
            break
        epoch_start = time.monotonic()
        losses = _train_epoch(training, epoch, epoch_start)
        if losses is None:
            break  # stopped mid-epoch
        _end_epoch(training, epoch, losses, epoch_start)
        if checkpoint_epochs is None or epoch in checkpoint_epochs:
            _write_checkpoint(training, f"ckpt_epoch_{epoch}", "automatic")
    if _stop["requested"]:
        _stop_training(training)
    else:
        emit(
            CompletedReport(
                type="completed",
                epoch=training.completed_epochs,
                step=training.step,
                metrics=training.metrics,
            )
        )
    return 0


def _prepare(job_dir: str, cfg: dict[str, Any]) -> _Training:
    """Load and split the data set; resume the model and scaler from ``resume_from`` or make new ones."""
    import numpy as np
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import StandardScaler

    epochs, batch_size = int(cfg["epochs"]), int(cfg["batch_size"])
    seed, seconds_per_epoch = int(cfg["seed"]), float(cfg["seconds_per_epoch"])
    report_interval = float(cfg["report_interval_seconds"])
    X, y = load_dataset(cfg["dataset"])
    if cfg["fail_with"]:
        raise RuntimeError(str(cfg["fail_with"]))
    X_tr, X_val, y_tr, y_val = train_test_split(
        X, y, test_size=float(cfg["validation_fraction"]), random_state=seed, stratify=y
    )
    start_epoch, step = 1, 0
    if cfg["resume_from"]:
        import joblib

        ckpt = joblib.load(cfg["resume_from"])
        if ckpt["dataset"] != cfg["dataset"]:
            raise ValueError(f"checkpoint was trained on {ckpt['dataset']!r}, not {cfg['dataset']!r}")
        model, scaler = ckpt["model"], ckpt["scaler"]
        start_epoch, step = int(ckpt["epoch"]) + 1, int(ckpt["step"])
    else:
        scaler = StandardScaler().fit(X_tr)
        model = MLPClassifier(
            hidden_layer_sizes=(int(cfg["hidden_units"]),),
            learning_rate_init=cfg["learning_rate"],
            batch_size=batch_size,
            random_state=seed,
        )
    return _Training(
        job_dir=job_dir,
        cfg=cfg,
        epochs=epochs,
        batch_size=batch_size,
        seed=seed,
        seconds_per_epoch=seconds_per_epoch,
        report_interval=report_interval,
        model=model,
        scaler=scaler,
        classes=np.unique(y),
        X_tr=scaler.transform(X_tr),
        y_tr=y_tr,
        X_val=scaler.transform(X_val),
        y_val=y_val,
        start_epoch=start_epoch,
        step=step,
    )


def _started_report(training: _Training) -> StartedReport:
    """The ``started`` report of a prepared training."""
    return StartedReport(
        type="started",
        pid=os.getpid(),
        dataset=training.cfg["dataset"],
        n_train=len(training.X_tr),
        n_val=len(training.X_val),
        n_classes=len(training.classes),
        epochs=training.epochs,
        start_epoch=training.start_epoch,
        start_step=training.step,
        steps_per_epoch=training.steps_per_epoch,
        total_steps=training.total_steps,
        batch_size=training.batch_size,
        learning_rate=training.cfg["learning_rate"],
        hidden_units=int(training.cfg["hidden_units"]),
        seconds_per_epoch=training.seconds_per_epoch,
        resumed_from=training.cfg["resume_from"],
    )


def _train_epoch(training: _Training, epoch: int, epoch_start: float) -> list[float] | None:
    """Train one epoch on seeded, shuffled mini-batches, reporting steps and pacing the epoch to
    ``seconds_per_epoch``; the mini-batch losses, or None if a stop request cut the epoch short."""
    import numpy as np

    order = np.random.default_rng(training.seed * 100_003 + epoch).permutation(len(training.X_tr))
    losses: list[float] = []
    for i in range(training.steps_per_epoch):
        if _stop["requested"]:
            return None
        idx = order[i * training.batch_size : (i + 1) * training.batch_size]
        training.model.batch_size = len(idx)  # one optimizer step per call, no clipping warning
        training.model.partial_fit(training.X_tr[idx], training.y_tr[idx], classes=training.classes)
        training.step += 1
        losses.append(float(training.model.loss_))
        _report_step(training, epoch, losses[-1], last_of_epoch=i == training.steps_per_epoch - 1)
        if training.seconds_per_epoch > 0:
            _pace(epoch_start + training.seconds_per_epoch * (i + 1) / training.steps_per_epoch)
    return losses


def _diverged(training: _Training, epoch: int) -> bool:
    """Whether ``diverge_at_epoch`` says the run has diverged by ``epoch``."""
    at = training.cfg.get("diverge_at_epoch")
    return at is not None and epoch >= int(at)


def _report_step(training: _Training, epoch: int, loss: float, last_of_epoch: bool) -> None:
    """Report the mini-batch just trained if it is the run's first or the last of its epoch, or if
    ``report_interval_seconds`` passed since the last report."""
    now = time.monotonic()
    if (
        training.last_report is None
        or now - training.last_report >= training.report_interval
        or last_of_epoch
    ):
        training.last_report = now
        loss = math.nan if _diverged(training, epoch) else loss
        emit(
            StepReport(
                type="step", epoch=epoch, step=training.step, total_steps=training.total_steps, loss=loss
            )
        )


def _end_epoch(training: _Training, epoch: int, losses: list[float], epoch_start: float) -> None:
    """Evaluate the model after a complete epoch, keep its metrics and report the epoch."""
    import numpy as np
    from sklearn.metrics import log_loss

    proba_val = training.model.predict_proba(training.X_val)
    epoch_seconds = time.monotonic() - epoch_start
    metrics = Metrics(
        loss=float(np.mean(losses)),
        accuracy=float(training.model.score(training.X_tr, training.y_tr)),
        val_loss=float(log_loss(training.y_val, proba_val, labels=training.model.classes_)),
        val_accuracy=float(np.mean(training.model.classes_[proba_val.argmax(axis=1)] == training.y_val)),
    )
    if _diverged(training, epoch):
        metrics = Metrics(**{**metrics, "loss": math.nan, "val_loss": math.inf})
    training.metrics = metrics
    training.completed_epochs = epoch
    emit(
        EpochReport(
            type="epoch",
            epoch=epoch,
            step=training.step,
            **metrics,
            epoch_seconds=epoch_seconds,
            samples_per_second=len(training.X_tr) / epoch_seconds if epoch_seconds > 0 else None,
        )
    )


def _write_checkpoint(training: _Training, ckpt_id: str, kind: Literal["automatic", "final"]) -> None:
    """Save the model at the last completed epoch and the current step, then report the checkpoint."""
    state = {
        "model": training.model,
        "scaler": training.scaler,
        "classes": training.classes,
        "dataset": training.cfg["dataset"],
        "epoch": training.completed_epochs,
        "step": training.step,
        "metrics": dict(training.metrics),
        "config": dict(training.cfg),
        "kind": kind,
        "checkpoint_id": ckpt_id,
        "created_at": time.time(),
    }
    started = time.monotonic()
    path, size = _save_checkpoint(checkpoint_dir(training.job_dir, training.cfg), state)
    slow = float(training.cfg.get("checkpoint_seconds") or 0.0) - (time.monotonic() - started)
    if slow > 0:  # simulate a big model's slow checkpoint upload; deliberately not cut short by a stop
        time.sleep(slow)
    emit(
        CheckpointReport(
            type="checkpoint",
            checkpoint_id=ckpt_id,
            path=path,
            epoch=training.completed_epochs,
            step=training.step,
            kind=kind,
            size_bytes=size,
            metrics=training.metrics,
        )
    )


def _stop_training(training: _Training) -> None:
    """A stop signal ended training: write the final checkpoint if SIGTERM asked for one; report it."""
    final_id = None
    if _stop["final_checkpoint"] and training.step > 0:  # an unfitted model is not worth a checkpoint
        final_id = "ckpt_final"
        _write_checkpoint(training, final_id, "final")
    emit(
        StoppedReport(
            type="stopped",
            signal=_stop["signal"],
            epoch=training.completed_epochs,
            step=training.step,
            final_checkpoint_id=final_id,
        )
    )


def run(job_dir: str, config: Any) -> int:
    """Train one job from its config (a dict, or its JSON text); every failure becomes one error line."""
    try:
        if isinstance(config, str):
            config = json.loads(config)
        if not isinstance(config, dict):
            raise ValueError("--config-json must be a JSON object")
        os.makedirs(job_dir, exist_ok=True)
        return train(job_dir, config)
    except Exception as exc:
        emit(ErrorReport(type="error", message=str(exc) or type(exc).__name__, exception=type(exc).__name__))
        return 1


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``--job-dir`` / ``--config-json`` trains one job; ``--fork-server FD`` serves forks."""
    _one_blas_thread()
    _install_signal_handlers()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job-dir", help="directory for this job's checkpoints")
    parser.add_argument("--config-json", default="{}", help="JSON object of config keys")
    parser.add_argument("--fork-server", type=int, metavar="FD", help="serve forks on this control socket")
    args = parser.parse_args(argv)
    if args.fork_server is not None:
        from airflow_training_platform.engine.forkserver import serve

        return serve(args.fork_server, _child_main)
    if not args.job_dir:
        parser.error("--job-dir is required")
    return run(args.job_dir, args.config_json)


def _one_blas_thread() -> None:
    """One BLAS thread per trainer unless the environment says otherwise (before numpy loads).

    The model's matrices are tiny, and several jobs share the machine's cores: OpenBLAS's default
    of a thread per core made concurrent trainers spin against each other (a digits epoch took
    0.14 CPU-seconds with the default threads at batch size 256, 0.02 with one)."""
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")


def _child_main(job_dir: str, config: dict[str, Any]) -> int:
    """A forked trainer: the signal handlers first (as in :func:`main`), then the job."""
    for key in _stop:
        _stop[key] = False if key != "signal" else None
    _install_signal_handlers()
    return run(job_dir, config)


def preload() -> None:
    """Import what every job needs, once (the fork server does this before forking trainers)."""
    import joblib  # noqa: F401
    import numpy  # noqa: F401
    from sklearn import datasets  # noqa: F401
    from sklearn.metrics import log_loss  # noqa: F401
    from sklearn.model_selection import train_test_split  # noqa: F401
    from sklearn.neural_network import MLPClassifier  # noqa: F401
    from sklearn.preprocessing import StandardScaler  # noqa: F401


if __name__ == "__main__":
    sys.exit(main())
