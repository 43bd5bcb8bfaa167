"""The servers a NeMo Gym head server lists, and the CPU time of those that run on this host.

``ng_run``'s head server answers ``GET /server_instances`` with one entry per server it started:
``process_name`` (the config's top-level key), ``server_type`` (``responses_api_agents``,
``resources_servers``, ``responses_api_models``, ``environment_servers``), ``host``, ``port`` and,
since NeMo Gym 0.7.0, ``pid``. The agents' lookup (:mod:`gymbench.builtin.nemo_gym_head`), the real
stack's fixture and diagnose's per-server figures all read it through :func:`parse_server_instances`.

CPU time comes from ``/proc/<pid>/stat`` (Linux), summed over the server's process and its
descendants (``ng_run`` may start a server through a shell). Elsewhere, or for a server on another
host, it cannot be read, and :func:`cpu_seconds` says so with ``None``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROLES = {
    "responses_api_agents": "agent server",
    "resources_servers": "resources server",
    "responses_api_models": "model adapter",
    "environment_servers": "environment server",
}
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::", "")
PROC = Path("/proc")


@dataclass(frozen=True)
class ServerInstance:
    """One server a head server lists."""

    name: str
    server_type: str
    host: str
    port: int | None
    pid: int | None

    @property
    def url(self) -> str:
        return f"http://[{self.host}]:{self.port}" if ":" in self.host else f"http://{self.host}:{self.port}"

    @property
    def role(self) -> str:
        """``agent server``, ``resources server``, ``model adapter`` (in front of the model server), ..."""
        return ROLES.get(self.server_type, self.server_type or "server")

    @property
    def local(self) -> bool:
        return self.host in LOCAL_HOSTS or self.host in _this_hosts_names()


def parse_server_instances(listing: Any) -> tuple[ServerInstance, ...]:
    """The entries of a ``/server_instances`` answer (entries that are not objects are passed over)."""
    entries = listing if isinstance(listing, list) else []
    return tuple(_instance(entry) for entry in entries if isinstance(entry, Mapping))


def _instance(entry: Mapping[str, Any]) -> ServerInstance:
    name = entry.get("process_name") or entry.get("config_path") or ""
    port, pid = entry.get("port"), entry.get("pid")
    return ServerInstance(
        name=str(name), server_type=str(entry.get("server_type") or ""), host=str(entry.get("host") or ""),
        port=port if _is_int(port) else None, pid=pid if _is_int(pid) else None,
    )  # fmt: skip


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _this_hosts_names() -> set[str]:
    names = {socket.gethostname()}
    try:
        names.add(socket.gethostbyname(socket.gethostname()))
    except OSError:
        pass
    return names


def cpu_readable() -> bool:
    """Per-process CPU time is read from ``/proc`` (Linux only)."""
    return (PROC / "self" / "stat").is_file()


def cpu_seconds(pids: Iterable[int]) -> dict[int, float | None]:
    """CPU seconds (user + system) of each process and its live descendants; ``None`` for one gone."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    return {pid: _tree_cpu(pid, table, children) if pid in table else None for pid in pids}


def _tree_cpu(pid: int, table: dict[int, tuple[int, float]], children: dict[int, list[int]]) -> float:
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        total += table[current][1]
        stack.extend(children.get(current, ()))
    return total


def _process_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds) for every process ``/proc`` shows."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    table = {}
    for entry in PROC.glob("[0-9]*"):
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()  # state, ppid, ..., utime (11), stime (12)
        table[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
    return table


def host_busy_seconds() -> tuple[float, float] | None:
    """(busy, all) CPU seconds of the whole host since boot, from ``/proc/stat``; None elsewhere."""
    try:
        first = (PROC / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    values = [int(v) for v in first[1:9]]  # user nice system idle iowait irq softirq steal
    idle = values[3] + values[4]
    return (sum(values) - idle) / ticks, sum(values) / ticks
