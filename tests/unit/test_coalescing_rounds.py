"""The coalesced poller (``hooks/coalescing.py``) over a client of canned answers: after a
member's own first read, its status comes from the rounds' batch reads."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from airflow_training_provider.budget import AccountBudget, ApiRates
from airflow_training_provider.errors import TransientPlatformError
from airflow_training_provider.hooks.coalescing import StatusPoller
from airflow_training_provider.models import JobState
from airflow_training_provider.platforms.tensorone import TensorOneDialect

D = TensorOneDialect()


def row(job_id: str, status: str = "running") -> dict[str, Any]:
    return {"jobId": job_id, "name": job_id, "status": status}


class CannedClient:
    """The client a poller reads with: each batch read answers ``pages`` (a failure when the
    entry is an exception), the last one again once they run out."""

    def __init__(self, *pages: Any) -> None:
        self.dialect = D
        self.connection = SimpleNamespace(base_url="https://api.tensorone.ai")
        self.pages = list(pages)
        self.sent: list[Any] = []

    async def call(self, request: Any) -> Any:
        self.sent.append(request)
        page = self.pages.pop(0) if len(self.pages) > 1 else self.pages[0]
        if isinstance(page, Exception):
            raise page
        return page


def test_a_member_is_answered_from_a_round_after_its_own_first_read():
    """The member's second poll waits for a round (the first one: the poller starts then) and is
    answered from its rows — no own read after the first."""
    client = CannedClient({"jobs": [row("a"), row("b", "queued")], "totalCount": 2})

    async def polls() -> list[Any]:
        poller = StatusPoller(client, AccountBudget(ApiRates()))
        poller.join("a", 0.2, client)
        first = await poller.status("a")  # the first read is the job's own
        poller.own_read("a", D.parse_job(row("a")))
        answers = [first]
        for _ in range(3):
            await asyncio.sleep(0.2)
            answers.append(await poller.status("a"))
        poller.leave("a")
        return [answers, poller.rounds]

    (first, *later), rounds = asyncio.run(polls())
    assert first is None
    assert [job.state for job in later] == [JobState.RUNNING] * 3 and {job.id for job in later} == {"a"}
    assert rounds >= 3 and all(r.path == "/v2/training/jobs" for r in client.sent)


def test_a_failed_round_sends_the_member_to_its_own_read_once_then_the_next_round_answers():
    client = CannedClient(TransientPlatformError("503"), {"jobs": [row("a")], "totalCount": 1})

    async def polls() -> list[Any]:
        poller = StatusPoller(client, AccountBudget(ApiRates()))
        poller.join("a", 0.2, client)
        poller.own_read("a", D.parse_job(row("a")))
        answers = []
        for _ in range(3):
            await asyncio.sleep(0.2)
            answers.append(await poller.status("a"))
        poller.leave("a")
        return answers

    failed, *answered = asyncio.run(polls())
    assert failed is None, "the failed round: its own read"
    assert [job.id for job in answered] == ["a", "a"]


def test_a_member_cancelled_as_a_round_starts_ends():
    """A cancel that lands as the round's start wakes the waiting member is not lost (Python
    3.11's ``wait_for`` returned the event's result instead, and the cancelled wait went on)."""
    client = CannedClient({"jobs": [row("a")], "totalCount": 1})

    async def cancel_at_round_start() -> bool:
        poller = StatusPoller(client, AccountBudget(ApiRates()))
        poller.join("a", 100.0, client)  # a long cadence: the member waits between rounds
        poller.own_read("a", D.parse_job(row("a")))
        member = asyncio.create_task(poller.status("a"))
        await asyncio.sleep(0.2)  # the first round read; the member now waits for the next one
        started, poller._started = poller._started, asyncio.Event()
        started.set()  # as a round starts: every waiting member woken …
        member.cancel()  # … and, in the same step, the wait is cancelled
        await asyncio.wait({member}, timeout=2.0)
        poller.leave("a")
        poller.close()
        return member.cancelled()

    assert asyncio.run(cancel_at_round_start())
