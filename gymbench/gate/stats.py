"""The statistics behind a verdict: ratio of medians, its bootstrap interval, p-values, FDR.

Everything works on the log of the ratio of medians (``log(candidate / baseline)``): ratios of
timings are multiplicative, and on the log scale a 10 % slowdown and the matching speed-up are
the same distance from zero. A metric's *badness* is that log ratio signed so that positive
always means worse (slower, or less throughput).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

RESAMPLES = 2000
LARGE_SAMPLE = 200
"""Above this many samples a side, bootstrap medians are drawn from their exact distribution."""
MIN_SAMPLES = 3
"""Fewer samples than this on a side give no interval: the comparison can only be inconclusive."""


@dataclass(frozen=True)
class Effect:
    """A log ratio with its bootstrap interval and standard error (all on the log scale)."""

    log_ratio: float
    low: float
    high: float
    se: float
    unit: str
    """What was resampled: ``"sample"``, ``"run"``, ``"calibrated"`` or ``"none"`` (too little data)."""
    df: float = math.inf
    """Degrees of freedom of ``se``: infinite for many samples, finite when runs or a calibration
    from a few runs carry the uncertainty (the test then uses Student's t)."""

    @property
    def measured(self) -> bool:
        return self.unit != "none"


def log_ratio_of_medians(base: Sequence[float] | np.ndarray, cand: Sequence[float] | np.ndarray) -> float:
    return math.log(float(np.median(cand)) / float(np.median(base)))


def bootstrap_log_ratio(
    base: Sequence[float],
    cand: Sequence[float],
    confidence: float,
    seed: int,
    unit: str = "sample",
    resamples: int = RESAMPLES,
) -> Effect:
    """Percentile bootstrap of ``log(median(cand) / median(base))``, resampling each side alone.

    ``unit`` names what the values are (samples of one run each, or one median per run); the
    arithmetic is the same, the caller decides which is honest for its data. Large samples draw
    the bootstrap medians straight from their known distribution (:func:`bootstrap_medians`).
    """
    a, b = _positive(base), _positive(cand)
    point = log_ratio_of_medians(a, b)
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES:
        return Effect(point, -math.inf, math.inf, math.inf, "none")
    rng = np.random.default_rng(seed)
    if min(len(a), len(b)) > LARGE_SAMPLE:
        draws = np.log(bootstrap_medians(b, resamples, rng) / bootstrap_medians(a, resamples, rng))
        low, high = np.quantile(draws, [(1 - confidence) / 2, (1 + confidence) / 2])
        se = float(np.std(draws, ddof=1))
    else:
        result = stats.bootstrap(
            (a, b),
            _log_ratio_statistic,
            n_resamples=resamples,
            confidence_level=confidence,
            method="percentile",
            vectorized=True,
            paired=False,
            rng=rng,
        )
        low, high = result.confidence_interval
        se = float(result.standard_error)
    if not math.isfinite(se) or se == 0.0:
        se = _floor_se(a, b)
    low, high = float(low), float(high)
    if not (math.isfinite(low) and math.isfinite(high)) or low == high:
        half = stats.norm.ppf(0.5 + confidence / 2) * se
        low, high = point - half, point + half
    return Effect(point, min(low, point), max(high, point), se, unit)


def bootstrap_medians(data: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of ``resamples`` bootstrap resamples of ``data``, without building the resamples.

    A resample's median is at most the j-th smallest value exactly when more than half of its
    n draws fall on the j smallest, so ``P(median <= x_(j)) = P(Binomial(n, j/n) > n/2)``:
    inverting that distribution costs O(n + resamples) instead of O(n * resamples). For an even n
    this takes the upper of the two middle values, a difference of half a gap between
    neighbouring order statistics, negligible at the sizes where it is used.
    """
    ordered = np.sort(data)
    n = ordered.size
    cdf = stats.binom.sf(n // 2, n, np.arange(1, n + 1) / n)
    index = np.minimum(np.searchsorted(cdf, rng.random(resamples)), n - 1)
    return ordered[index]


def _log_ratio_statistic(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.log(np.median(b, axis=axis) / np.median(a, axis=axis))


def _positive(values: Sequence[float]) -> np.ndarray:
    """Finite values; a ratio of medians needs positive medians, so zeros become tiny."""
    data = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if data.size == 0:
        raise ValueError("no finite samples")
    return np.maximum(data, np.finfo(float).tiny) if np.median(data) <= 0 else data


def _floor_se(a: np.ndarray, b: np.ndarray) -> float:
    """Identical resamples (heavily tied data): fall back on a rank-based error of the median."""
    spread = [stats.iqr(x) / 1.349 / max(float(np.median(x)), 1e-300) for x in (a, b)]
    n = [len(a), len(b)]
    return float(math.sqrt(sum((1.2533 * s) ** 2 / k for s, k in zip(spread, n, strict=True))) or 1e-12)


def widen(effect: Effect, extra_se: float, confidence: float, extra_df: float = math.inf) -> Effect:
    """Add run-to-run noise that resampling one run's samples cannot see.

    The interval keeps the bootstrap's asymmetry; each side grows in quadrature by the extra
    noise, and the standard error likewise. The degrees of freedom of the sum follow
    Welch–Satterthwaite, so a noise estimate from few runs makes the test rightly less sure.
    """
    if extra_se <= 0 or not effect.measured:
        return effect
    se = math.hypot(effect.se, extra_se)
    df = welch_satterthwaite((effect.se, effect.df), (extra_se, extra_df))
    grow = _quantile(confidence, extra_df) * extra_se
    low = effect.log_ratio - math.hypot(effect.log_ratio - effect.low, grow)
    high = effect.log_ratio + math.hypot(effect.high - effect.log_ratio, grow)
    return Effect(effect.log_ratio, low, high, se, effect.unit, df)


def welch_satterthwaite(*parts: tuple[float, float]) -> float:
    """Degrees of freedom of a sum of independent variance estimates given as (se, df) pairs."""
    total = sum(se**2 for se, _ in parts) ** 2
    spread = sum(se**4 / df for se, df in parts if math.isfinite(df) and df > 0)
    return total / spread if spread > 0 else math.inf


def _quantile(confidence: float, df: float) -> float:
    upper = 0.5 + confidence / 2
    return float(stats.norm.ppf(upper) if math.isinf(df) else stats.t.ppf(upper, df))


def two_sided_p(estimate: float, se: float, df: float = math.inf) -> float:
    """p-value of "no change" (normal, or Student's t with ``df``); 1.0 without an error estimate."""
    if not math.isfinite(se) or se <= 0:
        return 1.0
    z = abs(estimate) / se
    return float(2 * (stats.norm.sf(z) if math.isinf(df) else stats.t.sf(z, df)))


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """BH-adjusted p-values (q-values): flag where ``q < alpha`` to control the suite's FDR."""
    if not p_values:
        return []
    return [float(q) for q in stats.false_discovery_control(np.asarray(p_values, dtype=float), method="bh")]


def minimum_detectable_effect(se: float, alpha: float, power: float, df: float = math.inf) -> float:
    """Smallest true log ratio found with probability ``power`` by a two-sided test at ``alpha``."""
    return (_quantile(1 - alpha, df) + _quantile(2 * power - 1, df)) * se


def suite_shift(log_ratios: Sequence[float], seed: int) -> tuple[float, float]:
    """The whole suite's common shift (median log ratio) and its bootstrap standard error.

    A uniformly slower runner moves every timing by the same factor; the median across
    benchmarks sees that factor and ignores the few benchmarks a change really moved.
    """
    data = np.asarray(log_ratios, dtype=float)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, data.size, size=(RESAMPLES, data.size))
    return float(np.median(data)), float(np.std(np.median(data[picks], axis=1), ddof=1))
