"""One simulated server for every fuzz case that needs a real run (started once: it costs ~1 s)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .cases import Env


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    from gymbench.sim import running_sim_server

    with running_sim_server(preset="zero-latency") as server:
        yield Env(base_url=server.base_url)
