"""TMS tags of ModelArts training jobs on the local platform (``docs/platforms/modelarts.md``, "Tags"):
the routes the SDK's ``create_train_job_tags``, ``show_train_job_tags``, ``delete_train_job_tags``
and ``list_training_job_tags`` call, and the store the job search's ``tags`` condition reads.

* ``POST /v2/{project_id}/modelarts-training-job/{id}/tags/create`` ``{"tags": [{key, value}]}`` →
  ``{"tags": [{key, value}]}``, the job's tags after the change (a key already set takes the new value);
* ``GET …/modelarts-training-job/{id}/tags`` → ``{"tags": [{key, value}]}``, sorted by key;
* ``DELETE …/modelarts-training-job/{id}/tags/delete`` ``{"tags": [{key, value?}]}`` → 204: those keys
  removed (a key the job lacks is ignored);
* ``GET …/modelarts-training-job/tags`` → ``{"tags": [{key, values}]}``: every key used in the
  project with its distinct values.

Tags live as long as the server and go with the job's delete. Keys are 1–128 characters, values
0–255 (SDK ``TmsTag``, ``ProjectTag``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from airflow_training_platform.json_answers import JSONResponse
from airflow_training_platform.platforms.modelarts.wire import bad

ROOT = "/v2/{project_id}/modelarts-training-job"
KEY_MAX = 128
VALUE_MAX = 255


class TmsTags:
    """The tags of each job, by job id (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tags: dict[str, dict[str, str]] = {}

    def of(self, job_id: str) -> dict[str, str]:
        """The job's tags, ``{key: value}`` (empty when it has none)."""
        with self._lock:
            return dict(self._tags.get(job_id, {}))

    def set(self, job_id: str, tags: dict[str, str]) -> dict[str, str]:
        """Add or replace ``tags`` (key → value) on ``job_id``; returns all of its tags after."""
        with self._lock:
            self._tags.setdefault(job_id, {}).update(tags)
            return dict(self._tags[job_id])

    def remove(self, job_id: str, keys: list[str] | None = None) -> None:
        """Remove ``keys`` from the job's tags, or all of them (``None``: the job was deleted)."""
        with self._lock:
            if keys is None:
                self._tags.pop(job_id, None)
            else:
                for key in keys:
                    self._tags.get(job_id, {}).pop(key, None)


def _pairs(raw: bytes, need_value: bool) -> list[tuple[str, str]]:
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        raise bad("body", "is not valid JSON") from None
    tags = body.get("tags") if isinstance(body, dict) else None
    if not isinstance(tags, list) or not tags:
        raise bad("tags", "must be a non-empty list of {key, value}")
    pairs = []
    for index, tag in enumerate(tags):
        key = tag.get("key") if isinstance(tag, dict) else None
        if not isinstance(key, str) or not 1 <= len(key) <= KEY_MAX:
            raise bad(f"tags.{index}.key", f"must be 1-{KEY_MAX} characters")
        value = tag.get("value", "" if not need_value else None)
        if not isinstance(value, str) or len(value) > VALUE_MAX:
            raise bad(f"tags.{index}.value", f"must be a string of at most {VALUE_MAX} characters")
        pairs.append((key, value))
    return pairs


def _listed(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"key": k, "value": v} for k, v in sorted(tags.items())]


def add_tag_routes(
    router: APIRouter,
    store: TmsTags,
    checked: Callable[[Request], Awaitable[bytes]],
    record: Callable[[str, str], dict[str, Any]],
    project_jobs: Callable[[str], list[str]],
) -> None:
    """Add the tag routes to ``router``: ``checked(request)`` verifies the signature and returns the
    body; ``record(project_id, job_id)`` raises the not-found error for a job not in the project;
    ``project_jobs(project_id)`` lists its job ids."""

    @router.post(ROOT + "/{job_id}/tags/create")
    async def create_tags(request: Request, project_id: str, job_id: str) -> JSONResponse:
        pairs = _pairs(await checked(request), need_value=True)
        record(project_id, job_id)
        return JSONResponse({"tags": _listed(store.set(job_id, dict(pairs)))})

    @router.get(ROOT + "/{job_id}/tags")
    async def show_tags(request: Request, project_id: str, job_id: str) -> JSONResponse:
        await checked(request)
        record(project_id, job_id)
        return JSONResponse({"tags": _listed(store.of(job_id))})

    @router.delete(ROOT + "/{job_id}/tags/delete")
    async def delete_tags(request: Request, project_id: str, job_id: str) -> Response:
        pairs = _pairs(await checked(request), need_value=False)
        record(project_id, job_id)
        store.remove(job_id, [key for key, _ in pairs])
        return Response(status_code=204)

    @router.get(ROOT + "/tags")
    async def project_tags(request: Request, project_id: str) -> JSONResponse:
        await checked(request)
        values: dict[str, set[str]] = {}
        for job_id in project_jobs(project_id):
            for key, value in store.of(job_id).items():
                values.setdefault(key, set()).add(value)
        return JSONResponse({"tags": [{"key": k, "values": sorted(v)} for k, v in sorted(values.items())]})
