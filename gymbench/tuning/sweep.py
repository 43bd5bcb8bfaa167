"""The seeds' doubling sweep, made into one command: probe, stop, find the knee, recommend.

Stopping rules (seed ``000_…``): throughput plateaus (gain below ``plateau_gain``), degrades (below
the best so far by more than ``degrade``), or errors appear (error rate above ``error_rate``).
The knee is refined by probing between the two sweep points that bracket it. The recommendation
is the seeds' 80% (``fraction``) of the knee's parallelism — the smallest parallelism that already
gives the plateau's throughput — with the throughput expected there.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gymbench.curves import Knee, find_knee, throughput_at
from gymbench.tuning.probe import Prober, ProbeResult
from gymbench.types import ConcurrencyStrategy

if TYPE_CHECKING:
    from gymbench.plugins import Plugins


@dataclass(frozen=True)
class SweepSettings:
    start: int = 5
    factor: float = 2.0
    max_parallelism: int = 1024
    plateau_gain: float = 0.10
    degrade: float = 0.05
    error_rate: float = 0.01
    fraction: float = 0.8
    refine: bool = True


@dataclass(frozen=True)
class Strategies:
    """Where probes get their strategies: the plugin registry, so a blocked or third-party
    strategy is honoured (``GYMBENCH_BLOCK_PLUGINS``, ``+strategy=NAME``)."""

    fixed: Callable[[int], ConcurrencyStrategy]
    """A strategy holding exactly this many rollouts in flight."""
    adaptive: Callable[[SweepSettings], Any]
    """The ``adaptive`` strategy for a search (it must expose ``log`` and ``converged``)."""

    @classmethod
    def from_plugins(
        cls, plugins: Plugins, name: str = "semaphore", options: Mapping[str, Any] | None = None
    ) -> Strategies:
        def fixed(parallelism: int) -> ConcurrencyStrategy:
            return plugins.strategy(name, {**(options or {}), "num_samples_in_parallel": parallelism})

        def adaptive(settings: SweepSettings) -> Any:
            return plugins.strategy(
                "adaptive",
                {
                    "start": settings.start,
                    "max_limit": settings.max_parallelism,
                    "plateau_gain": settings.plateau_gain,
                    "error_rate": settings.error_rate,
                    "stop_when_converged": True,
                },
            )

        return cls(fixed, adaptive)


def builtin_strategies() -> Strategies:
    from gymbench.plugins import Plugins, get_plugin_manager

    return Strategies.from_plugins(Plugins(get_plugin_manager(load_entry_points=False)))


@dataclass
class StabilityResult:
    parallelism: int
    rollouts: int
    rollouts_per_s: float
    expected_rollouts_per_s: float
    error_rate: float
    first_third: float
    last_third: float
    passed: bool
    reasons: list[str] = field(default_factory=list)


@dataclass
class TuneResult:
    method: str
    probes: list[ProbeResult]
    stop_reason: str
    knee: Knee
    recommended: int
    expected_rollouts_per_s: float
    wall_s: float
    measured: dict[int, list[float]]
    stability: StabilityResult | None = None


def next_parallelism(current: int, factor: float) -> int:
    return max(current + 1, math.ceil(current * factor))


async def doubling_sweep(prober: Prober, settings: SweepSettings, strategies: Strategies | None = None) -> TuneResult:
    strategies = strategies or builtin_strategies()
    started = time.perf_counter()
    probes: list[ProbeResult] = []
    parallelism = settings.start
    while True:
        result = await prober.probe(parallelism, strategies.fixed(parallelism))
        probes.append(result)
        reason = stop_reason(probes, settings)
        if reason is not None:
            break
        if next_parallelism(parallelism, settings.factor) > settings.max_parallelism:
            reason = f"reached max_parallelism {settings.max_parallelism}"
            break
        parallelism = next_parallelism(parallelism, settings.factor)
    usable = [p for p in probes if p.error_rate <= settings.error_rate] or probes[:1]
    measured = {p.parallelism: list(p.batch_rates) for p in usable}
    knee = find_knee(measured)
    if settings.refine:
        for midpoint in refinement_points(sorted(measured), knee.parallelism):
            result = await prober.probe(midpoint, strategies.fixed(midpoint))
            probes.append(result)
            if result.error_rate <= settings.error_rate:
                measured[midpoint] = list(result.batch_rates)
        knee = find_knee(measured)
    recommended, expected = recommend(measured, knee, settings.fraction)
    return TuneResult("sweep", probes, reason, knee, recommended, expected, time.perf_counter() - started, measured)


def stop_reason(probes: list[ProbeResult], settings: SweepSettings) -> str | None:
    last = probes[-1]
    if last.error_rate > settings.error_rate:
        kinds = ", ".join(f"{k}: {v}" for k, v in last.failure_kinds.items())
        return f"errors appeared at {last.parallelism} ({last.error_rate:.1%}: {kinds})"
    if len(probes) < 2:
        return None
    best = max(p.rollouts_per_s for p in probes[:-1])
    previous = probes[-2].rollouts_per_s
    if last.rollouts_per_s < (1 - settings.degrade) * best:
        return f"throughput degraded at {last.parallelism} ({last.rollouts_per_s:.2f} < best {best:.2f})"
    if last.rollouts_per_s < previous * (1 + settings.plateau_gain):
        gain = last.rollouts_per_s / previous - 1
        return f"throughput plateaued at {last.parallelism} (gain {gain:+.1%} < {settings.plateau_gain:.0%})"
    return None


def refinement_points(points: list[int], knee: float) -> list[int]:
    """The geometric midpoint of the two sweep points around the knee, when they are far apart."""
    below = [p for p in points if p <= knee]
    above = [p for p in points if p > knee]
    if not below or not above:
        return []
    low, high = max(below), min(above)
    if high / low < 1.3 or high - low < 2:
        return []
    return [round(math.sqrt(low * high))]


def recommend(measured: dict[int, list[float]], knee: Knee, fraction: float) -> tuple[int, float]:
    means = {p: float(np.mean(v)) for p, v in measured.items()}
    recommended = max(1, math.floor(fraction * knee.parallelism))
    smallest = min(means)
    if recommended < smallest:
        return recommended, means[smallest] * recommended / smallest
    return recommended, throughput_at(means, recommended)


async def adaptive_search(
    prober: Prober, settings: SweepSettings, budget: int = 200_000, strategies: Strategies | None = None
) -> TuneResult:
    """One run with the ``adaptive`` strategy; it stops dispatching once the knee is bracketed."""
    started = time.perf_counter()
    strategy = (strategies or builtin_strategies()).adaptive(settings)
    result = await prober.probe(settings.start, strategy, rollouts=budget)
    log = strategy.log
    knee = log.knee if log.knee is not None else find_knee(log.samples)
    reason = "knee bracketed" if strategy.converged else "task budget ran out before the knee was bracketed"
    recommended, expected = recommend(log.samples, knee, settings.fraction)
    probes = [
        _level(result, p, rates, log.errors.get(p, 0.0), log.latency.get(p)) for p, rates in sorted(log.samples.items())
    ]
    return TuneResult(
        "adaptive", probes, reason, knee, recommended, expected, time.perf_counter() - started, log.samples
    )


def _level(run: ProbeResult, parallelism: int, rates: list[float], errors: float, latency: float | None) -> ProbeResult:
    return ProbeResult(
        parallelism=parallelism,
        rollouts=0,
        rollouts_per_s=float(np.mean(rates)),
        batch_rates=rates,
        output_tokens_per_s=run.output_tokens_per_s,
        latency_p50_s=latency,
        latency_p99_s=None,
        error_rate=errors,
        failure_kinds={},
        stage_mean_s={},
        client_cpu_cores=run.client_cpu_cores,
        loop_lag_p99_s=run.loop_lag_p99_s,
        elapsed_s=0.0,
    )


async def validate_stability(
    prober: Prober,
    parallelism: int,
    rollouts: int,
    expected: float,
    error_bound: float = 0.01,
    strategies: Strategies | None = None,
) -> StabilityResult:
    """A longer run at the recommendation: does throughput hold, and do errors stay rare?"""
    strategy = (strategies or builtin_strategies()).fixed(parallelism)
    result = await prober.probe(parallelism, strategy, rollouts=rollouts)
    rates = result.batch_rates
    third = max(1, len(rates) // 3)
    first, last = float(np.mean(rates[:third])), float(np.mean(rates[-third:]))
    reasons = []
    if result.rollouts_per_s < 0.9 * expected:
        reasons.append(f"throughput {result.rollouts_per_s:.2f}/s is below 90% of the expected {expected:.2f}/s")
    if last < 0.9 * first:
        reasons.append(f"throughput fell during the run ({first:.2f}/s → {last:.2f}/s)")
    if result.error_rate > error_bound:
        reasons.append(f"error rate {result.error_rate:.1%} is above {error_bound:.1%}")
    return StabilityResult(
        parallelism,
        result.rollouts,
        result.rollouts_per_s,
        expected,
        result.error_rate,
        first,
        last,
        not reasons,
        reasons,
    )
