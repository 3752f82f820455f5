"""Small wire-formatting helpers shared by the routers (timestamps, durations, sizes, ids)."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime


def iso(ts: float | None) -> str | None:
    """Unix seconds → ISO-8601 UTC with milliseconds and a ``Z`` suffix (None stays None)."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def human_duration(seconds: float | None) -> str | None:
    """Seconds → ``"1h 2m"``, ``"1m 20s"``, ``"7s"`` (hours drop seconds; None stays None)."""
    if seconds is None:
        return None
    total = max(0, int(round(seconds)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def human_size(num_bytes: int | None) -> str:
    """Bytes → ``"512B"``, ``"161.2KB"``, ``"1.1GB"`` (powers of 1024)."""
    size = float(num_bytes or 0)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{int(size)}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{size:.1f}TB"  # pragma: no cover


def new_request_id() -> str:
    """A fresh ``req_<16 hex>`` request id."""
    return f"req_{secrets.token_hex(8)}"
