"""The JSON every platform of the local platform answers with.

Python's ``json`` writes a non-finite float as the bare tokens ``NaN``, ``Infinity`` and
``-Infinity``, as the platforms' Python services do when a diverged run's loss is NaN; FastAPI's own
``JSONResponse`` refuses such a body (``Out of range float values are not JSON compliant``) and would
answer 500 instead. Clients read the tokens back (``json.loads``, botocore, the vendors' SDKs); the
provider must carry them on safely (its ``json_values``).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse as _FastApiJSONResponse
from fastapi.routing import APIRoute


class JSONResponse(_FastApiJSONResponse):
    """``fastapi.responses.JSONResponse`` that writes NaN and ±Infinity as Python's ``json`` does."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, allow_nan=True, separators=(",", ":")).encode("utf-8")


class RawJSONRoute(APIRoute):
    """A route whose answer is not re-serialized through a response model inferred from the
    handler's return annotation: pydantic would write NaN as ``null`` (its JSON default), losing
    what the trainer reported. The handler's dict goes to :class:`JSONResponse` as it is."""

    def __init__(self, path: str, endpoint: Any, **kwargs: Any) -> None:
        kwargs["response_model"] = None
        super().__init__(path, endpoint, **kwargs)
