"""What a worker does with one shard, under any launcher: the same collection ``gymbench collect``
runs, on this process's main thread, into the shard's file, resuming what is already there.

Runs on the main thread on purpose: the ``math`` verifier's timeout is ``signal.alarm``, which
only the main thread may set, and ``asyncio.run`` refuses a thread that already runs a loop (an
async Ray actor's). Both launchers call :func:`collect_shard` from a plain process or task.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gymbench.errors import GymbenchError, ServerUnreachable
from gymbench.replica_figures import ReplicaCounts, RoutesReplicas, RoutingCounts
from gymbench.rollout.guard import OUTAGE_KINDS
from gymbench.rollout.stats import CollectStats

if TYPE_CHECKING:
    from gymbench.collect.config import CollectConfig
    from gymbench.plugins import Plugins

REPORT_EVERY_S = 0.25
_OWN_SIMULATOR: list[Any] = []
"""This worker's own simulated server (``+sim_per_worker=true``), started once and kept for its shards."""
_PLUGINS: list[Plugins] = []
"""This worker's plugin manager: a worker is a process of its own, whose entry point this module is;
built on its first shard and handed to every collection it runs."""


@dataclass
class ShardJob:
    index: int
    attempt: int
    settings: dict[str, Any]
    own_simulator: bool = False


@dataclass
class ShardOutcome:
    index: int
    attempt: int
    worker: dict[str, Any]
    stats: CollectStats | None = None
    client_cpu_s: float = 0.0
    busy_s: float = 0.0
    backend: str = ""
    error: str | None = None
    retryable: bool = True
    """False for a bad setting or input: the same error again on every attempt."""
    outage: bool = False
    """The model server was down (unreachable at the start, or ``stop_after_failures`` rollouts in a
    row failed): the driver waits for it and runs the shard again without spending an attempt."""
    replicas: RoutingCounts | None = None
    """What this worker sent to each model replica (several ``base_url``), for the merged record."""


def worker_environment() -> dict[str, Any]:
    """What decides this worker's speed, stated in the record: where it runs, its priority
    (Ray starts workers at nice 15), its thread settings and the CPUs it may use."""
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "nice": os.getpriority(os.PRIO_PROCESS, 0) if hasattr(os, "getpriority") else None,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpus_allowed": len(affinity) if affinity is not None else os.cpu_count(),
    }


def collect_shard(job: ShardJob, report: Callable[[int], None]) -> ShardOutcome:
    """Collect one shard; every failure comes back as an outcome (the driver decides on a retry)."""
    outcome = ShardOutcome(job.index, job.attempt, worker_environment())
    started = time.perf_counter()
    try:
        _collect(job, report, outcome)
    except ServerUnreachable as exc:
        outcome.error, outcome.outage = str(exc), True
    except GymbenchError as exc:
        outcome.error, outcome.retryable = str(exc), False
    except Exception as exc:  # noqa: BLE001 - reported to the driver, which retries the shard
        outcome.error = f"{type(exc).__name__}: {exc} ({_where(exc)})"
    outcome.busy_s = time.perf_counter() - started
    return outcome


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "unknown place"


class _ShardProgress:
    """The shard's rollouts done so far, reported to the driver at most every ``REPORT_EVERY_S``,
    and once more at the end."""

    def __init__(self, report: Callable[[int], None]) -> None:
        self.report = report
        self.last = 0.0

    def start(self, collector: object) -> None:
        pass

    def update(self, done: int, stats: CollectStats) -> None:
        now = time.monotonic()
        if now - self.last >= REPORT_EVERY_S:
            self.last = now
            self.report(stats.skipped + stats.completed + stats.failed)

    def close(self, stats: CollectStats) -> None:
        self.report(stats.skipped + stats.completed + stats.failed)


def _collect(job: ShardJob, report: Callable[[int], None], outcome: ShardOutcome) -> None:
    from gymbench.collect.config import CollectConfig
    from gymbench.collect.driver import Collection, run_loop
    from gymbench.settings import build_settings

    settings = {**job.settings, **(_own_simulator(job) if job.own_simulator else {})}
    config = build_settings(CollectConfig, [], settings, where=f"shard {job.index}")
    collection = Collection.prepare(config, _worker_plugins(), progress=_ShardProgress(report))

    async def collect() -> CollectStats:
        async with collection:
            return await collection.run()

    with contextlib.closing(collection):
        stats = run_loop(collect())
    outcome.stats, outcome.client_cpu_s, outcome.backend = stats, collection.client_cpu_s, collection.backend_name
    outcome.replicas = _replica_counts(collection.backend, config, stats)
    assert collection.collector is not None
    problems = collection.collector.problems
    if problems.errors:
        outcome.error = f"internal error: {problems.errors[0]}"
    elif problems.stop_reason is not None:
        outcome.error, outcome.outage = f"stopped early: {problems.stop_reason}", problems.outage
    elif stats.failed and set(stats.failure_kinds) <= OUTAGE_KINDS:
        # Rollouts that failed while the server was down, before the breaker tripped: running the shard
        # again resumes and retries them (up to +max_attempts each), as a resume of one process does.
        kinds = ", ".join(f"{kind}: {count}" for kind, count in stats.failure_kinds.most_common())
        outcome.error, outcome.outage = f"{stats.failed} rollouts failed ({kinds})", True


def _own_simulator(job: ShardJob) -> dict[str, Any]:
    """Start this worker's simulator on its first shard; later shards reuse it."""
    if not _OWN_SIMULATOR:
        from gymbench.collect.config import CollectConfig
        from gymbench.settings import build_settings
        from gymbench.sim import start_sim_server

        _OWN_SIMULATOR.append(start_sim_server(build_settings(CollectConfig, [], job.settings).simulator_config()))
    server = _OWN_SIMULATOR[0]
    return {"base_url": server.base_url, "model": job.settings.get("model") or server.config.model}


def _worker_plugins() -> Plugins:
    """The plugin manager of this worker process, built once (see :data:`_PLUGINS`)."""
    if not _PLUGINS:
        from gymbench.plugins import Plugins

        _PLUGINS.append(Plugins())
    return _PLUGINS[0]


def _replica_counts(backend: object, config: CollectConfig, stats: CollectStats) -> RoutingCounts | None:
    """The backend's per-replica counts; for a shard handed one replica of a ``by_shard`` subset (a
    list of one, which the backend serves as one server and does not count), that replica's figures
    from the shard's rollouts: every rollout and retry a request, its failed tries errors, the
    backend call's time as the latency, the shard's parallelism as its peak."""
    if isinstance(backend, RoutesReplicas) and (counts := backend.replica_counts()) is not None:
        return counts
    base_url = config.base_url
    if config.replica_subset != "by_shard" or not isinstance(base_url, list) or len(base_url) != 1:
        return None
    from gymbench.builtin.routing import replica_name

    tries = stats.completed + stats.failed + stats.retries
    attempted = stats.completed + stats.failed
    replica = ReplicaCounts(replica_name(base_url[0]), tries, stats.completed, tries - stats.completed,
                            min(config.num_samples_in_parallel or attempted, attempted), False,
                            tuple(stats.request_latency.values))  # fmt: skip
    return RoutingCounts(config.routing, (replica,))
