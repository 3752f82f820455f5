"""A platform's spending budget (an account balance) counts every job it ran: deleting an ended job
(Together's and ModelArts' delete) does not give its money back. A real engine in this process
with its real trainer."""

from __future__ import annotations

from airflow_training_platform.engine import EngineConfig, JobSpec, TrainingEngine


def test_a_deleted_job_still_counts_against_its_platforms_budget(tmp_path):
    engine = TrainingEngine(
        EngineConfig(data_dir=str(tmp_path), gpus=1, seconds_per_epoch=0.1, usd_per_gpu_hour=3600.0)
    )
    engine.start()
    try:
        engine.set_budget("together", 1_000_000.0, "insufficient balance")
        job = engine.submit(
            JobSpec("spend", dataset="iris", hyperparameters={"epochs": 2}, platform="together")
        )
        assert engine.wait_for_terminal(job["job_id"], 60)
        spent = engine.get(job["job_id"])["cost"]["current_usd"]
        assert spent > 0
        left = engine.estimate_price("together", epochs=1)["balance_left_usd"]
        assert left == 1_000_000.0 - spent

        engine.delete(job["job_id"], platform="together")
        assert engine.list(platform="together") == []
        assert engine.estimate_price("together", epochs=1)["balance_left_usd"] == left
    finally:
        engine.shutdown()
