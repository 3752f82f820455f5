"""Command line of the local training platform.

``airflow-training-platform serve --host 127.0.0.1 --port 8080 --data-dir DIR [--gpus N]
[--usd-per-gpu-hour X] [--seconds-per-epoch S] [--grace-seconds G] [--cancel-wait-seconds W]
[--cancel-delay-seconds C] [--api-key K] [--together-balance-usd B] [--log-level info]``

(also ``python -m airflow_training_provider.local_platform.cli serve ...``). Without ``--api-key`` the key
is read from ``$AIRFLOW_TRAINING_PLATFORM_API_KEY``; if that is unset too, any non-empty key is accepted.
SIGTERM / SIGINT shut the server down cleanly, killing every trainer child.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

API_KEY_ENV = "AIRFLOW_TRAINING_PLATFORM_API_KEY"


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser (``serve`` subcommand)."""
    parser = argparse.ArgumentParser(prog="airflow-training-platform", description="Local training platform")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP server")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--data-dir", required=True, help="job directories and checkpoints go here")
    serve.add_argument(
        "--gpus", type=int, default=1, help="simulated GPUs = concurrent job slots (default 1)"
    )
    serve.add_argument("--usd-per-gpu-hour", type=float, default=2.50, help="price in USD (default 2.50)")
    serve.add_argument(
        "--seconds-per-epoch", type=float, default=1.0, help="default epoch pacing (s, default 1)"
    )
    serve.add_argument("--grace-seconds", type=float, default=10.0, help="graceful cancel before SIGKILL (s)")
    serve.add_argument(
        "--cancel-wait-seconds", type=float, default=5.0, help="cancel request waits this long (s)"
    )
    serve.add_argument("--cancel-delay-seconds", type=float, default=0.0, help="test: slow every cancel (s)")
    serve.add_argument("--api-key", default=None, help=f"required API key (default ${API_KEY_ENV})")
    serve.add_argument("--max-log-lines", type=int, default=2000, help="trainer lines kept per job")
    serve.add_argument(
        "--together-balance-usd",
        type=float,
        default=None,
        help="Together account balance in USD; jobs are cancelled (billing_limit) when it runs out "
        "(default unlimited)",
    )
    serve.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    return parser


def serve(args: argparse.Namespace) -> int:
    """Run uvicorn until SIGTERM/SIGINT; returns the exit code."""
    import uvicorn

    from airflow_training_provider.local_platform.app import PlatformSettings, create_app

    if args.gpus < 1:
        print("--gpus must be >= 1", file=sys.stderr)
        return 2
    settings = PlatformSettings(
        data_dir=os.path.abspath(args.data_dir),
        gpus=args.gpus,
        usd_per_gpu_hour=args.usd_per_gpu_hour,
        seconds_per_epoch=args.seconds_per_epoch,
        grace_seconds=args.grace_seconds,
        cancel_wait_seconds=args.cancel_wait_seconds,
        cancel_delay_seconds=args.cancel_delay_seconds,
        api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
        max_log_lines=args.max_log_lines,
        together_balance_usd=args.together_balance_usd,
    )
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
    return 2  # pragma: no cover - argparse enforces the subcommand


if __name__ == "__main__":
    sys.exit(main())
