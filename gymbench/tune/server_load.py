"""Each NeMo Gym server's CPU while diagnose measures: which of them is full.

Behind a NeMo Gym agent's ``/run`` stand the agent server, its resources server and the model
adapter, each one Python process (one core at most for its event loop). The head server lists
them with their PIDs (:mod:`gymbench.server_instances`); those on this host have their CPU time
read before and after the high-parallelism probe, which gives per server the CPU seconds per
rollout and the share of one core it used. A server near a full core while the model server's
queue is empty is the one that is full: NeMo Gym's maintainers ask for exactly this split
("whether the driver, agent, HTTP stack, model adapter, or resources server becomes the
bottleneck before the inference endpoint does").
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gymbench.server_instances import ServerInstance, cpu_readable, cpu_seconds, host_busy_seconds

FULL_CORE_SHARE = 0.85
"""A server whose event loop used this share of one core (or more) is taken for full."""
HOST_FULL_SHARE = 0.8
"""A host whose CPUs were this busy (all processes) left no server room to reach a full core: past
it, processes queue for a CPU (on the 2-core development machine the real stack at 32 in parallel
kept the host 86% busy while its throughput grew 1.35× for 8× the parallelism, no server above
71% of a core)."""
STACK_SHARE_OF_HOST = 0.25
"""On a full host, the stack is what fills it when its servers used at least this share of its
cores (and half a core): then the server with the most CPU per rollout is the first to fill a core."""


@dataclass(frozen=True)
class ServerLoad:
    """One server's CPU over a probe, or why it could not be seen."""

    server: ServerInstance
    cpu_s: float | None
    elapsed_s: float
    rollouts: int
    unseen: str | None = None

    @property
    def core_share(self) -> float | None:
        return None if self.cpu_s is None or self.elapsed_s <= 0 else self.cpu_s / self.elapsed_s

    @property
    def cpu_ms_per_rollout(self) -> float | None:
        return None if self.cpu_s is None or self.rollouts <= 0 else 1e3 * self.cpu_s / self.rollouts

    def line(self) -> str:
        where = f"{self.server.role} {self.server.name} (pid {self.server.pid}, port {self.server.port})"
        if self.cpu_s is None:
            return f"{where}: CPU not seen ({self.unseen})"
        per_rollout = self.cpu_ms_per_rollout or 0.0
        ceiling = f", {1e3 / per_rollout:.0f} rollouts/s at one full core" if per_rollout > 0 else ""
        return f"{where}: {per_rollout:.2f} ms CPU per rollout, {self.core_share:.0%} of a core{ceiling}"


@dataclass(frozen=True)
class HostLoad:
    """How busy the whole host's CPUs were over the probe (every process, others' included)."""

    busy_share: float
    cores: int

    def line(self) -> str:
        return f"host: {self.cores} cores, {self.busy_share:.0%} busy over the probe (every process on it)"


class ServerMeter:
    """CPU of the listed servers around one probe: ``start()``, the probe, ``finish(rollouts)``."""

    def __init__(self, servers: Sequence[ServerInstance]) -> None:
        self.servers = tuple(servers)
        self._before: dict[int, float | None] = {}
        self._host_before: tuple[float, float] | None = None
        self._started = 0.0
        self.host: HostLoad | None = None

    def start(self) -> None:
        self._before = cpu_seconds(self._readable_pids()) if cpu_readable() else {}
        self._host_before = host_busy_seconds()
        self._started = time.monotonic()

    def finish(self, rollouts: int) -> list[ServerLoad]:
        elapsed = time.monotonic() - self._started
        after = cpu_seconds(self._readable_pids()) if cpu_readable() else {}
        host_after = host_busy_seconds()
        if self.servers and self._host_before is not None and host_after is not None:
            busy, total = (b - a for a, b in zip(self._host_before, host_after, strict=True))
            self.host = HostLoad(busy / total if total > 0 else 0.0, os.cpu_count() or 1)
        return [self._load(server, after, elapsed, rollouts) for server in self.servers]

    def _readable_pids(self) -> list[int]:
        return [s.pid for s in self.servers if s.pid is not None and s.local]

    def _load(
        self, server: ServerInstance, after: dict[int, float | None], elapsed: float, rollouts: int
    ) -> ServerLoad:
        unseen = _why_unseen(server)
        if unseen is None and server.pid is not None:
            start, end = self._before.get(server.pid), after.get(server.pid)
            if start is not None and end is not None:
                return ServerLoad(server, end - start, elapsed, rollouts)
            unseen = "its process ended during the probe"
        return ServerLoad(server, None, elapsed, rollouts, unseen)


def _why_unseen(server: ServerInstance) -> str | None:
    if not server.local:
        return f"it runs on {server.host}, not on this host"
    if server.pid is None:
        return "the head server lists no pid for it (NeMo Gym before 0.7.0?)"
    if not cpu_readable():
        return "per-process CPU is read from /proc, which this system lacks"
    return None


def full_server(loads: Sequence[ServerLoad], model_queue: float | None, host: HostLoad | None) -> ServerLoad | None:
    """The busiest server at a full core, unless the model server's queue shows it is the limit.

    On a host whose CPUs were all busy no server can reach a full core; if the stack's servers took
    a good share of it, the server with the most CPU per rollout is the one that fills its core
    first (at one core each, its ceiling is the lowest)."""
    if model_queue:
        return None
    seen = [load for load in loads if load.core_share is not None]
    busiest = max(seen, key=lambda load: load.core_share or 0.0, default=None)
    if busiest is None:
        return None
    if (busiest.core_share or 0.0) >= FULL_CORE_SHARE:
        return busiest
    stack_cores = sum(load.core_share or 0.0 for load in seen)
    if host is not None and host.busy_share >= HOST_FULL_SHARE:
        if stack_cores >= max(0.5, STACK_SHARE_OF_HOST * host.cores):
            return max(seen, key=lambda load: load.cpu_ms_per_rollout or 0.0)
    return None


def unseen_note(loads: Sequence[ServerLoad]) -> str | None:
    """One line naming what could not be seen, so a verdict without it is read as such."""
    unseen = [f"{load.server.name} ({load.unseen})" for load in loads if load.cpu_s is None]
    return f"CPU not seen for: {', '.join(unseen)}" if unseen else None


def listed_servers(backend: object) -> tuple[ServerInstance, ...]:
    """The servers the backend's head server listed (a NeMo Gym backend that found its agents there)."""
    directory = getattr(backend, "directory", None)
    return tuple(getattr(directory, "servers", ()))
