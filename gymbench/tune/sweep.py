"""NeMo Gym's doubling sweep made into one command, the adaptive search, and the stability check.

Both searches ask :class:`gymbench.tune.knee_search.KneeSearch` what to measure next, so they decide
by the same evidence and define the knee the same way; they differ in how a level is measured.
The sweep runs a separate probe per level (:class:`~gymbench.tune.probe.Prober`): every row of
its table is a steady-state measurement with a stated precision. The adaptive search runs one
collection whose ``adaptive`` strategy changes its own limit, paying no cold start per level.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from gymbench.tune.curves import Knee, Recommendation
from gymbench.tune.knee_search import KneeSearch, SearchResult, SearchSettings, Step
from gymbench.tune.probe import Prober, ProbeResult
from gymbench.tune.rates import Precision, Rate
from gymbench.types import ConcurrencyStrategy, JSONObject
from gymbench.units import duration

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
    objective: Recommendation | None = None
    """With a latency objective (``slo_p50_ms``) that bounds it: the recommendation it leaves."""
    objective_said: str = ""
    """What the latency objective decided, for the summary."""
    capacity: list[str] = field(default_factory=list)
    """The capacity signals the server gave and the tune used (its slots, its queue), or why none,
    then each flat stretch they kept the search growing past."""
    replicas: int = 1
    """Model replicas the load was spread over (``+base_url=[A, B, C]``): the knee and the
    recommendation are totals, and the summary says what they are per replica."""
    partial: str | None = None
    """Why the tune ended before its search did (``interrupted (SIGTERM)``): the answer is read from
    the levels measured until then; None for a tune that ran to its end."""

    @property
    def knee(self) -> Knee:
        """The knee, its plateau in rollouts/s."""
        knee = self.search.knee
        scale = 1 / self.per_rollout
        return replace(knee, plateau=knee.plateau * scale, plateau_half_width=knee.plateau_half_width * scale)

    @property
    def recommendation(self) -> Recommendation:
        """The throughput's recommendation, or the latency objective's where that is lower."""
        return self.objective or self.search.recommendation

    @property
    def recommended(self) -> int:
        return self.recommendation.parallelism

    @property
    def expected_rollouts_per_s(self) -> float:
        return self.recommendation.expected / self.per_rollout

    @property
    def expected_share(self) -> float:
        return self.recommendation.share

    def p50_at(self, parallelism: int) -> float | None:
        """The median request latency measured at ``parallelism`` (its last measurement), if measured."""
        found = [p.latency_p50_s for p in self.probes if p.parallelism == parallelism and p.latency_p50_s is not None]
        return found[-1] if found else None

    def meet_latency_objective(self, p50_s: float) -> None:
        """The largest level measured whose p50 latency is within ``p50_s``, where it is below the
        throughput's recommendation (beyond that, more parallelism adds latency, not throughput)."""
        limit = f"p50 ≤ {duration(p50_s)}"
        throughput = self.search.recommendation
        curve = self.search.curve
        latencies = {p: latency for p in curve if (latency := self.p50_at(p)) is not None}
        meeting = [p for p, latency in latencies.items() if latency <= p50_s]
        if not meeting:
            lowest = min(latencies, key=lambda p: latencies[p], default=None)
            said = f"; the lowest measured is {duration(latencies[lowest])} at {lowest}" if lowest is not None else ""
            self.objective_said = f"latency objective {limit}: no level measured meets it{said}"
            return
        best = max(meeting)
        if best >= throughput.parallelism:
            self.objective_said = (f"latency objective {limit}: met at the throughput's recommendation "
                                   f"{throughput.parallelism} (met up to {best})")  # fmt: skip
            return
        value, plateau = curve[best].value, self.search.knee.plateau
        self.objective = Recommendation(best, value, value / plateau if plateau > 0 else 0.0)
        self.objective_said = (f"latency objective {limit}: {best}, the largest level measured that meets it "
                               f"(the throughput alone would recommend {throughput.parallelism})")  # fmt: skip

    @property
    def stop_reason(self) -> str:
        return self.search.stop_reason

    @property
    def curve(self) -> dict[int, Rate]:
        """Rollouts/s per parallelism as the knee was computed from (capped at a rate limit)."""
        return {p: rate.scaled(1 / self.per_rollout) for p, rate in self.search.curve.items()}


@dataclass
class TimeBudget:
    """The seconds a search may take, on the prober's clock (0: no limit).

    Before each level the search asks whether that level would still end inside the budget, by the
    time the last level took, scaled by its parallelism (a turnover of twice the rollouts takes about
    twice as long once the server is saturated); past it, it stops and the knee is read from what
    was measured. The prober cuts a level that is still measuring when the budget runs out, once it
    has two batches: a tune with defaults ends within about its budget, at the cost of fewer levels
    or wider intervals (both said in the output)."""

    clock: Callable[[], float]
    seconds: float = 0.0
    started: float = 0.0

    @property
    def deadline(self) -> float | None:
        return self.started + self.seconds if self.seconds > 0 else None

    def elapsed(self) -> float:
        return self.clock() - self.started

    def refuses(self, step: Step, probes: list[ProbeResult]) -> bool:
        """Whether measuring ``step`` would run past the budget (the first level is always measured).

        The first level at the server's slot count (:attr:`Step.reaches_slots`) is refused only when
        less is left than the last level took: the deadline then cuts it. On a loaded 2-core machine
        a 64-slot llama.cpp took 79 s at 20, the forecast for 64 (252 s) exceeded the 201 s left, and
        the tune answered from 5 and 20, below the knee near 64 (issue 39)."""
        if self.seconds <= 0 or not probes:
            return False
        last = probes[-1]
        if step.reaches_slots:
            return self.seconds - self.elapsed() < last.elapsed_s
        return self.elapsed() + self.forecast(step, last) > self.seconds

    def forecast(self, step: Step, last: ProbeResult) -> float:
        """Seconds ``step`` is expected to take, from the last level's."""
        return last.elapsed_s * max(1.0, step.parallelism / last.parallelism) / step.precision_scale

    def cut_short(self, step: Step, probes: list[ProbeResult]) -> str | None:
        """What to say when ``step`` is measured though its forecast runs past the budget."""
        if self.seconds <= 0 or not probes or not step.reaches_slots:
            return None
        left = self.seconds - self.elapsed()
        cost = self.forecast(step, probes[-1])
        if self.elapsed() + cost <= self.seconds:
            return None
        return (
            f"measured {step.parallelism}, the first level at the server's slot count, with {left:.0f} s of the "
            f"budget left though forecast at {cost:.0f} s: a reading there is worth more than refinements below"
        )

    def reason(self, step: Step, earlier: str) -> str:
        said = (
            f"time budget: {self.elapsed():.0f} s of +time_budget_s={self.seconds:.0f} spent, too few left to "
            f"measure {step.parallelism} ({step.why}); the answer is read from the levels measured"
        )
        return f"{said} (before that: {earlier})" if earlier else said


@dataclass
class SweepLog:
    """What a sweep has measured so far, and its answer at any moment: a tune interrupted between
    levels (Ctrl-C, SIGTERM) reports and saves this much instead of nothing."""

    prober: Prober
    search: KneeSearch
    started: float
    probes: list[ProbeResult] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    first_pass: SearchResult | None = None

    def result(self, partial: str | None = None) -> TuneResult | None:
        """The tune's result from the levels measured (None before the first one ends)."""
        if not self.search.levels:
            return None
        if partial:  # the search is over: its reason is the interrupt, not "knee bracketed"
            earlier = self.search.stop_reason
            self.search.stop_reason = partial + (f" (before that: {earlier})" if earlier else "")
        self.prober.normalise(self.probes)
        notes = self.search.notes + [f"{p.parallelism}: {note}" for p in self.probes for note in p.notes]
        if len(self.search.levels) == 1:
            (only,) = self.search.levels
            notes.append(f"one level measured: the knee is not bracketed (it may be anywhere up to {only}); "
                         "give the search more time (+time_budget_s)")  # fmt: skip
        return TuneResult("sweep", list(self.probes), self.search.result(), self.prober.per_rollout,
                          self.prober.per_rollout_relative_se, self.prober.clock() - self.started, list(self.steps),
                          notes, first_pass=self.first_pass, capacity=self.search.grown_past(),
                          partial=partial)  # fmt: skip


def level_line(probe: ProbeResult, budget: TimeBudget | None = None) -> str:
    """One line per level measured, for logs where no progress bar is drawn (and beside one)."""
    rate = probe.rate
    parts = [f"tune: parallelism {probe.parallelism}: {rate.value:.3g} rollouts/s ±{rate.relative:.1%}"]
    if probe.latency_p50_s is not None:
        parts.append(f"p50 {duration(probe.latency_p50_s)}")
    if probe.server_waiting_max is not None:
        parts.append(f"server queue up to {probe.server_waiting_max:.0f} waiting")
    if probe.server_running is not None:
        parts.append(f"running {probe.server_running:.2f} on average")
    if probe.error_rate:
        parts.append(f"errors {probe.error_rate:.1%}")
    parts.append(f"{probe.elapsed_s:.1f} s")
    if budget is not None and budget.seconds > 0:
        parts.append(f"{budget.elapsed():.0f} s of the {budget.seconds:.0f} s budget")
    return ", ".join(parts)


def _say(prober: Prober, probe: ProbeResult, budget: TimeBudget | None) -> None:
    said = getattr(prober.progress, "said", None)
    if said is not None:
        said(level_line(probe, budget))


async def doubling_sweep(
    prober: Prober,
    settings: SearchSettings,
    strategies: Strategies,
    budget_s: float = 0.0,
    log: SweepLog | None = None,
    slots: int | None = None,
) -> TuneResult:
    """NeMo Gym's sweep: a probe per level, each until precise, levels chosen by the shared rules,
    within ``budget_s`` seconds (0: no limit). ``log``, when given, is kept current level by level
    (what an interrupted tune reports). ``slots``: the sequences the server says it runs at once
    (:mod:`gymbench.tune.capacity`); with its queue, it keeps the search growing past a flat stretch."""
    started = prober.clock()
    budget = TimeBudget(prober.clock, budget_s, started)
    prober.deadline = budget.deadline
    search = KneeSearch(settings, slots)
    if log is None:
        log = SweepLog(prober, search, started)
    else:
        log.search, log.started = search, started
    while (step := search.next_step()) is not None:
        if budget.refuses(step, log.probes):
            search.stop_reason = budget.reason(step, search.stop_reason)
            break
        cut = budget.cut_short(step, log.probes)
        if cut is not None:
            search.notes.append(cut)
        log.steps.append(step)
        probe = await prober.probe(step.parallelism, strategies.fixed(step.parallelism), step.precision_scale)
        log.probes.append(probe)
        search.record(probe.level())
        _say(prober, probe, budget)
    if settings.remeasure:
        log.first_pass = search.result()
        await _second_pass(prober, log, strategies, budget)
    result = log.result()
    assert result is not None, "the first level is always measured"
    return result


async def _second_pass(prober: Prober, log: SweepLog, strategies: Strategies, budget: TimeBudget) -> None:
    """Every level again, last measured first, merged into the search; a note says how far the
    two passes differed (the machine's drift, or a server whose state moved)."""
    search = log.search
    order = list(dict.fromkeys(step.parallelism for step in log.steps))[::-1]
    first = {p: search.levels[p].rate for p in order}
    probes: list[ProbeResult] = []
    for parallelism in order:
        step = Step(parallelism, why="second pass, in reverse order")
        if budget.refuses(step, log.probes):
            search.notes.append(f"the time budget ended the second pass after {len(probes)} of {len(order)} levels")
            break
        log.steps.append(step)
        probe = await prober.probe(parallelism, strategies.fixed(parallelism))
        probes.append(probe)
        log.probes.append(probe)
        search.record(probe.level(), apart=True)
        _say(prober, probe, budget)
    moved = [p.work_rate.value / first[p.parallelism].value - 1 for p in probes if first[p.parallelism].value > 0]
    if moved:
        search.notes.append(
            f"second pass (reverse order) over {len(probes)} levels read {min(moved):+.1%} to {max(moved):+.1%} "
            f"against the first (median {float(np.median(moved)):+.1%}); the curve merges both"
        )
    search.allow_drift(first, {probe.parallelism: probe.work_rate for probe in probes})


async def adaptive_search(
    prober: Prober,
    settings: SearchSettings,
    strategies: Strategies,
    budget: int = ADAPTIVE_BUDGET,
    budget_s: float = 0.0,
) -> TuneResult:
    """One collection under the ``adaptive`` strategy; it stops once the knee is found."""
    started = prober.clock()
    strategy = strategies.adaptive(settings, prober.precision)

    def show(_: object) -> None:
        show_text = getattr(prober.progress, "show", None)
        if show_text is not None:
            show_text(f"limit {strategy.limit}")

    clock = TimeBudget(prober.clock, budget_s, started)
    prober.deadline = clock.deadline

    def stop() -> bool:
        return bool(strategy.converged) or (clock.seconds > 0 and clock.elapsed() >= clock.seconds)

    await prober.run(strategy, settings.start, show, stop, budget=budget)
    search: KneeSearch = strategy.search
    if not strategy.converged and clock.seconds > 0 and clock.elapsed() >= clock.seconds:
        search.stop_reason = (
            f"time budget: +time_budget_s={clock.seconds:.0f} spent before the knee was found; the answer is read "
            "from the levels measured" + (f" (before that: {search.stop_reason})" if search.stop_reason else "")
        )
    outcome = strategy.outcome or search.result()
    notes = list(search.notes)
    if not strategy.converged and "time budget" not in search.stop_reason:
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
