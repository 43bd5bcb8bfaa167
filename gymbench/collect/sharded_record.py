"""The one results record of a sharded collection: the usual collection metrics over the whole run
(the driver's wall clock), and per-worker and per-shard figures beside them.

A shard that ran more than once contributes every attempt's new rollouts, and the rows its first
attempt found already written (an earlier run's) as ``skipped_from_resume``; rows a later attempt
found again were produced in this run and are not counted twice.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from gymbench.collect.collection import collect_result
from gymbench.collect.config import CollectConfig
from gymbench.collect.shard_worker import ShardOutcome
from gymbench.collect.shards import Shard
from gymbench.record import BenchmarkResult, Metric
from gymbench.replica_figures import merged_counts, replica_summary
from gymbench.rollout.latency import Slo
from gymbench.rollout.stats import CollectStats


def combined_stats(outcomes: dict[int, list[ShardOutcome]], wall_s: float, slo: Slo) -> tuple[CollectStats, float]:
    """Every attempt's statistics in one, spanning the driver's wall clock; and the client CPU.

    The per-rollout timeline is left empty: each shard's starts at its own clock."""
    combined = CollectStats(slo=slo)
    combined.started, combined.finished = 0.0, wall_s
    cpu = 0.0
    for attempts in outcomes.values():
        for number, outcome in enumerate(attempts):
            if outcome.stats is None:
                continue
            if number > 0:
                outcome.stats.skipped = 0
            combined.absorb(outcome.stats)
            cpu += outcome.client_cpu_s
    combined.clock = time.perf_counter
    return combined, cpu


def worker_figures(outcomes: dict[int, list[ShardOutcome]]) -> list[dict[str, Any]]:
    """Per worker process: its environment, shards, rollouts and its own rate while busy."""
    workers: dict[tuple[str, int], dict[str, Any]] = {}
    totals: dict[tuple[str, int], defaultdict[str, float]] = {}
    for attempts in outcomes.values():
        for outcome in attempts:
            key = (outcome.worker["host"], outcome.worker["pid"])
            workers.setdefault(key, dict(outcome.worker))
            total = totals.setdefault(key, defaultdict(float))
            total["shards"] += 1
            total["busy_s"] += outcome.busy_s
            total["client_cpu_s"] += outcome.client_cpu_s
            if outcome.stats is not None:
                total["rollouts"] += outcome.stats.completed + outcome.stats.failed
    figures = []
    for key, environment in workers.items():
        total = totals[key]
        rate = total["rollouts"] / total["busy_s"] if total["busy_s"] > 0 else 0.0
        counts = {name: int(total[name]) for name in ("shards", "rollouts")}
        figures.append({**environment, **total, **counts, "rollouts_per_s_busy": rate})
    return sorted(figures, key=lambda figure: (figure["host"], figure["pid"]))


def shard_figures(
    shards: list[Shard], outcomes: dict[int, list[ShardOutcome]], tries: Mapping[int, int]
) -> list[dict[str, Any]]:
    """Attempts include those whose worker died (they left no outcome)."""
    return [
        {
            "shard": shard.index,
            "start_idx": shard.start_idx,
            "end_idx": shard.end_idx,
            "attempts": tries.get(shard.index, 0),
            "errors": [o.error for o in outcomes[shard.index] if o.error],
        }
        for shard in shards
    ]


def sharded_result(
    config: CollectConfig,
    shards: list[Shard],
    outcomes: dict[int, list[ShardOutcome]],
    tries: Mapping[int, int],
    wall_s: float,
    simulator: str,
) -> BenchmarkResult:
    stats, cpu = combined_stats(outcomes, wall_s, config.slo())
    stats.processes = config.num_workers
    backend = next((o.backend for attempts in outcomes.values() for o in attempts if o.backend), "")
    summary = stats.summary()
    routed = merged_counts(
        [o.replicas for attempts in outcomes.values() for o in attempts if o.replicas], _replica_order(config)
    )
    if routed is not None:  # each worker routed over the list (or its part): its counts, added up
        summary["replicas"] = replica_summary(routed, wall_s)
    result = collect_result(config, backend, stats, cpu, summary)
    workers = worker_figures(outcomes)
    retries = sum(max(tries.get(shard.index, 0) - 1, 0) for shard in shards)
    result.metrics["shard_retries"] = Metric(float(retries), "shards", "lower")  # type: ignore[index]
    if workers:
        rates = [worker["rollouts_per_s_busy"] for worker in workers]
        result.metrics["worker_rollouts_per_s_min"] = Metric(min(rates), "rollouts/s", "higher")  # type: ignore[index]
    result.params.update(num_workers=config.num_workers, launcher=config.launcher, num_shards=len(shards))  # type: ignore[attr-defined]
    distribution = {"launcher": config.launcher, "num_workers": config.num_workers, "simulator": simulator,
                    "shard_attempts": config.shard_attempts}  # fmt: skip
    result.extra.update(  # type: ignore[attr-defined]
        summary=summary,
        workers=workers,
        shards=shard_figures(shards, outcomes, tries),
        distribution=distribution,
    )
    return result


def _replica_order(config: CollectConfig) -> list[str]:
    """The configured replicas as the record names them, in the order given."""
    from gymbench.builtin.routing import replica_name

    urls = config.base_url
    return [replica_name(str(url)) for url in urls] if isinstance(urls, list) else []
