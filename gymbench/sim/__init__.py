"""The simulated model server: an OpenAI-compatible continuous-batching engine in miniature.

Its capacity follows from its parameters (see :func:`gymbench.sim.capacity.describe`), which makes
it the ground truth against which the tuner and the bottleneck diagnosis are checked. It runs as
a server in its own process, or in the caller's process (:class:`InProcessBackend`), which on a
simulated clock (:func:`run_in_simulated_time`) gives timing tests that no machine load can move.
"""

from __future__ import annotations

from gymbench.sim.capacity import Capacity, describe
from gymbench.sim.config import PRESETS, SimConfig, config_from_preset
from gymbench.sim.inprocess import InProcessBackend
from gymbench.sim.launcher import SimServerHandle, running_sim_server, start_sim_server
from gymbench.sim.virtual import VirtualTimeLoop, run_in_simulated_time

__all__ = [
    "PRESETS",
    "Capacity",
    "InProcessBackend",
    "SimConfig",
    "SimServerHandle",
    "VirtualTimeLoop",
    "config_from_preset",
    "describe",
    "run_in_simulated_time",
    "running_sim_server",
    "start_sim_server",
]
