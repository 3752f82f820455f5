"""Tools to test DAGs and this provider without a cloud: an in-process runner for deferrable
operators (:mod:`.inprocess`) and a real Airflow stack with kill-path scenarios (:mod:`.stack`,
:mod:`.postgres`, :mod:`.killpaths`). The local training platform itself is
:mod:`airflow_training_provider.local_platform`."""
