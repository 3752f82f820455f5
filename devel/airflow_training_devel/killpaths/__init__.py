"""The kill-path harness: a real Airflow stack (PostgreSQL, Redis, api-server, scheduler with the
LocalExecutor and the CeleryExecutor, two Celery workers, dag-processor, two triggerers) and a local
training platform, the K1–K24 scenarios (:mod:`.scenarios`) for every platform and executor
(:mod:`.flavors`), and their DAGs (``dags/kp_dags.py``).
Used by ``tests/killpaths`` and ``scripts/killpath_benchmark.py``."""

from airflow_training_devel.killpaths.env import KillPathEnv
from airflow_training_devel.killpaths.flavors import FLAVORS, Flavor
from airflow_training_devel.killpaths.scenarios import SCENARIOS, Outcome, pairs, run_scenarios

__all__ = ["FLAVORS", "SCENARIOS", "Flavor", "KillPathEnv", "Outcome", "pairs", "run_scenarios"]
