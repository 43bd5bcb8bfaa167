"""Interleaved A/B rounds: effects from paired per-round ratios, and their A/A calibration.

The A/B runner times the baseline and the candidate round by round, alternating (ABBA), in two
worker processes pinned to one CPU. Neighbouring rounds share the machine's state of the moment,
so the ratio of a pair cancels what a busy runner does to both; the median over the pairs is one
repeat's effect. A worker process can also land in a slow or a fast state for its whole life
(the same workload at 1.3 ms in one process and 2.4 ms in the next), which no pairing inside it
removes: the runner therefore repeats with fresh worker pairs and the effect is the median over
the repeats. How far that median strays when nothing changed is learned from A/A repeats (the
same commit on both sides) per benchmark, exactly as stored-run calibration learns its noise.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from gymbench.gate.calibrate import MIN_CALIBRATION_RUNS
from gymbench.gate.compare import MetricComparison, Shift, Skipped, SuiteComparison, decide
from gymbench.gate.gate import GateResult, enforced, outcome_of
from gymbench.gate.matching import SuiteMatch
from gymbench.gate.noise import MetricNoise, NoiseTable
from gymbench.gate.settings import CompareSettings
from gymbench.gate.stats import Effect, minimum_detectable_effect, two_sided_p
from gymbench.threads import forced_note

HOW_MEASURED = (
    "interleaved in two worker processes pinned to one CPU, BLAS/OpenMP forced to one thread "
    "(OPENBLAS_NUM_THREADS=1 and the like); with the limit lifted for a probe these ran on one thread, "
    "so forcing it changes nothing for them"
)
THREADS_WHERE = "in a probe with the limit lifted"

Key = tuple[str, str]
"""(benchmark id, metric)."""
CPU_SUFFIX = "_cpu"


@dataclass(frozen=True)
class PairedRounds:
    """One repeat of one metric: seconds per call of neighbouring baseline and candidate rounds."""

    base: tuple[float, ...]
    cand: tuple[float, ...]

    @property
    def log_ratios(self) -> np.ndarray:
        return np.log(np.asarray(self.cand) / np.asarray(self.base))

    @property
    def effect(self) -> float:
        """This repeat's log ratio: the median over its pairs."""
        return float(np.median(self.log_ratios))

    def within_se(self, seed: int = 0) -> float:
        """What this repeat alone claims about its median (pairs resampled): blind to process noise."""
        ratios = self.log_ratios
        if ratios.size < 3:
            return math.inf
        rng = np.random.default_rng(seed)
        medians = np.median(ratios[rng.integers(0, ratios.size, (500, ratios.size))], axis=1)
        return float(np.std(medians, ddof=1))


@dataclass
class ABMeasurements:
    """Everything one A/B comparison measured: per (benchmark, metric), one entry per repeat."""

    rounds: dict[Key, list[PairedRounds]] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)
    match: SuiteMatch = field(default_factory=lambda: SuiteMatch([]))
    options: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """Each benchmark's marker options (``min_effect``), from the candidate's collection."""
    threads: dict[str, int] = field(default_factory=dict)
    """By benchmark id: threads besides the caller that worked in the workers' probe (either side)."""

    def add(self, key: Key, rounds: PairedRounds) -> None:
        self.rounds.setdefault(key, []).append(rounds)


@functools.lru_cache(maxsize=32)
def median_variance_factor(k: int) -> float:
    """Var(median of ``k`` draws) / Var(one draw) for normal noise (1 for k = 1, 0.449 for k = 3)."""
    if k <= 2:
        return 1.0 / k  # the median of one or two draws is their mean
    draws = np.random.default_rng(0).standard_normal((200_000, k))
    return float(np.var(np.median(draws, axis=1)))


WALL_NOT_GATED = (
    "shown in the A/B rounds but not gated: on a shared runner the wall-time noise of a round follows the "
    "neighbours' load, which differs between calibration and comparison; CPU time (time_cpu) leaves the "
    "waiting out. --gate-wall-time gates it too (for a dedicated runner)"
)


def compare_paired(
    data: ABMeasurements,
    settings: CompareSettings,
    noise: NoiseTable | None,
    labels: tuple[str, str] = ("baseline", "candidate"),
    gate_wall_time: bool = False,
) -> SuiteComparison:
    """Every measured metric judged, Benjamini–Hochberg across the suite, as the stored-run gate.

    Wall-time metrics are left out unless ``gate_wall_time``: in the study their A/A noise grew
    fourfold between a quiet and a busy hour on the shared VM (false alarms), CPU time's did not.
    """
    judged = {key: r for key, r in data.rounds.items() if gate_wall_time or key[1].endswith(CPU_SUFFIX)}
    raw = [
        _paired_metric(bench_id, metric, repeats, settings, noise, data.options.get(bench_id, {}))
        for (bench_id, metric), repeats in sorted(judged.items())
    ]
    wall = len(data.rounds) - len(judged)
    skipped = [Skipped(f"wall time ({wall} metrics)", WALL_NOT_GATED, inconclusive=False)] if wall else []
    measured = sorted({bench_id for bench_id, _ in data.rounds})
    threaded = [b for b in measured if data.threads.get(b)]
    skipped += [Skipped(f"how measured: {b}", forced_note(data.threads[b], THREADS_WHERE), False) for b in threaded]
    if len(measured) > len(threaded):
        skipped.append(Skipped(f"how measured ({len(measured) - len(threaded)} benchmarks)", HOW_MEASURED, False))
    return SuiteComparison(
        baseline=labels[0],
        candidate=labels[1],
        comparisons=decide(raw, settings),
        shift=Shift(),
        match=data.match,
        settings=settings,
        noise_source=noise.source if noise else "",
        skipped=[*data.skipped, *skipped],
        method="ab",
    )


def _paired_metric(
    bench_id: str,
    metric: str,
    repeats: Sequence[PairedRounds],
    settings: CompareSettings,
    noise: NoiseTable | None,
    options: Mapping[str, Any],
) -> MetricComparison:
    effects = np.asarray([r.effect for r in repeats])
    point = float(np.median(effects))
    calibrated = noise.moderated(bench_id, metric) if noise else None
    if calibrated is not None:
        sd, df = _pooled_with_own_spread(*calibrated, effects)
    else:
        sd, df = _uncalibrated_noise(effects, repeats)
    se = sd * math.sqrt(median_variance_factor(len(effects)))
    half = _t(0.5 + settings.confidence / 2, df) * se
    mde = paired_detectable_change(sd, df, settings, len(effects)) if calibrated else None
    return MetricComparison(
        benchmark=bench_id,
        metric=metric,
        unit="s",
        direction="lower",
        base_value=float(np.median([x for r in repeats for x in r.base])),
        cand_value=float(np.median([x for r in repeats for x in r.cand])),
        effect=Effect(point, point - half, point + half, se, "paired", df),
        min_effect=settings.min_effect_for(bench_id, options),
        mde=mde,
        p=two_sided_p(point, se, df),
    )


def paired_detectable_change(sd: float, df: float, settings: CompareSettings, repeats: int) -> float:
    """The smallest relative change the median of ``repeats`` worker pairs finds with ``settings.power``."""
    se = sd * math.sqrt(median_variance_factor(repeats))
    return math.expm1(minimum_detectable_effect(se, settings.alpha, settings.power, df))


def _pooled_with_own_spread(sd: float, df: float, effects: np.ndarray) -> tuple[float, float]:
    """The calibration's noise pooled with how far this comparison's own repeats disagree.

    A calibration taken in a quiet hour says little about a busy one: in CI an A/A pair whose two
    worker pairs differed by a process's slow state (+80 % in one, 0 in the other) was judged
    against the quiet calibration alone and read +40 % REGRESSED with a narrow interval. The spread
    of the repeats around their own mean is noise whatever the change, so it joins the estimate
    with its own degrees of freedom; repeats that agree leave the calibration nearly as it was.
    """
    own_df = len(effects) - 1
    if own_df < 1:
        return sd, df
    own_variance = float(np.var(effects, ddof=1))
    return math.sqrt((df * sd**2 + own_df * own_variance) / (df + own_df)), df + own_df


def _uncalibrated_noise(effects: np.ndarray, repeats: Sequence[PairedRounds]) -> tuple[float, float]:
    """Without A/A repeats: the spread of these few repeats (few degrees of freedom, so wide)."""
    within = float(np.median([r.within_se() for r in repeats]))
    if len(effects) < 2:
        return within, math.inf
    return max(float(np.std(effects, ddof=1)), within), len(effects) - 1.0


def _t(quantile: float, df: float) -> float:
    return float(stats.norm.ppf(quantile) if math.isinf(df) else stats.t.ppf(quantile, df))


def learn_paired_noise(aa: ABMeasurements, machine_key: str, source: str = "") -> NoiseTable:
    """Each metric's A/A noise: the root mean square of its repeat effects around 0.

    Around 0 rather than around their mean: a bias between the two worker slots (the first one
    started always a little faster) is noise the gate must allow for, not something to subtract.
    """
    table: dict[str, dict[str, MetricNoise]] = {}
    for (bench_id, metric), repeats in aa.rounds.items():
        if len(repeats) < MIN_CALIBRATION_RUNS:
            continue
        effects = np.asarray([r.effect for r in repeats])
        within = float(np.median([r.within_se() for r in repeats]))
        rms = float(np.sqrt(np.mean(effects**2)))
        table.setdefault(bench_id, {})[metric] = MetricNoise(run_sd=rms, within_se=within, runs=len(repeats))
    return NoiseTable(machine_key, table, source)


NO_AB_CALIBRATION = (
    "no A/B calibration for this machine: the noise comes from this comparison's own few worker pairs, "
    "so only large changes can be significant. Run `gymbench calibrate --ab` once (same commit on both sides)."
)


def paired_gate(
    data: ABMeasurements,
    settings: CompareSettings,
    noise: NoiseTable | None,
    fail_on: str,
    labels: tuple[str, str],
    warnings: Sequence[str] = (),
    gate_wall_time: bool = False,
) -> GateResult:
    """The A/B comparison as the same gate result (exit codes, reports) as a stored-run comparison."""
    suite = compare_paired(data, settings, noise, labels, gate_wall_time)
    outcome = outcome_of(suite)
    notes = [*warnings, *([] if noise is not None else [NO_AB_CALIBRATION])]
    return GateResult(suite, outcome, enforced(outcome, fail_on), notes)
