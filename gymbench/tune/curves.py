"""The knee of a throughput curve: its definition, its interval, the plateau, the recommendation.

**The knee** of a server (for one workload) is the smallest parallelism ``p`` at which the
steady-state throughput ``X(p)`` reaches 97% of the plateau ``X* = max_p X(p)``, ``X`` taken as
a continuous curve by interpolating linearly in log2(p) between the parallelisms measured (or,
for the truth, between consecutive whole numbers). It is the first crossing, so on a server whose
throughput falls past a peak the knee is on the rising side, before the peak. The sweep, the
adaptive search and the true knee computed from a dense grid of closed-loop simulations all use
this one function, :func:`knee_of`.

From measurements, ``X*`` is estimated, on a flat plateau, as the inverse-variance mean of the
points that are not below the highest one beyond their noise (the highest alone is biased up by
the noise), and on a curve that falls past a peak as the peak's own measurement; the knee's 95%
interval comes from resampling every point from its own interval. A two-segment (hinge) fit
was tried first: on engines whose throughput bends smoothly into the plateau it put the knee
10-20% past the true saturation point.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from gymbench.tune.rates import Rate, pooled, ratio
from gymbench.tune.search_settings import KNEE_FRACTION, RECOMMEND_FLOOR


@dataclass(frozen=True)
class Knee:
    parallelism: float
    low: float
    high: float
    plateau: float
    """Throughput of the plateau (or the peak, on a server that degrades)."""
    plateau_half_width: float = 0.0
    peak_parallelism: int = 0
    """The parallelism measured highest."""
    between: tuple[int, int] | None = None
    """The levels measured on either side of the knee, when the interval was widened to them
    (:func:`within_the_levels`); None: the noise alone set the interval."""


def knee_of(points: Mapping[int, float], plateau: float | None = None, fraction: float = KNEE_FRACTION) -> float:
    """The smallest parallelism whose throughput reaches ``fraction`` of the plateau (log2-interpolated)."""
    ps = sorted(points)
    xs = [points[p] for p in ps]
    target = fraction * (max(xs) if plateau is None else plateau)
    first = next((i for i, x in enumerate(xs) if x >= target), len(xs) - 1)
    if first == 0 or xs[first] <= xs[first - 1]:
        return float(ps[first])
    lo, hi = math.log2(ps[first - 1]), math.log2(ps[first])
    share = (target - xs[first - 1]) / (xs[first] - xs[first - 1])
    return float(2 ** (lo + min(1.0, max(0.0, share)) * (hi - lo)))


def plateau_members(curve: Mapping[int, Rate]) -> list[int]:
    """The parallelisms whose throughput is not below the highest one beyond their noise."""
    best = max(curve, key=lambda p: curve[p].value)
    top = curve[best]
    return [p for p, r in curve.items() if top.value - r.value <= 1.96 * math.hypot(finite(top.se), finite(r.se))]


def plateau_of(curve: Mapping[int, Rate]) -> tuple[Rate, int]:
    """The plateau's throughput and the parallelism measured highest.

    On a flat plateau, the points not below the highest beyond their noise are pooled (the
    highest alone reads high by the noise); on a curve that falls past its best point, that point
    is a peak whose neighbours really are lower, and it alone is the estimate.
    """
    best = max(curve, key=lambda p: curve[p].value)
    last = max(curve)
    if last != best and ratio(curve[last], curve[best])[2] < 1:
        return curve[best], best
    return pooled([curve[p] for p in sorted(plateau_members(curve))]), best


def plateau_spread(curve: Mapping[int, Rate], plateau: Rate, best: int) -> float:
    """The plateau's standard error, with what choosing its estimator leaves open in it.

    Pooling the plateau's points reads low when the curve still creeps up across them; the
    highest point alone reads high by its noise. Half the gap between the two is added (in
    quadrature) to the pooled standard error: without it, the knee's 95% interval held the true
    knee in 37 of 48 tunes of the study (docs/tuning.md), the misses all a few percent off.
    """
    gap = abs(curve[best].value - plateau.value) / 2
    return math.hypot(finite(plateau.se), gap)


def finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def find_knee(
    curve: Mapping[int, Rate],
    fraction: float = KNEE_FRACTION,
    resamples: int = 1000,
    seed: int = 0,
    estimator_gap: bool = True,
) -> Knee:
    """The knee of measured rates, with a 95% interval from resampling each point in its own.

    ``estimator_gap=False`` leaves out of the plateau's spread what no re-measuring can shrink
    (:func:`plateau_spread`): a search asking whether more measuring would help uses that."""
    if not curve:
        raise ValueError("no throughput measurements")
    plateau, best = plateau_of(curve)
    knee = knee_of({p: r.value for p, r in curve.items()}, plateau.value, fraction)
    rng = np.random.default_rng(seed)
    ps = np.array(sorted(curve), dtype=float)
    means = np.array([curve[int(p)].value for p in ps])
    ses = np.array([finite(curve[int(p)].se) for p in ps])
    draws = rng.normal(means, ses, size=(resamples, len(ps)))
    spread = plateau_spread(curve, plateau, best) if estimator_gap else finite(plateau.se)
    targets = fraction * rng.normal(plateau.value, spread, size=resamples)
    estimates = _crossings(ps, draws, targets)
    low, high = np.percentile(estimates, [2.5, 97.5])
    return Knee(knee, float(min(low, knee)), float(max(high, knee)), plateau.value, plateau.half_width, best)


def within_the_levels(knee: Knee, curve: Mapping[int, Rate]) -> Knee:
    """The knee's interval, widened to the levels measured on either side of its point estimate.

    Between two levels the point is read by interpolating linearly in log2(p): a shape, not a
    measurement. Resampling the levels' rates gives that line's spread only, so a tune that ended
    with levels 36 and 64 around its knee printed 59.1 (95% CI 56.5-61.8) on llama.cpp with 64
    slots, whose throughput rises late and steeply to its slot count (truth 62: outside; issue 39).
    All the measurements say is that the knee lies past the level below and at or before the one
    above; the interval holds both, and narrows only as levels are measured between them."""
    ps = sorted(curve)
    below = [p for p in ps if p < knee.parallelism]
    above = [p for p in ps if p >= knee.parallelism]
    if not below or not above or above[0] == knee.parallelism:
        return knee
    low, high = min(knee.low, below[-1]), max(knee.high, above[0])
    if (low, high) == (knee.low, knee.high):
        return knee
    return replace(knee, low=float(low), high=float(high), between=(below[-1], above[0]))


def _crossings(ps: np.ndarray, draws: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """:func:`knee_of` for every row of ``draws`` at once (each row's own target)."""
    above = draws >= targets[:, None]
    first = np.where(above.any(axis=1), above.argmax(axis=1), len(ps) - 1)
    rows = np.arange(len(draws))
    previous = np.maximum(first - 1, 0)
    x0, x1 = draws[rows, previous], draws[rows, first]
    rising = (first > 0) & (x1 > x0)
    share = np.clip((targets - x0) / np.where(rising, x1 - x0, 1.0), 0.0, 1.0)
    logs = np.log2(ps)
    crossing = logs[previous] + share * (logs[first] - logs[previous])
    return np.where(rising, 2**crossing, ps[first])


def throughput_at(points: Mapping[int, float], parallelism: float) -> float:
    """Mean throughput at ``parallelism``, interpolated in log2(parallelism) between points."""
    ps = np.array(sorted(points), dtype=float)
    xs = np.array([points[int(p)] for p in ps], dtype=float)
    return float(np.interp(np.log2(parallelism), np.log2(ps), xs))


@dataclass(frozen=True)
class Recommendation:
    parallelism: int
    expected: float
    """Throughput expected there (measured, or interpolated between the points around it)."""
    share: float
    """``expected`` as a share of the plateau's throughput."""
    why: str = ""
    """Why it is not where the curve alone puts it (empty: it is)."""


def recommend(
    curve: Mapping[int, Rate], knee: Knee, share: float = KNEE_FRACTION, floor: float = RECOMMEND_FLOOR
) -> Recommendation:
    """The smallest whole parallelism expected to deliver ``share`` of the plateau (the knee itself by
    default), or a smaller level measured whose throughput is not below ``floor`` of the plateau
    within its 95% interval (the level's and the plateau's noise both).

    Parallelism beyond what the throughput needs only adds latency: on llama.cpp with 4 slots, 15
    and 38 gave the throughput of 8 at 2x and 5x its latency (issue 39). A level is taken below the
    crossing only on the whole of its interval: taken on its point estimate, or on an interval that
    merely reaches ``floor``, advice on noisy levels delivered 92% of the true peak."""
    values = {p: r.value for p, r in curve.items()}
    crossing = knee.parallelism if share == KNEE_FRACTION else knee_of(values, knee.plateau, share)
    parallelism = max(1, math.ceil(crossing - 1e-9))
    plateau = Rate(knee.plateau, knee.plateau_half_width)
    within = [p for p in sorted(curve) if p < parallelism and _not_below(curve[p], plateau, floor)]
    parallelism = within[0] if within else parallelism
    expected = values[parallelism] if parallelism in values else throughput_at(values, parallelism)
    if parallelism < min(values):
        expected = values[min(values)] * parallelism / min(values)
    return Recommendation(parallelism, expected, expected / knee.plateau if knee.plateau > 0 else 0.0)


def known_to_deliver(rate: Rate, knee: Knee, floor: float = RECOMMEND_FLOOR) -> bool:
    """Whether a level measured ``rate`` is at least ``floor`` of the knee's plateau over its whole
    95% interval (the level's and the plateau's noise both)."""
    return _not_below(rate, Rate(knee.plateau, knee.plateau_half_width), floor)


def _not_below(rate: Rate, plateau: Rate, floor: float) -> bool:
    """Measured to its precision, and at least ``floor`` of the plateau over its whole 95% interval."""
    return not rate.under_measured and math.isfinite(rate.half_width) and ratio(rate, plateau)[1] >= floor
