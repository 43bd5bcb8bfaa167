"""Running statistics of a collection: counts, rewards, tokens, latency quantiles, stage times.

Latencies go into fixed-size reservoir samples (:mod:`gymbench.rollout.reservoir`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from gymbench.replica_figures import ReplicaSummary
from gymbench.rollout.client_delay import ClientDelayStats, ClientDelaySummary
from gymbench.rollout.latency import LATENCY_METRICS, Slo, percentile_table, rollout_latencies
from gymbench.rollout.reservoir import Reservoir
from gymbench.rollout.server_timings import ServerComparison, ServerTimingsStats
from gymbench.rollout.timeline import Timeline
from gymbench.types import JSONObject

STAGES = ("slot_wait", "connection_wait", "ttft", "generation", "backend_other", "verification", "total")
COUNTS = (
    "completed", "failed", "skipped", "retries", "reward_sum", "rewarded", "verify_failures", "verify_skipped",
    "cache_hits", "cache_misses", "prompt_tokens", "completion_tokens",
)  # fmt: skip

SETTLE_EVERY = 1024
"""Rollouts kept as they landed before :meth:`CollectStats.settle` folds them in: memory stays bounded."""


class Goodput(TypedDict):
    """The share of attempted rollouts within the SLO (``None`` before any was attempted), and their rate."""

    slo: dict[str, float | None]
    within_slo: int
    attempted: int
    share: float | None
    rollouts_per_s: float


class _SummaryFields(TypedDict):
    completed: int
    failed: int
    skipped_from_resume: int
    failure_kinds: dict[str, int]
    retries: int
    elapsed_s: float
    rollouts_per_s: float
    output_tokens_per_s: float
    prompt_tokens: int
    completion_tokens: int
    mean_reward: float | None
    verification_failures: int
    verification_skipped: int
    verification_cache: dict[str, int]
    latency_s: dict[str, float | None]
    """p50, p90 and p99 (``None`` before any rollout landed)."""
    request_latency_s: dict[str, float | None]
    latency_percentiles_s: dict[str, dict[str, object]]
    goodput: Goodput | None
    timeline: JSONObject
    stage_mean_s: dict[str, float | None]


class CollectSummary(_SummaryFields, total=False):
    """A collection's statistics as the summary file, the results record and the terminal show them."""

    server_metrics: dict[str, object]
    """The server's /metrics before, after and over the run, when they were scraped."""
    server_timings: ServerComparison
    """The server's per-request timings against the client's TTFT, ITL and e2e, when it reported them."""
    client_delay: ClientDelaySummary
    """The client's own delay in the latencies and its CPU, when the backend measured the delay."""
    stopped: str
    """Why a stop condition ended the run cleanly (errors, error rate, over-saturation, a trace's end)."""
    excluded: dict[str, int]
    """Rollouts written but left out of the latencies, stages and goodput: warm-up and cool-down."""
    arrivals: dict[str, object]
    """An open-loop strategy's target and achieved arrival rate."""
    replicas: ReplicaSummary
    """Each replica's requests, errors, latency and throughput, the imbalance and the straggler, when
    the backend spread its requests over several (``gymbench.replica_figures``)."""


@dataclass
class CollectStats:
    clock: Callable[[], float] = time.perf_counter
    started: float = -1.0
    finished: float | None = None
    completed: int = 0
    failed: int = 0
    skipped: int = 0
    retries: int = 0
    reward_sum: float = 0.0
    rewarded: int = 0
    verify_failures: int = 0
    verify_skipped: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failure_kinds: Counter[str] = field(default_factory=Counter)
    stage_sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    stage_counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAGES, 0))
    latency: Reservoir = field(default_factory=Reservoir)
    latencies: dict[str, Reservoir] = field(default_factory=lambda: {name: Reservoir() for name in LATENCY_METRICS})
    """TTFT, ITL, TPOT and e2e (the backend call alone, without slot waits): see ``latency.py``."""
    slo: Slo = field(default_factory=Slo)
    slo_met: int = 0
    timeline: Timeline = field(default_factory=Timeline)
    server: ServerTimingsStats = field(default_factory=ServerTimingsStats)
    """The server's own timings beside the client's (rows whose server reported them)."""
    client: ClientDelayStats = field(default_factory=ClientDelayStats)
    stopped: str | None = None
    """Why a stop condition ended the run cleanly, if one did."""
    excluded: dict[str, int] = field(default_factory=dict)
    """Warm-up and cool-down rollouts, counted but not in the latencies (``gymbench.rollout.phases``)."""
    arrivals: dict[str, object] | None = None
    """An open-loop strategy's arrivals, target against achieved (its ``arrival_summary()``)."""
    processes: int = 1
    """Collecting processes whose statistics these are (a sharded run's workers)."""
    _completed: list[tuple[float, Mapping[str, float], int, Mapping[str, float]]] = field(
        default_factory=list, repr=False, compare=False
    )
    """Measured completed rollouts not yet folded in: (seconds into the run, stages, output tokens,
    client delay); :meth:`settle`."""
    _timings: list[Mapping[str, float]] = field(default_factory=list, repr=False, compare=False)
    """Measured rollouts' stages not yet summed; :meth:`settle`."""

    @property
    def request_latency(self) -> Reservoir:
        return self.latencies["e2e"]

    def add_completed(
        self, timings: Mapping[str, float], output_tokens: int, client_delay: Mapping[str, float]
    ) -> None:
        """A measured rollout that completed: kept as it is and folded into the latency samples, the
        timeline and the SLO count by :meth:`settle`, a batch at a time (per rollout, that fold is a
        list append where one sample at a time was a method call per figure)."""
        self._completed.append((self.clock() - self.started, timings, output_tokens, client_delay))
        if len(self._completed) >= SETTLE_EVERY:
            self.settle()

    def add_timings(self, timings: Mapping[str, float]) -> None:
        """A measured rollout's stages, summed by :meth:`settle` (a batch at a time, in landing order)."""
        self._timings.append(timings)
        if len(self._timings) >= SETTLE_EVERY:
            self.settle()

    def settle(self) -> None:
        """Fold the rollouts added since the last call into the samples, sums and timeline, in the
        order they landed, so every figure is what adding them one at a time gave. Whatever reads
        the figures calls it first (the summary, :meth:`absorb`; the engine when a run ends)."""
        timings, self._timings = self._timings, []
        sums, counts = self.stage_sums, self.stage_counts
        for stage in STAGES:
            found = [stages[stage] for stages in timings if stage in stages]
            if found:
                total = sums[stage]
                for value in found:
                    total += value
                sums[stage] = total
                counts[stage] += len(found)
        completed, self._completed = self._completed, []
        if not completed:
            return
        self.latency.add_many([stages["total"] for _, stages, _, _ in completed])
        samples: dict[str, list[float]] = {name: [] for name in LATENCY_METRICS}
        timeline, slo = self.timeline, self.slo
        judged = slo.active
        for at_s, stages, tokens, _ in completed:
            latencies = rollout_latencies(stages, tokens)
            for name, value in latencies.items():
                samples[name].append(value)
            timeline.add(at_s, tokens, latencies["e2e"])
            if judged and slo.met(latencies):
                self.slo_met += 1
        for name, values in samples.items():
            if values:
                self.latencies[name].add_many(values)
        self.client.add_many([delay for _, _, _, delay in completed])

    def __post_init__(self) -> None:
        if self.started < 0:
            self.started = self.clock()

    def absorb(self, other: CollectStats) -> None:
        """Add another collection's counts and samples (a shard's); the time span stays this one's."""
        self.settle()
        other.settle()
        for name in COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failure_kinds.update(other.failure_kinds)
        for stage in STAGES:
            self.stage_sums[stage] += other.stage_sums[stage]
            self.stage_counts[stage] += other.stage_counts[stage]
        self.latency.absorb(other.latency)
        for name, reservoir in other.latencies.items():
            self.latencies[name].absorb(reservoir)
        self.slo_met += other.slo_met
        self.server.absorb(other.server)
        self.client.absorb(other.client)
        for phase, count in other.excluded.items():
            self.excluded[phase] = self.excluded.get(phase, 0) + count
        self.stopped = self.stopped or other.stopped

    @property
    def elapsed_s(self) -> float:
        return (self.finished or self.clock()) - self.started

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.rewarded if self.rewarded else None

    def goodput(self, elapsed: float) -> Goodput | None:
        """The share of attempted rollouts (failures count as missed) within the SLO, and their rate."""
        if not self.slo.active:
            return None
        self.settle()
        attempted = self.completed + self.failed - sum(self.excluded.values())  # warm-up, cool-down: not judged
        return {
            "slo": {f"{name}_s": limit for name, limit in self.slo.limits().items()},
            "within_slo": self.slo_met,
            "attempted": attempted,
            "share": self.slo_met / attempted if attempted else None,
            "rollouts_per_s": self.slo_met / elapsed,
        }

    def percentile_tables(self) -> dict[str, dict[str, object]]:
        self.settle()
        return {name: percentile_table(found.values) for name, found in self.latencies.items() if found.values}

    def summary(self) -> CollectSummary:
        self.settle()
        summary = self._summary()
        server = self.server.summary()
        if server is not None:
            summary["server_timings"] = server
        if self.stopped:
            summary["stopped"] = self.stopped
        if self.excluded:
            summary["excluded"] = dict(self.excluded)
        if self.arrivals is not None:
            summary["arrivals"] = self.arrivals
        if self.client.total.seen:
            median = self.latencies["ttft"] if self.latencies["ttft"].values else self.latencies["e2e"]
            summary["client_delay"] = self.client.summary(self.elapsed_s, median.percentiles((50,))[0], self.processes)
        return summary

    def _summary(self) -> CollectSummary:
        elapsed = max(self.elapsed_s, 1e-9)
        p50, p90, p99 = self.latency.percentiles((50, 90, 99))
        r50, r90, r99 = self.request_latency.percentiles((50, 90, 99))
        return {
            "completed": self.completed,
            "failed": self.failed,
            "skipped_from_resume": self.skipped,
            "failure_kinds": dict(self.failure_kinds),
            "retries": self.retries,
            "elapsed_s": elapsed,
            "rollouts_per_s": self.completed / elapsed,
            "output_tokens_per_s": self.completion_tokens / elapsed,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "mean_reward": self.mean_reward,
            "verification_failures": self.verify_failures,
            "verification_skipped": self.verify_skipped,
            "verification_cache": {"hits": self.cache_hits, "misses": self.cache_misses},
            "latency_s": {"p50": p50, "p90": p90, "p99": p99},
            "request_latency_s": {"p50": r50, "p90": r90, "p99": r99},
            "latency_percentiles_s": self.percentile_tables(),
            "goodput": self.goodput(elapsed),
            "timeline": self.timeline.to_dict(),
            "stage_mean_s": {
                stage: self.stage_sums[stage] / self.stage_counts[stage] if self.stage_counts[stage] else None
                for stage in STAGES
            },
        }
