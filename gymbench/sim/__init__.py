"""The simulated model server: an OpenAI-compatible continuous-batching engine in miniature.

Its capacity follows from its parameters (see :func:`gymbench.sim.capacity.describe`), which makes
it the ground truth against which the tuner and the bottleneck diagnosis are checked. It runs as
a server in its own process, or in the caller's process (:class:`InProcessBackend`), which on a
simulated clock (:func:`run_in_simulated_time`) gives timing tests that no machine load can move.

The names below are imported on first use, so that ``gymbench.sim.plugin`` (loaded on every
``gymbench`` call) does not pay for the server's imports.
"""

from __future__ import annotations

from gymbench.lazy import lazy_exports

_EXPORTS = {
    "PRESETS": "gymbench.sim.config",
    "SimConfig": "gymbench.sim.config",
    "config_from_preset": "gymbench.sim.config",
    "Capacity": "gymbench.sim.capacity",
    "describe": "gymbench.sim.capacity",
    "InProcessBackend": "gymbench.sim.inprocess",
    "SimServerHandle": "gymbench.sim.launcher",
    "running_sim_server": "gymbench.sim.launcher",
    "running_sim_replicas": "gymbench.sim.launcher",
    "start_sim_server": "gymbench.sim.launcher",
    "VirtualTimeLoop": "gymbench.sim.virtual",
    "run_in_simulated_time": "gymbench.sim.virtual",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
