"""ASGI dispatch of the local training platform: each request goes to the first emulated platform
whose sub-application serves it (by path prefix, or by a header such as ``X-Amz-Target`` for an
AWS-style ``POST /``); everything else, and the lifespan, goes to the control app (``/_local``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_training_platform.platforms.base import LocalPlatform


class PlatformDispatcher:
    """An ASGI app over ``(platform, sub-app)`` pairs and a ``fallback`` app."""

    def __init__(self, apps: Sequence[tuple[LocalPlatform, Any]], fallback: Any) -> None:
        self.apps = list(apps)
        self.fallback = fallback

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            for platform, app in self.apps:
                if platform.serves(scope):
                    await app(scope, receive, send)
                    return
        await self.fallback(scope, receive, send)
