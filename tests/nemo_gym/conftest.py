"""Fixtures for the NeMo Gym drop-in tests: the simulator as the model server, the agent stack."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from gymbench.sim import SimServerHandle, start_sim_server

from .stack import AgentStack, unused_port

FAST_SIM = {"step_base_s": 0.002, "step_per_seq_s": 0.0, "prefill_per_token_s": 0.0, "output_tokens_mean": 8}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServerHandle]:
    handle = start_sim_server(**FAST_SIM)
    yield handle
    handle.stop()


@pytest.fixture
async def stack(sim: SimServerHandle) -> AsyncIterator[AgentStack]:
    """Two agents, each with its resources server, and a head server listing them, on the test's loop."""
    started = await AgentStack(sim.base_url, sim.config.model, ("simple_agent", "math_agent")).start()
    yield started
    await started.stop()


@pytest.fixture
def dead_port() -> int:
    return unused_port()
