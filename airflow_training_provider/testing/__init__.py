"""Testing DAGs without a cloud: :mod:`.inprocess` runs a deferrable operator, its trigger and its
resumption in this process (no scheduler, triggerer or database). The local training platform to
run them against is the ``airflow-training-platform`` distribution (the ``[local-platform]`` extra)."""
