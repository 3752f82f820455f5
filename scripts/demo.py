"""`make demo`: the retraining example DAG on real Airflow against the local training platform.

Starts the local platform (a subprocess on 127.0.0.1, stopped by its PID at the end), prepares a
throw-away AIRFLOW_HOME under .demo/, runs ``airflow dags test tensorone_retrain_digits`` and prints
the job's state changes, progress and final metrics as they reach the task log, then a summary from
the platform's own records. Exit status 0 only if the DAG run succeeded and the model was promoted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from airflow_training_platform.control import LocalPlatformControl
from airflow_training_platform.server import LocalPlatformServer

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".demo"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
DAG_ID = "tensorone_retrain_digits"
API_KEY = "demo-local-key"
SHOWN = (
    "Submitted training job",
    "Training job ",
    "validation accuracy",
    "promoted checkpoint",
    "ERROR",
    "Traceback",
)


_STRUCTLOG = re.compile(r"\[\w+\s*\]\s(?P<msg>.*?)(?:\s\[[\w.]+\](?:\s+loc=\S+)?)?$")


def task_log_message(line: str) -> str:
    """The message part of an Airflow (structlog) console line: no timestamp, level or logger."""
    match = _STRUCTLOG.search(line.rstrip())
    return match.group("msg") if match else line.rstrip()


def say(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def main() -> int:
    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "airflow").mkdir(parents=True)
    started = time.monotonic()
    with LocalPlatformServer(WORK / "platform", gpus=2, seconds_per_epoch=0.5, api_key=API_KEY) as platform:
        say(f"local training platform on {platform.url} (pid {platform.pid}), data in {WORK / 'platform'}")
        env = {
            **os.environ,
            "AIRFLOW_HOME": str(WORK / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "example_dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW_CONN_TENSORONE_LOCAL": json.dumps(
                {"conn_type": "tensorone", "host": platform.url, "password": API_KEY}
            ),
            "TRAINING_MODEL_REGISTRY": str(WORK / "registry"),
            "PYTHONUNBUFFERED": "1",
        }
        say("airflow db migrate (SQLite) ...")
        subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True)
        say(f"airflow dags test {DAG_ID}  (full log: .demo/dags_test.log)")
        log_path = WORK / "dags_test.log"
        with (
            log_path.open("w") as log,
            subprocess.Popen(
                [AIRFLOW, "dags", "test", DAG_ID],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            ) as proc,
        ):
            for line in proc.stdout:
                log.write(line)
                if any(key in line for key in SHOWN):
                    print("  | " + task_log_message(line), flush=True)
        dag_ok = proc.returncode == 0
        jobs = LocalPlatformControl(platform.url).jobs()

    say(
        f"DAG run {'succeeded' if dag_ok else 'FAILED'} in {time.monotonic() - started:.0f} s; platform stopped"
    )
    for job in jobs:
        states = " → ".join(h["state"] for h in job["state_history"])
        metrics = job.get("metrics") or {}
        say(f"job {job['job_id']}: {states}")
        say(
            f"  final validation accuracy {metrics.get('val_accuracy') or float('nan'):.4f}, "
            f"loss {metrics.get('loss') or float('nan'):.4f}, cost ${job['cost']['current_usd']:.4f}"
        )
    registry = WORK / "registry" / "digits-classifier.json"
    if registry.exists():
        record = json.loads(registry.read_text())
        say(f"promoted checkpoint {record['checkpoint_id']}: {record['checkpoint_path']}")
    else:
        say("no model promoted")
    return 0 if dag_ok and registry.exists() else 1


if __name__ == "__main__":
    sys.exit(main())
