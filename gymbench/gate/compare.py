"""Compare a candidate run (or runs) with a baseline, metric by metric, suite-wide.

Per metric the effect is the ratio of medians with a bootstrap interval. Runs are the resampled
unit where both sides have at least three runs; otherwise samples are, and the calibrated
run-to-run noise that one run cannot see widens the interval. A suite-wide shift (a uniformly
slower runner) is estimated from the speed metrics, reported, and taken out; the p-values of
all metrics then go through Benjamini–Hochberg so the suite's false discoveries stay controlled.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from gymbench.gate.callgrind import ALLOCATOR_HOW
from gymbench.gate.counts import counts_mismatch
from gymbench.gate.matching import SuiteMatch, match_benchmarks, unlike_work
from gymbench.gate.noise import NoiseTable
from gymbench.gate.settings import CompareSettings, is_speed_unit, log_threshold
from gymbench.gate.stats import (
    Effect,
    benjamini_hochberg,
    bootstrap_log_ratio,
    minimum_detectable_effect,
    suite_shift,
    two_sided_p,
    widen,
)
from gymbench.measure import INSTRUCTIONS_UNIT
from gymbench.record import Metric, ResultsRecord
from gymbench.threads import THREADS_EXTRA, forced_note
from gymbench.types import Direction

Verdict = Literal["pass", "regressed", "improved", "inconclusive", "ungated"]
"""``ungated``: too noisy (or of unknown noise) to see its minimum effect, and no sign of a slowdown:
never ``pass``, which would vouch for what was not gated."""
VERDICTS: tuple[Verdict, ...] = ("pass", "regressed", "improved", "inconclusive", "ungated")
UNMEASURED_PREFIX = "benchmark "
"""Skipped entries naming one benchmark of the suite that has none of the compared metrics."""
COUNTS_EXTRA = "instructions"
"""Where a record says how a benchmark was counted, or why not (:mod:`gymbench.gate.instructions`)."""
UNIT_CHANGED = "its unit changed"
"""How a metric whose unit differs between (or within) the sides is noted: not compared, counted apart."""
MIN_SHIFT_METRICS = 5
UNCOUNTED_SEEDS = 10_000
"""Bootstrap seeds of uncounted benchmarks' timed changes start here, apart from the compared metrics'."""
MIN_RUNS_AS_UNIT = 3
TIME_NOT_GATED = (
    "shown but not gated: no calibration knows their run-to-run noise and fewer than "
    f"{MIN_RUNS_AS_UNIT} runs a side cannot show it, so a change in the machine's load between the "
    "runs cannot be told from a regression (inconclusive at most). Run `gymbench calibrate` once, "
    f"compare {MIN_RUNS_AS_UNIT}+ runs a side (a name glob), or gate instruction counts (--metric instructions)"
)


@dataclass(frozen=True)
class MetricComparison:
    """One metric of one benchmark. Ratios are candidate / baseline, after shift correction."""

    benchmark: str
    metric: str
    unit: str
    direction: Direction
    base_value: float
    cand_value: float
    effect: Effect
    """log(candidate / baseline) after shift correction, with its interval."""
    min_effect: float
    """The requested minimum effect that matters, as a fraction."""
    mde: float | None
    """Minimum detectable effect (fraction) from calibration; ``None`` when uncalibrated."""
    p: float
    q: float = 1.0
    verdict: Verdict = "inconclusive"
    noise_unknown: bool = False
    """A time metric from fewer than 3 runs a side with no calibrated noise: not gated, because a
    change in the machine's load between the runs moves it by more than its interval allows. Its
    verdict is ``inconclusive`` (worse by the minimum effect) or ``pass``, never ``regressed``."""

    @property
    def ratio(self) -> float:
        return math.exp(self.effect.log_ratio)

    @property
    def interval(self) -> tuple[float, float]:
        return math.exp(self.effect.low), math.exp(self.effect.high)

    @property
    def raw_ratio(self) -> float:
        return self.cand_value / self.base_value if self.base_value else math.inf

    @property
    def badness(self) -> float:
        """The corrected log ratio signed so that positive is worse."""
        return self.effect.log_ratio if self.direction == "lower" else -self.effect.log_ratio

    @property
    def gated(self) -> bool:
        """False when calibration says this metric is too noisy to see ``min_effect``, or when its
        run-to-run noise is unknown (:attr:`noise_unknown`)."""
        return not self.noise_unknown and (self.mde is None or self.mde <= self.min_effect)

    @property
    def worse_beyond_interval(self) -> bool:
        """The whole interval lies on the worse side of no change: a measured slowdown."""
        return self.effect.low > 0 if self.direction == "lower" else self.effect.high < 0

    @property
    def threshold(self) -> float:
        """The effect that must be exceeded: the requested one, or the MDE when ungated."""
        return self.min_effect if self.gated or self.mde is None else self.mde


@dataclass(frozen=True)
class Shift:
    """The suite-wide shift of speed metrics (log scale), estimated and maybe taken out."""

    log_ratio: float = 0.0
    se: float = 0.0
    metrics: int = 0
    applied: bool = False

    @property
    def ratio(self) -> float:
        return math.exp(self.log_ratio)


@dataclass(frozen=True)
class Skipped:
    """Something the comparison could not judge, and why (shown in every report)."""

    what: str
    why: str
    inconclusive: bool = True
    """Whether it makes the outcome inconclusive (it might hide a regression) or is only a note."""


@dataclass(frozen=True)
class TimedChange:
    """One speed metric of an uncounted benchmark, compared as an ungated metric is."""

    comparison: MetricComparison
    samples: tuple[int, int]
    """Samples on the baseline's side and the candidate's."""
    sample_span: tuple[float, float]
    """The lowest and highest ratio of a candidate sample to a baseline sample: what a quick run's
    two samples a side can say where a bootstrap interval needs three."""

    @property
    def text(self) -> str:
        """``time +34.0% [+20.1%, +49.3%]``, or the samples' span where there is no interval."""
        c = self.comparison
        low, high = c.interval
        if math.isfinite(low) and math.isfinite(high):
            return f"{c.metric} {_signed(c.ratio)} [{_signed(low)}, {_signed(high)}]"
        span = f"{_signed(self.sample_span[0])} to {_signed(self.sample_span[1])}"
        base, cand = self.samples
        counts = f"{base} samples a side" if base == cand else f"{base} and {cand} samples"
        return f"{c.metric} {_signed(c.ratio)} ({counts}, too few for an interval; sample ratios {span})"


def _signed(ratio: float) -> str:
    return f"{ratio - 1:+.1%}" if math.isfinite(ratio) else "n/a"


@dataclass(frozen=True)
class Uncounted:
    """A benchmark of both sides whose instructions were not compared (asyncio, no measure() call,
    counting failed on a side), with its change in the same runs' timings: one run a side, no
    shift taken out, never gated, but a slowdown the counts could not see is not hidden behind
    a pass (``gate --fail-on-uncounted`` fails the exit on any)."""

    benchmark: str
    why: str
    timed: list[TimedChange] = field(default_factory=list)
    """Each speed metric both sides timed; empty: no timed samples."""

    @property
    def timed_change(self) -> str:
        return "; ".join(t.text for t in self.timed) or "no timed samples"


@dataclass(frozen=True)
class SuiteComparison:
    baseline: str
    candidate: str
    comparisons: list[MetricComparison]
    shift: Shift
    match: SuiteMatch
    settings: CompareSettings
    warnings: list[str] = field(default_factory=list)
    noise_source: str = ""
    skipped: list[Skipped] = field(default_factory=list)
    method: Literal["stored", "ab"] = "stored"
    """How the effects were measured: stored runs compared, or interleaved A/B rounds."""
    uncounted: list[Uncounted] = field(default_factory=list)
    """In a comparison of instruction counts, the benchmarks it could not count, with their timed change."""

    def with_verdict(self, verdict: Verdict) -> list[MetricComparison]:
        return [c for c in self.comparisons if c.verdict == verdict]

    @property
    def counts(self) -> dict[str, int]:
        return {name: len(self.with_verdict(name)) for name in VERDICTS}

    @property
    def gated(self) -> int:
        """How many metrics the gate could vouch for (their noise supports their minimum effect)."""
        return sum(c.gated for c in self.comparisons)

    @property
    def nothing_gated(self) -> bool:
        """Metrics were compared, yet none of them was gated: a pass would be green for nothing."""
        return bool(self.comparisons) and not self.gated


def compare_runs(
    baseline: Sequence[ResultsRecord],
    candidate: Sequence[ResultsRecord],
    settings: CompareSettings | None = None,
    noise: NoiseTable | None = None,
    labels: tuple[str, str] = ("baseline", "candidate"),
) -> SuiteComparison:
    """The whole comparison: match benchmarks, measure effects, take out the shift, decide."""
    settings = settings or CompareSettings()
    match = match_benchmarks(baseline, candidate)
    pairs = _pairs(match, baseline, candidate, settings)
    skipped = _unknown_metrics(baseline, candidate, settings)
    unlike = unlike_work(baseline, candidate, match.common)
    pairs = [pair for pair in pairs if pair[0] not in unlike]
    skipped += [Skipped(bench_id, why) for bench_id, why in unlike.items()]
    changed = _unit_changes(pairs, baseline, candidate)
    pairs = [pair for pair in pairs if pair not in changed]
    skipped += [Skipped(f"{b} {m}", f"{UNIT_CHANGED} ({units}); a ratio across units means nothing")
                for (b, m), units in changed.items()]  # fmt: skip
    mismatch = counts_mismatch(baseline, candidate)
    if mismatch is not None:
        counted = [(b, m) for b, m in pairs if _unit(candidate, b, m) == INSTRUCTIONS_UNIT]
        pairs = [pair for pair in pairs if pair not in counted]
        skipped.append(Skipped(f"instruction counts ({len(counted)} metrics)", mismatch))
    raw = [
        _measure(bench_id, metric, baseline, candidate, settings, noise, index)
        for index, (bench_id, metric) in enumerate(pairs)
    ]
    shift = _estimate_shift(raw, settings)
    corrected = [_correct(c, shift, settings.confidence) if is_speed_unit(c.unit) else c for c in raw]
    decided = decide(corrected, settings)
    uncounted = _uncounted(match.common, pairs, (baseline, candidate), settings, noise)
    explained = {bench_id for bench_id, _ in changed}  # its unit change is its note
    skipped += _how_measured(match.common, pairs, (baseline, candidate), settings, uncounted, explained)
    ungated = sum(c.noise_unknown for c in decided)
    if ungated:
        skipped.append(Skipped(f"time ({ungated} metrics)", TIME_NOT_GATED, inconclusive=False))
    return SuiteComparison(
        baseline=labels[0],
        candidate=labels[1],
        comparisons=decided,
        shift=shift,
        match=match,
        settings=settings,
        noise_source=noise.source if noise else "",
        skipped=skipped,
        uncounted=uncounted,
    )


def _unit_changes(
    pairs: list[tuple[str, str]], baseline: Sequence[ResultsRecord], candidate: Sequence[ResultsRecord]
) -> dict[tuple[str, str], str]:
    """Each compared metric not in one unit across every run of both sides, with its units (``s ->
    furlongs``; ``s/ms -> ms`` when the runs of a side disagree): a ratio across units is no change,
    and which side held which unit decided whether it passed or gated. Not compared, either way."""
    changed = {}
    for bench_id, metric in pairs:
        base, cand = _units(baseline, bench_id, metric), _units(candidate, bench_id, metric)
        if len({*base, *cand}) > 1:
            changed[(bench_id, metric)] = f"{'/'.join(base)} -> {'/'.join(cand)}"
    return changed


def _units(records: Sequence[ResultsRecord], bench_id: str, metric: str) -> list[str]:
    """A side's units of one metric, each once, in the order its runs hold them."""
    return list(dict.fromkeys(m.unit for m in _runs(records, bench_id, metric)))


def _pairs(
    match: SuiteMatch,
    baseline: Sequence[ResultsRecord],
    candidate: Sequence[ResultsRecord],
    settings: CompareSettings,
) -> list[tuple[str, str]]:
    pairs = []
    for bench_id in match.common:
        names = _metric_names(baseline, bench_id) & _metric_names(candidate, bench_id)
        pairs += [(bench_id, name) for name in sorted(names) if not settings.metrics or name in settings.metrics]
    return pairs


def _how_measured(
    common: Sequence[str],
    pairs: list[tuple[str, str]],
    sides: tuple[Sequence[ResultsRecord], Sequence[ResultsRecord]],
    settings: CompareSettings,
    uncounted: Sequence[Uncounted] = (),
    explained: Collection[str] = (),
) -> list[Skipped]:
    """Every benchmark of the suite appears in the verdict: those with none of the compared metrics
    say why (not counted: asyncio ...) and, in a comparison of counts, their timed change; a
    comparison of counts says how they were counted. A metric measured on one side only (counting
    failed there) makes the outcome inconclusive. A benchmark in ``explained`` (its metrics' units
    changed, each said on its own) gets no second note."""
    baseline, candidate = sides
    compared = {bench_id for bench_id, _ in pairs}
    timed = {u.benchmark: f"; timed change in these runs (not gated): {u.timed_change}" for u in uncounted}
    notes = []
    for bench_id in common:
        if bench_id in compared:
            continue
        one_sided = sorted(_metric_names(baseline, bench_id) ^ _metric_names(candidate, bench_id))
        one_sided = [name for name in one_sided if not settings.metrics or name in settings.metrics]
        if one_sided:
            why = str(_extra(candidate, bench_id).get(COUNTS_EXTRA, "")) or "measured on one side only"
            why = f"{', '.join(one_sided)} on one side only: {why}{timed.get(bench_id, '')}"
            notes.append(Skipped(f"{UNMEASURED_PREFIX}{bench_id}", why))
            continue
        if bench_id in explained:  # both sides have its metrics, in other units: said per metric
            continue
        why = str(_extra(candidate, bench_id).get(COUNTS_EXTRA, "")) if INSTRUCTIONS_UNIT in settings.metrics else ""
        wanted = ", ".join(settings.metrics) or "metric"
        why = (why or f"has no {wanted} on both sides") + timed.get(bench_id, "")
        notes.append(Skipped(f"{UNMEASURED_PREFIX}{bench_id}", why, False))
    return notes + _how_counted(pairs, sides)


def _how_counted(
    pairs: list[tuple[str, str]], sides: tuple[Sequence[ResultsRecord], Sequence[ResultsRecord]]
) -> list[Skipped]:
    """How the compared benchmarks were counted: one line for those that ran on the caller alone,
    and one naming each benchmark that used more threads in the timed session of either side (a
    pool that worked only in the baseline's run is as hidden by the forced thread as the reverse)."""
    baseline, candidate = sides
    counted = sorted({b for b, m in pairs if _unit(candidate, b, m) == INSTRUCTIONS_UNIT})
    hows = {b: str(_extra(candidate, b).get(COUNTS_EXTRA, "")) for b in counted}
    helpers = {b: (_helpers(baseline, b), _helpers(candidate, b)) for b in counted}
    threaded = [b for b in counted if any(helpers[b])]
    notes = [Skipped(f"how counted: {b}", _threads_how(hows[b], *helpers[b]), False) for b in threaded if hows[b]]
    rest = [b for b in counted if b not in threaded]
    if rest and (common_how := {hows[b] for b in rest} - {""}):
        notes.append(Skipped(f"how counted ({len(rest)} benchmarks)", "; ".join(sorted(common_how)), False))
    return notes


def _helpers(records: Sequence[ResultsRecord], bench_id: str) -> int:
    """The most threads besides the caller that worked during the benchmark's calls in any timed
    session of a side (several runs a side: a pool caught in one of them is a pool)."""
    found = [b.extra.get(THREADS_EXTRA) for r in records for b in r.benchmarks if b.id == bench_id]
    return max((int(v) for v in found if isinstance(v, (int, float)) and not isinstance(v, bool)), default=0)


def _threads_how(candidate_how: str, base: int, cand: int) -> str:
    """The candidate's own words when both sides saw the same threads, else both sides' counts."""
    if base == cand:
        return candidate_how
    (more, first), (fewer, second) = sorted([(base, "baseline"), (cand, "candidate")], reverse=True)
    where = f"in the {first}'s timed session, {fewer or 'none'} in the {second}'s"
    return f"counted under callgrind with {ALLOCATOR_HOW}; {forced_note(more, where)}"


def _uncounted(
    common: Sequence[str],
    pairs: list[tuple[str, str]],
    sides: tuple[Sequence[ResultsRecord], Sequence[ResultsRecord]],
    settings: CompareSettings,
    noise: NoiseTable | None,
) -> list[Uncounted]:
    """In a comparison of instruction counts, each benchmark of both sides left uncounted, with the
    change of every speed metric the same runs timed on both sides (ungated: one run a side)."""
    if INSTRUCTIONS_UNIT not in settings.metrics:
        return []
    baseline, candidate = sides
    compared = {bench_id for bench_id, _ in pairs}
    found = []
    for index, bench_id in enumerate(b for b in common if b not in compared):
        names = sorted(_metric_names(baseline, bench_id) & _metric_names(candidate, bench_id))
        speed = [name for name in names if _timed_alike(baseline, candidate, bench_id, name)]
        timed = [
            _timed_change(bench_id, name, sides, settings, noise, UNCOUNTED_SEEDS + index * 10 + offset)
            for offset, name in enumerate(speed)
        ]
        why = str(_extra(candidate, bench_id).get(COUNTS_EXTRA, "")) or "not counted"
        found.append(Uncounted(bench_id, why, timed))
    return found


def _timed_change(
    bench_id: str,
    metric: str,
    sides: tuple[Sequence[ResultsRecord], Sequence[ResultsRecord]],
    settings: CompareSettings,
    noise: NoiseTable | None,
    index: int,
) -> TimedChange:
    baseline, candidate = sides
    base, cand = (_pooled(_runs(side, bench_id, metric)) for side in sides)
    span = (min(cand) / max(base), max(cand) / min(base)) if min(base) > 0 else (math.nan, math.nan)
    measured = _measure(bench_id, metric, baseline, candidate, settings, noise, index)
    return TimedChange(measured, (len(base), len(cand)), span)


def _timed_alike(
    baseline: Sequence[ResultsRecord], candidate: Sequence[ResultsRecord], bench_id: str, metric: str
) -> bool:
    """A speed metric in the same unit on both sides, with at least one sample on each."""
    unit = _unit(candidate, bench_id, metric)
    return (
        is_speed_unit(unit)
        and unit == _unit(baseline, bench_id, metric)
        and all(_pooled(_runs(side, bench_id, metric)) for side in (baseline, candidate))
    )


def _extra(records: Sequence[ResultsRecord], bench_id: str) -> dict[str, object]:
    for record in reversed(records):
        for bench in record.benchmarks:
            if bench.id == bench_id:
                return dict(bench.extra)
    return {}


def _unknown_metrics(
    baseline: Sequence[ResultsRecord], candidate: Sequence[ResultsRecord], settings: CompareSettings
) -> list[Skipped]:
    """A metric asked for (``--metric``) that neither side has: said, and inconclusive, never a silent pass."""
    known = {name for r in (*baseline, *candidate) for b in r.benchmarks for name in b.metrics}
    return [
        Skipped(f"metric {name!r}", f"no benchmark has it; the metrics measured: {', '.join(sorted(known)) or 'none'}")
        for name in settings.metrics
        if name not in known
    ]


def _metric_names(records: Sequence[ResultsRecord], bench_id: str) -> set[str]:
    return {name for metric_map in _metric_maps(records, bench_id) for name in metric_map}


def _metric_maps(records: Sequence[ResultsRecord], bench_id: str) -> list[dict[str, Metric]]:
    found = []
    for record in records:
        for bench in record.benchmarks:
            if bench.id == bench_id:
                found.append(dict(bench.metrics))
    return found


def _runs(records: Sequence[ResultsRecord], bench_id: str, metric: str) -> list[Metric]:
    return [maps[metric] for maps in _metric_maps(records, bench_id) if metric in maps]


def _unit(records: Sequence[ResultsRecord], bench_id: str, metric: str) -> str:
    return _runs(records, bench_id, metric)[-1].unit


def _options(records: Sequence[ResultsRecord], bench_id: str) -> dict[str, object]:
    for record in reversed(records):
        for bench in record.benchmarks:
            if bench.id == bench_id:
                return dict(bench.options)
    return {}


def _measure(
    bench_id: str,
    metric: str,
    baseline: Sequence[ResultsRecord],
    candidate: Sequence[ResultsRecord],
    settings: CompareSettings,
    noise: NoiseTable | None,
    index: int,
) -> MetricComparison:
    base_runs, cand_runs = _runs(baseline, bench_id, metric), _runs(candidate, bench_id, metric)
    effect = _effect(base_runs, cand_runs, settings, settings.seed + index)
    known = noise.get(bench_id, metric) if noise else None
    moderated = noise.moderated(bench_id, metric) if noise else None
    runs_factor = math.sqrt(1 / len(base_runs) + 1 / len(cand_runs))
    mde = None
    if known is not None and moderated is not None:
        sd, df = moderated
        if effect.unit == "sample":
            between = math.sqrt(max(0.0, sd**2 - known.within_se**2))
            effect = widen(effect, between * runs_factor, settings.confidence, df)
        elif effect.unit == "none":
            effect = _effect_from_noise(effect, sd * runs_factor, df, settings)
        mde = detectable_change(sd, df, settings, len(base_runs), len(cand_runs))
    first = cand_runs[-1]
    return MetricComparison(
        benchmark=bench_id,
        metric=metric,
        unit=first.unit,
        direction=first.direction,
        base_value=_median_of_runs(base_runs),
        cand_value=_median_of_runs(cand_runs),
        effect=effect,
        min_effect=settings.min_effect_for(bench_id, _options(candidate, bench_id), first.unit),
        mde=mde,
        p=two_sided_p(effect.log_ratio, effect.se, effect.df),
        noise_unknown=known is None and effect.unit != "run" and is_speed_unit(first.unit),
    )


def detectable_change(sd: float, df: float, settings: CompareSettings, n_base: int = 1, n_cand: int = 1) -> float:
    """The smallest relative change ``n_base`` runs against ``n_cand`` detect with ``settings.power``."""
    se = sd * math.sqrt(1 / n_base + 1 / n_cand)
    return math.expm1(minimum_detectable_effect(se, settings.alpha, settings.power, df))


def _effect(base: list[Metric], cand: list[Metric], settings: CompareSettings, seed: int) -> Effect:
    """Runs as the unit when both sides have enough; a few runs make a t test, not a normal one."""
    if len(base) >= MIN_RUNS_AS_UNIT and len(cand) >= MIN_RUNS_AS_UNIT:
        base_medians, cand_medians = [m.value for m in base], [m.value for m in cand]
        effect = bootstrap_log_ratio(base_medians, cand_medians, settings.confidence, seed, "run", settings.resamples)
        return replace(effect, df=len(base) + len(cand) - 2)
    return bootstrap_log_ratio(_pooled(base), _pooled(cand), settings.confidence, seed, "sample", settings.resamples)


def _pooled(runs: list[Metric]) -> list[float]:
    return [x for m in runs for x in (m.samples or (m.value,))]


def _median_of_runs(runs: list[Metric]) -> float:
    values = sorted(m.value for m in runs)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def _effect_from_noise(effect: Effect, se: float, df: float, s: CompareSettings) -> Effect:
    """Too few samples to resample, but calibration knows the noise: a t interval from it."""
    from scipy.stats import t

    se = max(se, 1e-12)
    half = float(t.ppf(0.5 + s.confidence / 2, df)) * se
    return Effect(effect.log_ratio, effect.log_ratio - half, effect.log_ratio + half, se, "calibrated", df)


def _estimate_shift(comparisons: list[MetricComparison], settings: CompareSettings) -> Shift:
    speed = [c.badness for c in comparisons if is_speed_unit(c.unit) and math.isfinite(c.badness)]
    if len(speed) < MIN_SHIFT_METRICS:
        return Shift(metrics=len(speed))
    log_ratio, se = suite_shift(speed, settings.seed)
    return Shift(log_ratio, se, len(speed), applied=settings.correct_shift)


def _correct(c: MetricComparison, shift: Shift, confidence: float) -> MetricComparison:
    """Take the shift out (in the metric's own direction) and add its uncertainty."""
    from scipy.stats import norm

    if not shift.applied:
        return c
    sign = 1.0 if c.direction == "lower" else -1.0
    moved = sign * shift.log_ratio
    e = c.effect
    grow = float(norm.ppf(0.5 + confidence / 2)) * shift.se
    effect = Effect(
        e.log_ratio - moved,
        e.log_ratio - moved - math.hypot(e.log_ratio - e.low, grow),
        e.log_ratio - moved + math.hypot(e.high - e.log_ratio, grow),
        math.hypot(e.se, shift.se),
        e.unit,
        e.df,
    )
    p = two_sided_p(effect.log_ratio, effect.se, effect.df)
    return MetricComparison(**{**c.__dict__, "effect": effect, "p": p})


def decide(comparisons: list[MetricComparison], settings: CompareSettings) -> list[MetricComparison]:
    q_values = benjamini_hochberg([c.p for c in comparisons])
    decided = []
    for c, q in zip(comparisons, q_values, strict=True):
        decided.append(MetricComparison(**{**c.__dict__, "q": q, "verdict": verdict_for(c, q, settings.alpha)}))
    return decided


def verdict_for(c: MetricComparison, q: float, alpha: float) -> Verdict:
    """Regressed or improved: significant after FDR control *and* at least the effect that matters.

    A change that looks as large as the threshold but is not significant is inconclusive when it
    points to worse (the gate cannot vouch for it) and passes when it points to better. A metric
    whose run-to-run noise is unknown (:attr:`MetricComparison.noise_unknown`) is never significant.
    An ungated metric never passes: it is ``ungated``, or ``inconclusive`` when its interval shows
    a slowdown (1.109 [1.006, 1.222] against an MDE of 15 % is a slowdown the gate cannot size,
    not a pass).
    """
    threshold = log_threshold(c.threshold)
    significant = q < alpha and not c.noise_unknown
    if c.badness >= threshold:
        return "regressed" if significant else "inconclusive"
    if c.badness <= -threshold and significant:
        return "improved"
    if c.gated:
        return "pass"
    if c.worse_beyond_interval and not c.noise_unknown:
        return "inconclusive"
    return "ungated"
