"""A whole local setup to look at in a browser: the local training platform and Airflow (api-server,
scheduler, dag-processor, triggerer) with a DAGs folder and one connection per platform, all on
127.0.0.1 and stopped by PID. ``make ui`` runs it (``python -m airflow_training_devel.devstack``);
the UI tests use :func:`dev_stack`.

The UI asks for a login (simple auth manager): user ``admin``, password ``admin`` unless given.
Connections are stored in the metadata database (so the Connections page lists them and their
Test button works): ``tensorone_local``, ``together_local``, ``aws_local`` (SageMaker),
``pai_local`` (Alibaba Cloud PAI) and ``modelarts_local`` (Huawei Cloud ModelArts).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow_training_devel.local_fixtures import LOCAL_FIXTURES, server_options
from airflow_training_devel.postgres import PostgresServer
from airflow_training_devel.stack import AIRFLOW, AirflowStack
from airflow_training_platform.server import LocalPlatformServer


def connections(platform_url: str) -> list[dict[str, Any]]:
    """The connections to the local platform, as ``POST /api/v2/connections`` bodies (one per
    :data:`~airflow_training_devel.local_fixtures.LOCAL_FIXTURES` entry)."""
    bodies = []
    for fixture in LOCAL_FIXTURES.values():
        conn = fixture.connection(platform_url)
        if fixture.conn_type == "aws":  # the Test button of an aws connection calls STS here only
            conn["extra"]["service_config"] = {"sts": {"endpoint_url": platform_url}}
        if "extra" in conn:
            conn["extra"] = json.dumps(conn["extra"])
        bodies.append({"connection_id": fixture.conn_id, **conn})
    return bodies


def import_connections(stack: AirflowStack, bodies: list[dict[str, Any]]) -> None:
    """Store connections in the metadata database (``airflow connections import``) before the
    scheduler starts, so a DAG that runs at once finds them."""
    path = stack.home / "connections.json"
    path.write_text(
        json.dumps({b["connection_id"]: {k: v for k, v in b.items() if k != "connection_id"} for b in bodies})
    )
    try:
        run = subprocess.run(
            [AIRFLOW, "connections", "import", str(path)],
            env=stack.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        path.unlink()
    if run.returncode != 0:
        raise RuntimeError(f"airflow connections import failed:\n{run.stdout}\n{run.stderr}")


@contextmanager
def dev_stack(
    workdir: Path,
    dags_folder: Path,
    *,
    login: tuple[str, str] = ("admin", "admin"),
    port: int | None = None,
    env: dict[str, str] | None = None,
    **platform_options: Any,
) -> Iterator[tuple[LocalPlatformServer, AirflowStack]]:
    """Start the local platform, a private PostgreSQL server (Debian's ``postgresql`` package: SQLite
    cannot serve the API server, scheduler and triggerer at once), then Airflow with ``dags_folder``;
    stop all three at the end.

    :param platform_options: :class:`LocalPlatformServer` options (``seconds_per_epoch``...).
    :raises RuntimeError: a component did not become healthy (its log is in the message).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    # every key pair's signatures checked: a wrong secret is refused
    options = server_options(**{"seconds_per_epoch": 1.0, "gpus": 4, **platform_options})
    postgres = PostgresServer().start()
    try:
        with LocalPlatformServer(str(workdir / "platform"), **options) as platform:
            extra_env = {"TRAINING_MODEL_REGISTRY": str(workdir / "registry"), **(env or {})}
            if platform_options.get("allow_user_code"):  # the own-script examples copy into its OSS/OBS
                extra_env["TRAINING_PLATFORM_DATA_DIR"] = platform.data_dir
            stack = AirflowStack(
                workdir / "airflow",
                dags_folder,
                extra_env,
                sql_alchemy_conn=postgres.dsn,
                login=login,
                inherit_connections=False,  # the connections imported below, not this process's
                **({"port": port} if port else {}),
            )
            try:
                stack.migrate()
                import_connections(stack, connections(platform.url))
                stack.start(migrate=False)
                yield platform, stack
            finally:
                stack.stop()
    finally:
        postgres.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path(".ui"))
    parser.add_argument("--dags-folder", type=Path, default=Path("example_dags"))
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument(
        "--seconds-per-epoch",
        type=float,
        default=3.0,
        help="local platform pace; also the example DAG's default",
    )
    parser.add_argument(
        "--allow-user-code",
        action="store_true",
        help="let the local platform run the training code a spec names (the *_retrain_own_script examples)",
    )
    args = parser.parse_args(argv)
    shutil.rmtree(args.workdir, ignore_errors=True)  # a fresh start: the previous run's home and data
    print("Starting the local training platform and Airflow (about a minute) ...", flush=True)
    with dev_stack(
        args.workdir.resolve(),
        args.dags_folder.resolve(),
        port=args.port,
        env={"TRAINING_SECONDS_PER_EPOCH": str(args.seconds_per_epoch)},
        seconds_per_epoch=args.seconds_per_epoch,
        allow_user_code=args.allow_user_code,
    ) as (platform, stack):
        user, password = stack.login or ("", "")
        print(
            f"\nAirflow UI: {stack.url}  (login {user} / {password})\n"
            f"Local training platform: {platform.url}\n"
            "Trigger a DAG (e.g. tensorone_retrain_digits), open its train task and the 'Training job' tab.\n"
            "Ctrl-C stops everything this started.",
            flush=True,
        )
        stopping = []
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
        try:
            while not stopping and all(c.proc.poll() is None for c in stack.components.values()):
                time.sleep(1)
        except KeyboardInterrupt:
            pass
        print("\nStopping ...", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
