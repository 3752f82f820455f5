"""A driver for lifecycle operations that answers from a script instead of a network: each request
is looked up by ``(method, path)`` and answered with the next scripted reply (a JSON body, or an
exception to throw in), on a fake clock that only moves when the operation sleeps."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from airflow_training_provider.errors import MalformedResponseError
from airflow_training_provider.lifecycle.operations import NewEvents, Operation, Progress, Sleep, advance
from airflow_training_provider.platforms.base import ApiRequest, parse_answer


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Canned:
    """``script[(method, path)]`` is a list of replies used in order; the last one repeats."""

    def __init__(self, script: dict[tuple[str, str], list[Any]], clock: FakeClock | None = None) -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.clock = clock or FakeClock()
        self.requests: list[ApiRequest] = []
        self.sleeps: list[float] = []
        self.reports: list[Progress | NewEvents] = []
        self._used: dict[tuple[str, str], int] = defaultdict(int)
        self.on_request: Callable[[ApiRequest], None] | None = None

    def reply(self, request: ApiRequest) -> Any:
        key = (request.method, request.path)
        if key not in self.script:
            raise AssertionError(f"unexpected request {key}")
        replies = self.script[key]
        index = min(self._used[key], len(replies) - 1)
        self._used[key] += 1
        return replies[index]

    def drive(self, operation: Operation[Any]) -> Any:
        reply: Any = None
        error: BaseException | None = None
        while True:
            done, step = advance(operation, reply, error)
            if done:
                return step
            reply = error = None
            if isinstance(step, ApiRequest):
                self.requests.append(step)
                if self.on_request:
                    self.on_request(step)
                answer = self.reply(step)
                if isinstance(answer, BaseException):
                    error = answer
                elif step.reader is not None:  # as the transport does: the raw body, read
                    try:
                        reply = parse_answer(step, step.reader, json.dumps(answer), 200)
                    except MalformedResponseError as exc:
                        error = exc
                else:
                    reply = answer
            elif isinstance(step, Sleep):
                self.sleeps.append(step.seconds)
                self.clock.now += step.seconds
            else:
                self.reports.append(step)

    def calls(self, method: str, path: str) -> list[ApiRequest]:
        return [r for r in self.requests if (r.method, r.path) == (method, path)]
