"""The simulator fixtures of tests/sim: the load generator and calibrate-sim are tried against it."""

from __future__ import annotations

from tests.sim.conftest import fast_sim, sim_factory

__all__ = ["fast_sim", "sim_factory"]
