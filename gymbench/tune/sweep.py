"""NeMo Gym's doubling sweep made into one command, the adaptive search, and the stability check.

Both searches ask :class:`gymbench.tune.knee_search.KneeSearch` what to measure next, so they decide
by the same evidence and define the knee the same way; they differ in how a level is measured.
The sweep runs a separate probe per level (:class:`~gymbench.tune.probe.Prober`): every row of
its table is a steady-state measurement with a stated precision. The adaptive search runs one
collection whose ``adaptive`` strategy changes its own limit, paying no cold start per level.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gymbench.tune.curves import Knee
from gymbench.tune.knee_search import KneeSearch, SearchResult, SearchSettings, Step
from gymbench.tune.probe import Prober, ProbeResult
from gymbench.tune.rates import Precision, Rate
from gymbench.types import ConcurrencyStrategy, JSONObject

if TYPE_CHECKING:
    from gymbench.plugins import Plugins

ADAPTIVE_BUDGET = 1_000_000
"""Rollouts an adaptive search may take at most before it gives up finding the knee."""


@dataclass(frozen=True)
class Strategies:
    """Where probes get their strategies: the plugin registry, so a blocked or third-party
    strategy is honoured (``GYMBENCH_BLOCK_PLUGINS``, ``+strategy=NAME``)."""

    fixed: Callable[[int], ConcurrencyStrategy]
    """A strategy holding exactly this many rollouts in flight."""
    adaptive: Callable[[SearchSettings, Precision], Any]
    """The ``adaptive`` strategy for a search (it must expose ``search``, ``converged``, ``logs``)."""

    @classmethod
    def from_plugins(
        cls, plugins: Plugins, name: str = "semaphore", options: Mapping[str, Any] | None = None
    ) -> Strategies:
        def fixed(parallelism: int) -> ConcurrencyStrategy:
            return plugins.strategy(name, {**(options or {}), "num_samples_in_parallel": parallelism})

        def adaptive(search: SearchSettings, precision: Precision) -> Any:
            return plugins.strategy("adaptive", adaptive_options(search, precision))

        return cls(fixed, adaptive)


def adaptive_options(search: SearchSettings, precision: Precision) -> JSONObject:
    return {
        "start": search.start,
        "max_limit": search.max_parallelism,
        "factor": search.factor,
        "plateau_gain": search.plateau_gain,
        "lookahead": search.lookahead,
        "degrade": search.degrade,
        "max_error_rate": search.max_error_rate,
        "resolution": search.resolution,
        "target_precision": precision.target,
        "max_batches": precision.max_batches,
        "share": search.share,
        "stop_when_converged": True,
    }


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
    """One per probe (the sweep) or per level (the adaptive search), in the order measured."""
    search: SearchResult
    per_rollout: float
    """Work per rollout (output tokens, or 1), pooled over the run: work/s ÷ this = rollouts/s."""
    per_rollout_relative_se: float
    wall_s: float
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stability: StabilityResult | None = None
    server: dict[str, object] | None = None
    """The server's /metrics as the probe read it: ``engine`` (a name or null) and what was read or why not."""
    first_pass: SearchResult | None = None
    """With ``remeasure``: the answer of the first pass alone, before the reverse pass was merged."""

    @property
    def knee(self) -> Knee:
        """The knee, its plateau in rollouts/s."""
        knee = self.search.knee
        scale = 1 / self.per_rollout
        return Knee(knee.parallelism, knee.low, knee.high, knee.plateau * scale, knee.plateau_half_width * scale,
                    knee.peak_parallelism)  # fmt: skip

    @property
    def recommended(self) -> int:
        return self.search.recommendation.parallelism

    @property
    def expected_rollouts_per_s(self) -> float:
        return self.search.recommendation.expected / self.per_rollout

    @property
    def expected_share(self) -> float:
        return self.search.recommendation.share

    @property
    def stop_reason(self) -> str:
        return self.search.stop_reason

    @property
    def curve(self) -> dict[int, Rate]:
        """Rollouts/s per parallelism as the knee was computed from (capped at a rate limit)."""
        return {p: rate.scaled(1 / self.per_rollout) for p, rate in self.search.curve.items()}


async def doubling_sweep(prober: Prober, settings: SearchSettings, strategies: Strategies) -> TuneResult:
    """The seeds' sweep: a probe per level, each until precise, levels chosen by the shared rules."""
    started = prober.clock()
    search = KneeSearch(settings)
    probes: list[ProbeResult] = []
    steps: list[Step] = []
    while (step := search.next_step()) is not None:
        steps.append(step)
        probe = await prober.probe(step.parallelism, strategies.fixed(step.parallelism), step.precision_scale)
        probes.append(probe)
        search.record(probe.level())
    first_pass = None
    if settings.remeasure:
        first_pass = search.result()
        probes += await _second_pass(prober, search, steps, strategies)
    prober.normalise(probes)
    notes = search.notes + [f"{p.parallelism}: {note}" for p in probes for note in p.notes]
    return TuneResult("sweep", probes, search.result(), prober.per_rollout, prober.per_rollout_relative_se,
                      prober.clock() - started, steps, notes, first_pass=first_pass)  # fmt: skip


async def _second_pass(
    prober: Prober, search: KneeSearch, steps: list[Step], strategies: Strategies
) -> list[ProbeResult]:
    """Every level again, last measured first, merged into the search; a note says how far the
    two passes differed (the machine's drift, or a server whose state moved)."""
    order = list(dict.fromkeys(step.parallelism for step in steps))[::-1]
    first = {p: search.levels[p].rate.value for p in order}
    probes = []
    for parallelism in order:
        steps.append(Step(parallelism, why="second pass, in reverse order"))
        probe = await prober.probe(parallelism, strategies.fixed(parallelism))
        probes.append(probe)
        search.record(probe.level(), apart=True)
    moved = [probe.work_rate.value / first[probe.parallelism] - 1 for probe in probes if first[probe.parallelism] > 0]
    if moved:
        search.notes.append(
            f"second pass (reverse order) over {len(order)} levels read {min(moved):+.1%} to {max(moved):+.1%} "
            f"against the first (median {float(np.median(moved)):+.1%}); the curve merges both"
        )
    return probes


async def adaptive_search(
    prober: Prober, settings: SearchSettings, strategies: Strategies, budget: int = ADAPTIVE_BUDGET
) -> TuneResult:
    """One collection under the ``adaptive`` strategy; it stops once the knee is found."""
    started = prober.clock()
    strategy = strategies.adaptive(settings, prober.precision)

    def show(_: object) -> None:
        show_text = getattr(prober.progress, "show", None)
        if show_text is not None:
            show_text(f"limit {strategy.limit}")

    await prober.run(strategy, settings.start, show, lambda: strategy.converged, budget=budget)
    search: KneeSearch = strategy.search
    outcome = strategy.outcome or search.result()
    notes = list(search.notes)
    if not strategy.converged:
        notes.append(f"the budget of {budget} rollouts ran out before the knee was found")
    probes = [_level_probe(strategy, p) for p in search.levels]
    for probe in probes:
        probe.per_rollout = prober.per_rollout
    return TuneResult("adaptive", probes, outcome, prober.per_rollout, prober.per_rollout_relative_se,
                      prober.clock() - started, notes=notes)  # fmt: skip


def _level_probe(strategy: Any, parallelism: int) -> ProbeResult:
    """A level of the adaptive search, in the shape of a sweep's probe (its own tokens/s and p99)."""
    level = strategy.search.levels[parallelism]
    log = strategy.logs.get(parallelism)
    latencies = np.array(log.latencies) if log is not None and log.latencies else None
    tokens_per_s = level.rate.value if strategy.unit == "tokens" else (
        log.tokens / log.measured_s if log is not None and log.measured_s > 0 else 0.0)  # fmt: skip
    return ProbeResult(
        parallelism=parallelism,
        work_rate=level.rate,
        work_unit=strategy.unit or "rollouts",
        per_rollout=1.0,
        rollouts=level.rate.samples,
        error_rate=level.error_rate,
        failure_kinds={},
        throttled=0,
        latency_p50_s=float(np.percentile(latencies, 50)) if latencies is not None else None,
        latency_p99_s=float(np.percentile(latencies, 99)) if latencies is not None else None,
        per_token_p50_s=None,
        per_token_p99_s=None,
        output_tokens_per_s=tokens_per_s,
        stage_mean_s={},
        client_cpu_cores=0.0,
        loop_lag_p99_s=0.0,
        elapsed_s=log.measured_s if log is not None else 0.0,
    )


async def validate_stability(
    prober: Prober,
    parallelism: int,
    rollouts: int,
    expected: float,
    error_bound: float = 0.01,
    *,
    strategies: Strategies,
) -> StabilityResult:
    """A longer run at the recommendation: does throughput hold, and do errors stay rare?"""
    strategy = strategies.fixed(parallelism)
    result = await prober.probe(parallelism, strategy, rollouts=rollouts)
    rates = result.batch_rates or [result.rollouts_per_s]
    third = max(1, len(rates) // 3)
    first, last = float(np.mean(rates[:third])), float(np.mean(rates[-third:]))
    reasons = []
    if result.rollouts_per_s < 0.9 * expected:
        reasons.append(f"throughput {result.rollouts_per_s:.2f}/s is below 90% of the expected {expected:.2f}/s")
    if last < 0.9 * first:
        reasons.append(f"throughput fell during the run ({first:.2f}/s → {last:.2f}/s)")
    if result.error_rate > error_bound:
        reasons.append(f"error rate {result.error_rate:.1%} is above {error_bound:.1%}")
    return StabilityResult(parallelism, result.rollouts, result.rollouts_per_s, expected, result.error_rate,
                           first, last, not reasons, reasons)  # fmt: skip
