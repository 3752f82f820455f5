"""API-key authentication shared by the bearer-token routers."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from fastapi import Request

from airflow_training_platform.errors import ApiError


def bearer_auth(api_key: str | None) -> Callable[[Request], str]:
    """FastAPI dependency factory checking ``Authorization: Bearer <key>`` or a bare ``Authorization: <key>``.

    With ``api_key`` set the key must match it; without, any non-empty key is accepted.
    The dependency returns the key; it raises ApiError 401 UNAUTHORIZED when the header is missing,
    empty or wrong.
    """

    def dependency(request: Request) -> str:
        header = request.headers.get("authorization", "").strip()
        scheme, _, rest = header.partition(" ")
        key = rest.strip() if scheme.lower() == "bearer" else header
        if not key:
            raise ApiError(401, "UNAUTHORIZED", "Missing API key: send 'Authorization: Bearer <key>'")
        if api_key is not None and not hmac.compare_digest(key.encode(), api_key.encode()):
            raise ApiError(401, "UNAUTHORIZED", "Invalid API key")
        return key

    return dependency
