"""The coalesced poller's rules (``hooks/coalescing.py``) with a scripted client: one batch read
per round answers every member; a member's own read is asked for on its first poll, a job missing
from the round, a job that ended, a changed partial row, a failed round; a state change is seen at
the first round after it."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import pytest

from airflow_training_provider.budget import AccountBudget, ApiRates
from airflow_training_provider.errors import TransientPlatformError
from airflow_training_provider.hooks.coalescing import StatusPoller
from airflow_training_provider.platforms.base import ApiRequest
from airflow_training_provider.platforms.sagemaker import SageMakerDialect
from tests.unit.test_sagemaker_dialect import DESCRIBE

INTERVAL = 0.05


class PartialRows(SageMakerDialect):
    """SageMaker's batch read, as if its rows were partial (as PAI's list is)."""

    batch_rows_complete = False


@dataclass
class Connection:
    base_url: str = "http://127.0.0.1:1"


class ScriptedClient:
    """Answers ``Search`` by name from ``statuses`` (job name → SageMaker status; a job not in it
    is not listed); counts the batch reads; fails them while ``failing``."""

    def __init__(self, dialect: SageMakerDialect, statuses: dict[str, str]) -> None:
        self.dialect = dialect
        self.connection = Connection()
        self.statuses = statuses
        self.batch_reads: list[list[str]] = []
        self.failing = False

    async def call(self, request: ApiRequest) -> Any:
        assert request.headers["X-Amz-Target"] == "SageMaker.Search"
        if self.failing:
            raise TransientPlatformError("Service unavailable", status=503)
        names = [
            name
            for sub in request.body["SearchExpression"]["SubExpressions"]
            for name in sub["Filters"][0]["Value"].split(",")
        ]
        self.batch_reads.append(names)
        rows = [
            {"TrainingJob": {**DESCRIBE, "TrainingJobName": n, "TrainingJobStatus": self.statuses[n]}}
            for n in names
            if n in self.statuses
        ]
        return json.loads(json.dumps({"Results": rows}))


def poller_of(client: ScriptedClient) -> StatusPoller:
    return StatusPoller(client, AccountBudget(ApiRates()))  # type: ignore[arg-type]


async def first_own_read(poller: StatusPoller, client: ScriptedClient, name: str) -> None:
    poller.join(name, INTERVAL, client)
    assert await poller.status(name) is None  # the first read is the job's own
    poller.own_read(name, client.dialect.parse_job({**DESCRIBE, "TrainingJobName": name}))


def test_one_batch_read_per_round_answers_every_member():
    async def scenario():
        client = ScriptedClient(SageMakerDialect(), {f"job-{i}": "InProgress" for i in range(250)})
        poller = poller_of(client)
        for name in client.statuses:
            await first_own_read(poller, client, name)
        for _ in range(3):  # three polls of every member, all at once
            jobs = await asyncio.gather(*(poller.status(n) for n in client.statuses))
            assert [j.id for j in jobs] == list(client.statuses)
            await asyncio.sleep(INTERVAL)
        poller._task.cancel()
        return client.batch_reads, poller.rounds

    reads, rounds = asyncio.run(scenario())
    assert rounds >= 3  # the rounds run at their cadence, whoever asks
    # 250 jobs: three Search calls (100 names each at most) a round; the cancel may land in a round
    # whose calls were made before it was counted
    assert 3 * rounds <= len(reads) <= 3 * (rounds + 1)
    assert sorted(len(names) for names in reads[:3]) == [50, 100, 100]


@pytest.mark.parametrize(
    ("dialect", "status", "listed", "expected"),
    [
        (SageMakerDialect(), "InProgress", True, "row"),
        (SageMakerDialect(), "Completed", True, "row"),  # a whole-job row is its final view
        (PartialRows(), "Completed", True, None),
        (SageMakerDialect(), "InProgress", False, None),
    ],
    ids=[
        "running: the row",
        "ended, a whole row: the row",
        "ended, a partial row: its own",
        "not listed: its own",
    ],
)
def test_a_member_reads_its_own_job_when_the_row_is_partial_and_ended_or_missing(
    dialect, status, listed, expected
):
    async def scenario():
        client = ScriptedClient(dialect, {"a": "InProgress"})
        poller = poller_of(client)
        await first_own_read(poller, client, "a")
        client.statuses.pop("a")
        if listed:
            client.statuses["a"] = status
        job = await poller.status("a")
        poller._task.cancel()
        return job

    job = asyncio.run(scenario())
    assert (job and "row") == expected
    if expected:
        assert job.raw_status == f"{status}/Training" and job.metrics == {"train:loss": 0.41}


def test_partial_rows_answer_the_last_own_view_until_the_row_changes():
    async def scenario():
        client = ScriptedClient(PartialRows(), {"a": "InProgress"})
        poller = poller_of(client)
        await first_own_read(poller, client, "a")
        own = poller.members["a"].own_view
        unchanged = await poller.status("a")
        client.statuses["a"] = "Stopping"
        changed = await poller.status("a")
        poller._task.cancel()
        return own, unchanged, changed

    own, unchanged, changed = asyncio.run(scenario())
    assert unchanged is own  # nothing new in a partial row: the job's own last view
    assert changed is None  # the row changed: the job's own read


def test_a_failed_round_sends_each_member_to_its_own_read_and_the_next_round_serves_again():
    async def scenario():
        client = ScriptedClient(SageMakerDialect(), {"a": "InProgress"})
        poller = poller_of(client)
        await first_own_read(poller, client, "a")
        client.failing = True
        failed = await poller.status("a")
        poller.own_read(
            "a", client.dialect.parse_job({**DESCRIBE, "TrainingJobName": "a"})
        )  # as the driver does
        client.failing = False
        served = await poller.status("a")
        poller._task.cancel()
        return failed, served

    failed, served = asyncio.run(scenario())
    assert failed is None
    assert served is not None and served.id == "a"


def test_a_state_change_is_seen_at_the_first_round_after_it():
    async def scenario():
        client = ScriptedClient(SageMakerDialect(), {"a": "InProgress"})
        poller = poller_of(client)
        await first_own_read(poller, client, "a")
        await poller.status("a")
        changed_at = time.monotonic()
        client.statuses["a"] = "Stopping"
        while (job := await poller.status("a")) is not None and job.raw_status.startswith("InProgress"):
            await asyncio.sleep(INTERVAL)
        poller._task.cancel()
        return time.monotonic() - changed_at, job

    latency, job = asyncio.run(scenario())
    assert job is not None and job.raw_status.startswith("Stopping")
    assert latency < 2 * INTERVAL + 0.05  # its own poll's sleep, then that round's answer
