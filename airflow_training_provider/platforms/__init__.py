"""Platform dialects, one module per platform, looked up by Airflow connection type."""

from __future__ import annotations

from airflow_training_provider.platforms.base import ApiRequest, Capabilities, Credentials, Dialect
from airflow_training_provider.platforms.tensorone import TensorOneDialect
from airflow_training_provider.platforms.together import TogetherDialect

DIALECTS: dict[str, type[Dialect]] = {d.conn_type: d for d in (TensorOneDialect, TogetherDialect)}


def get_dialect(conn_type: str) -> Dialect:
    """The dialect for an Airflow connection type (``"tensorone"``, ``"together"``).

    :raises ValueError: if no dialect serves that connection type.
    """
    try:
        return DIALECTS[conn_type]()
    except KeyError:
        raise ValueError(
            f"Connection type {conn_type!r} is not a training platform; expected one of {sorted(DIALECTS)}"
        ) from None


__all__ = ["ApiRequest", "Capabilities", "Credentials", "Dialect", "DIALECTS", "get_dialect"]
