"""Command line of the local training platform.

``airflow-training-platform serve --data-dir DIR [--host 127.0.0.1] [--port 8080] [--log-level info]``
plus one flag per setting (``--gpus N``, ``--seconds-per-epoch S``, ``--api-key K``,
``--together-balance-usd B``, switches such as ``--allow-user-code``, repeatable ones such as
``--sagemaker-image-command IMAGE=COMMAND``...): ``airflow-training-platform serve --help`` lists
them, generated from :mod:`.settings`. Also ``python -m airflow_training_platform.cli serve ...``.

``airflow-training-platform check-stop SPEC.json [--platform sagemaker] [--data-dir DIR]
[--after-seconds N | --after-checkpoint] [--grace-seconds S]``: the stop-readiness check
(:mod:`.stop_check`).

The server binds 127.0.0.1 unless ``--host`` says otherwise; with ``--allow-user-code`` it runs code
named in requests, so keep it there.

Without ``--api-key`` the key is read from ``$AIRFLOW_TRAINING_PLATFORM_API_KEY``; if that is unset
too, any non-empty key is accepted. SIGTERM / SIGINT shut the server down cleanly, killing every
trainer child.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import types
import typing
from typing import Any

from pydantic import ValidationError

from airflow_training_platform.settings import API_KEY_ENV, PlatformSettings
from airflow_training_platform.stop_check import PROGRAM_SOURCES, run_check

SERVER_OPTIONS = {"host": "127.0.0.1", "port": 8080, "log_level": "info"}
"""Options of the HTTP server itself (not platform settings)."""
LOG_LEVELS = ["critical", "error", "warning", "info", "debug"]


def flag(name: str) -> str:
    """``seconds_per_epoch`` → ``--seconds-per-epoch``."""
    return "--" + name.replace("_", "-")


def _value_type(annotation: Any) -> Any:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    return annotation if annotation in (int, float, str) else str


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser (``serve`` subcommand): server options plus one flag per setting."""
    parser = argparse.ArgumentParser(prog="airflow-training-platform", description="Local training platform")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP server")
    serve.add_argument("--host", default=SERVER_OPTIONS["host"])
    serve.add_argument("--port", type=int, default=SERVER_OPTIONS["port"])
    serve.add_argument("--log-level", default=SERVER_OPTIONS["log_level"], choices=LOG_LEVELS)
    for name, field in PlatformSettings.model_fields.items():
        required = field.is_required()
        default = None if required else field.default
        help_text = field.description or ""
        if field.annotation is bool:  # a switch: present = on
            serve.add_argument(
                flag(name), dest=name, action="store_true", default=bool(default), help=help_text
            )
            continue
        if typing.get_origin(field.annotation) is list:  # repeatable
            serve.add_argument(
                flag(name), dest=name, action="append", default=None, help=help_text + " (repeatable)"
            )
            continue
        suffix = "" if required or default is None else f" (default {default})"
        serve.add_argument(
            flag(name),
            dest=name,
            type=_value_type(field.annotation),
            required=required,
            default=default,
            help=help_text + suffix,
        )
    check = sub.add_parser(
        "check-stop",
        help="run a spec's training program, stop it as the platform would, and say whether it saved its work",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    check.add_argument("spec", help="the job spec (JSON file) as the task sends it, templates rendered")
    check.add_argument("--platform", choices=sorted(PROGRAM_SOURCES), default="sagemaker")
    check.add_argument(
        "--data-dir", default=".", help="the local platform's data directory (its s3/, oss/ and obs/ roots)"
    )
    when = check.add_mutually_exclusive_group()
    when.add_argument("--after-seconds", type=float, default=10.0, help="stop it this long after the start")
    when.add_argument("--after-checkpoint", action="store_true", help="stop it at its first checkpoint")
    check.add_argument(
        "--grace-seconds",
        type=float,
        default=None,
        help="SIGKILL this long after SIGTERM (default: the platform's; SageMaker 120, PAI and ModelArts 30)",
    )
    return parser


def settings_from(args: argparse.Namespace) -> Any:
    """The :data:`PlatformSettings` named by parsed ``args``. :raises ValidationError: a bad value."""
    values = {name: getattr(args, name) for name in PlatformSettings.model_fields}
    values["data_dir"] = os.path.abspath(values["data_dir"])
    values["api_key"] = values["api_key"] or os.environ.get(API_KEY_ENV) or None
    values = {k: v for k, v in values.items() if v is not None or k == "api_key"}  # a list's default
    return PlatformSettings(**values)


def serve(args: argparse.Namespace) -> int:
    """Run uvicorn until SIGTERM/SIGINT; returns the exit code."""
    import uvicorn

    from airflow_training_platform.app import create_app

    try:
        settings = settings_from(args)
    except ValidationError as exc:
        err = exc.errors()[0]
        print(f"{flag(str(err['loc'][0]))}: {err['msg']}", file=sys.stderr)
        return 2
    os.makedirs(settings.data_dir, exist_ok=True)
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=3,
        lifespan="on",
    )
    received: list[int] = []
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal against the handlers
    # that were installed before it started: make those record it, so a requested stop exits with 0.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: received.append(signum))
    try:
        uvicorn.Server(config).run()
    finally:
        app.state.engine.shutdown()  # idempotent; covers a failed start-up or an interrupted lifespan
    return 0


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point."""
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    if args.command == "check-stop":
        return run_check(args)
    return 2  # pragma: no cover - argparse enforces the subcommand


if __name__ == "__main__":
    sys.exit(main())
