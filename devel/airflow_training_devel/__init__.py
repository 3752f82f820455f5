"""The development harness of airflow-training-provider (the ``airflow-training-devel``
distribution, never released): a real Airflow stack on PostgreSQL (:mod:`.stack`,
:mod:`.postgres`, :mod:`.redis` for the CeleryExecutor), ``make ui``'s stack (:mod:`.devstack`)
and the kill-path scenarios (:mod:`.killpaths`). The in-process runner users test their DAGs with
ships with the provider (:mod:`airflow_training_provider.testing.inprocess`); the local training
platform is its own distribution (:mod:`airflow_training_platform`)."""
