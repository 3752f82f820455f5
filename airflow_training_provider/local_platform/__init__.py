"""The local training platform: a server speaking training-platform wire protocols (TensorOne v2 today)
that runs real scikit-learn training processes on simulated GPUs.

Modules: ``trainer`` (the child training program), ``engine`` (jobs, slots, processes, cost; no wire
format), ``routers/`` (one wire format per module), ``app`` (FastAPI app + ``/_local`` endpoints),
``cli`` (``airflow-training-platform serve``), ``server`` (``LocalPlatformServer`` for tests and demos).
"""
