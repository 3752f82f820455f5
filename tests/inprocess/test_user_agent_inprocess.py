"""Every request names the provider and its version in ``User-Agent``, on every platform and from
both drivers, and a signed request still verifies with it: the local platform counts the requests
carrying it (a fault rule matching the header, with no fault to apply)."""

from __future__ import annotations

import asyncio
import importlib.metadata

import pytest

from airflow_training_devel.local_fixtures import LOCAL_FIXTURES
from airflow_training_provider.hooks.training import TrainingPlatformHook
from airflow_training_provider.hooks.training_async import AsyncTrainingPlatformHook
from airflow_training_provider.hooks.transport import USER_AGENT

CONNS = sorted(LOCAL_FIXTURES)  # every platform's local connection


def test_the_user_agent_names_the_installed_provider_version():
    assert (
        USER_AGENT == f"airflow-training-provider/{importlib.metadata.version('airflow-training-provider')}"
    )


@pytest.mark.parametrize("conn", CONNS)
def test_every_request_of_both_drivers_carries_the_user_agent(control, conn):
    conn_id = f"{conn}_local"
    ours = control.add_fault(header="User-Agent", header_value=USER_AGENT, count=-1)
    try:
        hook = TrainingPlatformHook(conn_id)
        hook.drive(hook.ops.probe())  # authenticated (signed on AWS, PAI, ModelArts): it was accepted

        async def probe_async() -> None:
            async with AsyncTrainingPlatformHook(conn_id).client() as client:
                await client.drive(client.ops.probe())

        asyncio.run(probe_async())
        fired = control.fault(ours["id"])["fired"]
    finally:
        control.clear_faults(rule_id=ours["id"])
    assert fired == 2, "one probe from each driver"
