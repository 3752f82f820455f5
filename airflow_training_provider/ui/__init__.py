"""The Airflow UI side: a "Training job" tab on every task instance (an Airflow plugin)."""
