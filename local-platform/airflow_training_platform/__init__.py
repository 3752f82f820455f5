"""The local training platform: a server speaking the supported platforms' wire protocols that runs
real scikit-learn training processes on simulated GPUs.

Parts: ``trainer`` (the child training program), ``engine/`` (jobs in neutral states, GPU queue,
processes, billing, checkpoints; no wire format), ``platforms/`` (one folder per emulated platform:
routes, wire translation, error format), ``dispatch`` and ``app`` (the ASGI app and the ``/_local``
endpoints), ``settings`` (the one settings definition), ``cli`` (``airflow-training-platform
serve``), ``server`` (``LocalPlatformServer`` for tests and demos), ``faults`` (fault injection).
"""
