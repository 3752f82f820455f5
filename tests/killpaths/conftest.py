"""The kill-path stack (``airflow_training_devel.killpaths``), started once for the
kill-path tests and stopped by PID afterwards."""

from __future__ import annotations

import pytest

from airflow_training_devel.killpaths import KillPathEnv, run_scenarios


@pytest.fixture(scope="session")
def kill_path_stack(tmp_path_factory) -> KillPathEnv:
    env = KillPathEnv(tmp_path_factory.mktemp("killpaths"))
    try:
        yield env
    finally:
        env.stop()


@pytest.fixture(scope="session")
def kill_path_env(kill_path_stack):
    """``(stack, platform)``: Airflow's processes and the local platform's ``/_local`` client."""
    return kill_path_stack.stack, kill_path_stack.platform


@pytest.fixture(scope="session")
def outcomes(request, kill_path_env):
    """Every selected (scenario, platform) pair, run once up front — exclusive scenarios alone, the
    others five at a time — so the suite takes minutes, not the sum of all cases."""
    wanted = set()
    for item in request.session.items:
        marker = item.get_closest_marker("scenario")
        if marker:
            wanted.add((marker.args[0], item.callspec.params["flavor"]))
    return run_scenarios(*kill_path_env, wanted)


@pytest.fixture
def flavor(request) -> str:
    """The platform a kill-path test runs on (parametrized from the flavors the scenario applies to)."""
    return request.param


@pytest.fixture
def outcome(request, outcomes, flavor):
    result = outcomes[(request.node.get_closest_marker("scenario").args[0], flavor)]
    if isinstance(result, BaseException):
        raise result
    return result
