from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gymbench.sim import SimServerHandle, start_sim_server

MODEL = "gymbench-sim"
"""The model the simulator serves unless configured otherwise."""
FAST = {"step_base_s": 0.002, "step_per_seq_s": 0.0, "prefill_per_token_s": 0.0, "output_tokens_mean": 8}


@pytest.fixture(scope="module")
def sim_factory() -> Iterator[Callable[..., SimServerHandle]]:
    """Start simulated servers for a test module; all are stopped when the module ends."""
    started: list[SimServerHandle] = []

    def start(**overrides: Any) -> SimServerHandle:
        handle = start_sim_server(**overrides)
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.stop()


@pytest.fixture(scope="module")
def fast_sim(sim_factory: Callable[..., SimServerHandle]) -> SimServerHandle:
    return sim_factory(**FAST)
