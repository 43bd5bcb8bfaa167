"""The target of a run: the server its requests go to, and the backend that sends them.

Every job that generates load (``collect``, its shards, the pytest API, ``tune``'s and
``diagnose``'s probes) reaches its server through a :class:`Target` built once from its settings.
The target owns the server settings (:class:`TargetSettings`, which the commands' schemas inherit
and offer flat: ``+base_url``, ``+max_retries``, ``+sim_profile``), and:

- checks the backend's settings into its typed settings object once, before anything starts (a
  misspelt ``+backend_options`` key fails then, not after a simulator started);
- starts the simulator when no server is named (or uses a running one the caller keeps), and
  builds the backend from that object, with the simulator's address laid in when it stands in;
- watches the server's ``/metrics`` (:mod:`gymbench.engine_metrics`), around a collection or as a
  probe's counters.

``base_url`` takes one form from the command to the request: a field of the typed settings
(``ServerConfig`` → the backend's schema instance, e.g.
:class:`~gymbench.builtin.backend_settings.OpenAISettings`), read by the backend, which checks it
once (:meth:`~gymbench.builtin.backend_settings.OpenAIServer.endpoint`).

A third-party backend that declares no settings schema gets a plain ``dict`` of the server
settings and its ``+backend_options``, as it always did; one that declares a schema gets an
instance of it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gymbench.builtin.backend_settings import ConnectionSettings, NemoGymAgent, OpenAIServer
from gymbench.engine_metrics import ReplicaWatch, ServerCounters, ServerWatch, find_server_counters
from gymbench.plugins import Plugins
from gymbench.settings import doc
from gymbench.types import Backend

if TYPE_CHECKING:
    from gymbench.sim.config import SimConfig
    from gymbench.sim.launcher import SimServerHandle

SERVER_GROUPS = (ConnectionSettings, OpenAIServer, NemoGymAgent)
"""The backends' settings groups every server command offers flat (``+base_url``, ``+max_retries``)."""
AGENT_SETTINGS = ("agent_url", "agent_name", "head_server")
NEMO_GYM_BACKEND = "nemo-gym"
"""The backend whose rows NeMo Gym's agents answer, so the run writes NeMo Gym 0.7.0's layout
(failed rollouts in the failures sidecar, see :class:`~gymbench.rollout.engine.CollectSettings`)."""
"""Settings that name a NeMo Gym agent: with no backend given, they choose ``nemo-gym``."""


@dataclass
class TargetSettings(ConnectionSettings, OpenAIServer, NemoGymAgent):
    """Where requests go: a named server (and the backend that speaks to it), or the simulator."""

    backend: str | None = field(
        default=None,
        metadata=doc(
            "backend plugin (unset: nemo-gym when an agent is named, openai when base_url is; "
            "with no server named at all, the simulated server)"
        ),
    )
    backend_options: dict[str, Any] = field(default_factory=dict, metadata=doc("extra backend settings"))
    sim_preset: str = field(default="vllm-like", metadata=doc("simulator preset when no backend is set"))
    sim_profile: str | None = field(
        default=None,
        metadata=doc(
            "calibrated simulator profile (YAML from gymbench calibrate-sim), laid over sim_preset", path=True
        ),
    )
    sim: dict[str, Any] = field(default_factory=dict, metadata=doc("simulator settings, e.g. +sim.max_num_seqs=8"))

    def chosen_backend(self) -> tuple[str, bool]:
        """The backend a run uses, and whether the simulator stands in for its server.

        The simulator stands in only when nothing names a server: a backend, an agent or a base URL
        given means that server or a clear error, never rows from the simulator instead."""
        if self.backend:
            return self.backend, False
        if any(getattr(self, key) for key in AGENT_SETTINGS):
            return NEMO_GYM_BACKEND, False
        return "openai", not self.base_url

    def server_values(self) -> dict[str, Any]:
        """Every server setting by name (the groups a backend's schema is made of)."""
        return {name: getattr(self, name) for group in SERVER_GROUPS for name in group.__dataclass_fields__}

    def simulator_config(self) -> SimConfig | None:
        """The simulator's configuration (``sim_preset``, ``sim_profile``, ``+sim.*``, serving ``model``
        when one is named) when no server is named, else None; typed and checked like every setting."""
        if not self.chosen_backend()[1]:
            return None
        from gymbench.sim.config import config_from_preset

        overrides = {"model": self.model, **self.sim} if self.model else self.sim
        return config_from_preset(self.sim_preset, overrides, self.sim_profile)


def chosen_backend(settings: TargetSettings) -> tuple[str, bool]:
    """:meth:`TargetSettings.chosen_backend`, for callers holding only the settings."""
    return settings.chosen_backend()


class Target:
    """One run's server and backend, from checked settings to a stopped simulator.

    Built once per run (every check that needs no server happens here); :meth:`started` starts what
    the run needs and hands out the backend, :meth:`watch` and :meth:`counters` read the server's
    ``/metrics``."""

    def __init__(self, settings: TargetSettings, plugins: Plugins) -> None:
        self.settings = settings
        self.plugins = plugins
        self.backend_name, self.simulated = settings.chosen_backend()
        self.simulator: SimConfig | None = settings.simulator_config()
        """The simulator that stands in for the server (checked now), or None when one is named."""
        self.backend_settings: object = self._checked_backend_settings()
        """The backend's settings: an instance of its schema (a plain dict for a backend without one);
        with the simulator standing in, its address is laid in once it runs."""
        self.server: SimServerHandle | None = None
        """The simulator serving this run, while it runs."""

    def _checked_backend_settings(self) -> object:
        """The server settings the backend's schema declares, plus ``backend_options`` (checked against
        the schema: a misspelt option is an error)."""
        declared = self.plugins.options("backend", self.backend_name)
        values = {k: v for k, v in self.settings.server_values().items() if declared is None or k in declared}
        values.update(self.settings.backend_options)
        return self.plugins.check("backend", self.backend_name, values)

    @property
    def base_url(self) -> str | None:
        """The server's OpenAI-compatible base URL (the simulator's once it runs), or None when the
        backend names none (an agent found through NeMo Gym's head server)."""
        value = _setting(self.backend_settings, "base_url")
        if isinstance(value, list):  # several replicas: the first stands for them where one is read
            value = value[0] if value else None
        return str(value) if value else None

    @contextlib.contextmanager
    def started(self, running_sim: Callable[[], SimServerHandle] | None = None) -> Iterator[Backend]:
        """The backend, its server running: the simulator is started (and stopped after) when no
        server is named, unless ``running_sim`` gives one the caller keeps (the pytest fixture's)."""
        if self.simulator is None:
            yield self.plugins.backend(self.backend_name, self.backend_settings)
            return
        with contextlib.ExitStack() as stack:
            if running_sim is not None:
                server = running_sim()
            else:
                from gymbench.console import warn
                from gymbench.sim import running_sim_server

                server = stack.enter_context(running_sim_server(self.simulator))
                warn(
                    f"no server set: using the simulated server ({self.simulator_named()}) at {server.url}; "
                    "for a real one set +base_url=... +model=... (an OpenAI-compatible server), or "
                    "+agent_name=NAME (a NeMo Gym agent, found through its head server) or +agent_url=..."
                )
            self.serve_from(server)
            try:
                yield self.plugins.backend(self.backend_name, self.backend_settings)
            finally:
                self.server = None

    def serve_from(self, server: SimServerHandle) -> None:
        """Send this run's requests to the simulator ``server`` (started by whoever runs it)."""
        self.server = server
        address = {"base_url": server.base_url, "model": self.settings.model or server.config.model}
        self.backend_settings = _with_values(self.backend_settings, address)

    def simulator_named(self) -> str:
        profile = f", profile {self.settings.sim_profile}" if self.settings.sim_profile else ""
        return f"preset {self.settings.sim_preset}{profile}"

    @property
    def base_urls(self) -> list[str]:
        """Every replica's base URL when the backend names several (``+base_url=[A, B]``), else [base_url]."""
        value = _setting(self.backend_settings, "base_url")
        if isinstance(value, list):
            return [str(url) for url in value]
        return [self.base_url] if self.base_url else []

    def watch(self, enabled: bool) -> ServerWatch | ReplicaWatch:
        """The server's ``/metrics`` before, during and after a collection (each replica's, with several)."""
        from gymbench.console import warn

        engines = self.plugins.engine_metrics()
        urls = self.base_urls
        if len(urls) < 2:
            return ServerWatch(self.base_url, enabled, engines=engines, warn=warn)
        return ReplicaWatch([ServerWatch(url, enabled, engines=engines, warn=warn) for url in urls])

    def counters(self, enabled: bool) -> ServerCounters:
        """The server's counters for a probe (queue, generated tokens), or why none are read."""
        if not enabled:
            return ServerCounters(None, {"engine": None, "engine_note": "not read (+server_counters=false)"})
        return find_server_counters(self.base_urls, self.plugins.engine_metrics())  # several: their sums


def _setting(settings: object, name: str) -> object:
    """One setting of a backend's settings: a field of its schema, or a key of a schema-less dict."""
    if isinstance(settings, dict):
        return settings.get(name)
    return getattr(settings, name, None)


def _with_values(settings: object, values: dict[str, Any]) -> object:
    """``settings`` with ``values`` in place: a settings object stays one (rebuilt, so checked), a dict a dict."""
    if dataclasses.is_dataclass(settings) and not isinstance(settings, type):
        known = {f.name for f in dataclasses.fields(settings)}
        return dataclasses.replace(settings, **{k: v for k, v in values.items() if k in known})
    assert isinstance(settings, dict), "a backend's settings: its schema's object, or a dict without one"
    return {**settings, **values}
