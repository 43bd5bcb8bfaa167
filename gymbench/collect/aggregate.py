"""Writing NeMo Gym's ``<stem>_aggregate_metrics.json`` after a collection, as ``ng_collect_rollouts`` does.

The rollouts file is read back (earlier runs' rows included, on a resume), its completed rows are
grouped by ``agent_ref``, and each agent this run talked to is asked for its own
``/aggregate_metrics`` (where benchmark metrics such as pass@k are computed); where an agent has
none, or the rows came from no agent server, gymbench computes NeMo Gym's baseline aggregation
itself. Rows without an ``agent_ref`` are left out, as NeMo Gym leaves them out.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gymbench.console import warn
from gymbench.jsonio import AtomicFile, dumps
from gymbench.rollout.agent_metrics import (
    EncodedEntries,
    agent_entries,
    aggregate_metrics_path,
    baseline_metrics,
    read_rows,
)
from gymbench.types import Backend


def write_aggregate_metrics(output: Path, backend: Backend, backend_settings: object) -> Path | None:
    """The file's path, or ``None`` when no completed row names an agent."""
    entries = agent_entries(read_rows(output, warn)) if output.is_file() else {}
    if not entries:
        return None
    from_agents = _ask_agents(backend, backend_settings, entries)
    listing = []
    for name, rows in entries.items():
        metrics = from_agents.get(name)
        if isinstance(metrics, str):
            warn(f"agent {name!r} did not aggregate its rollouts ({metrics}); gymbench computed NeMo Gym's baseline")
        if not isinstance(metrics, dict):
            metrics = baseline_metrics(rows)
        listing.append({"agent_ref": {"name": name}, **metrics})
    with AtomicFile(aggregate_metrics_path(output)) as target:
        # orjson: the standard library's indented writer took 0.33 ms per rollout (1 s for 3,000 rows'
        # 3 MB), half of the collection's own CPU beside NeMo Gym's driver (docs/nemo-gym.md). Every
        # value is finite: agents' answers are read refusing NaN, the baseline is statistics of them.
        target.write(dumps(listing, newline=True, indent=True))
    return target.path


def _ask_agents(backend: Backend, backend_settings: object, entries: Mapping[str, EncodedEntries]) -> dict[str, Any]:
    """Agent backends name the servers they routed rows to in ``agent_routes``; others have none."""
    routes = getattr(backend, "agent_routes", None)
    from gymbench.builtin.backend_settings import HttpSettings

    if not routes or not isinstance(backend_settings, HttpSettings):
        return {}
    from gymbench.builtin.nemo_gym_backend import agents_aggregate_metrics
    from gymbench.collect.driver import run_loop

    return dict(run_loop(agents_aggregate_metrics(backend_settings, routes, entries)))
