"""The settings of a search for the knee of the throughput curve, each declared once.

``gymbench tune`` offers them flat (``+start=8 +factor=1.5``), the ``adaptive`` strategy takes them
as its options, and :class:`~gymbench.tune.knee_search.KneeSearch` runs by them; the groups here are what
those schemas inherit. No numpy here: commands check settings before anything heavy is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gymbench.settings import Checked, at_least, doc, require, with_defaults

if TYPE_CHECKING:
    from gymbench.tune.rates import Precision

KNEE_FRACTION = 0.97
"""The knee: the smallest parallelism expected to give this share of the plateau's throughput."""
RECOMMEND_FLOOR = 0.95
"""A level measured below the knee is recommended when its whole 95% interval is at least this share
of the plateau's (:func:`gymbench.tune.curves.recommend`)."""


@dataclass
class GrowthSettings(Checked):
    """How a search grows the parallelism and decides it has reached the plateau."""

    start: int = field(default=5, metadata=doc("first parallelism measured"))
    factor: float = field(default=2.0, metadata=doc("grow the parallelism by this factor while throughput grows"))
    plateau_gain: float = field(
        default=round(1 / KNEE_FRACTION - 1, 3),
        metadata=doc("a gain below this per doubling (beyond the noise) is a plateau: stop growing"),
    )
    """0.031: on an engine whose step time grows with its batch (throughput ``p / (c + p)``), a
    doubling that gains less leaves less than the 3% of headroom that the knee's 97% allows. At 0.10
    the search stopped early on such an engine: on a compute-bound simulator profile (64 slots, step
    1 ms + 0.8 ms per sequence) the sweep's knee came out 55% low and its advice delivered 92% of
    the plateau; on llama.cpp with 64 slots, 78%. See :func:`gymbench.tune.knee_search.plateau_threshold`
    for a step other than a doubling."""
    lookahead: int = field(
        default=1, metadata=doc("levels measured past a plateau before believing it (throughput may rise again)")
    )
    degrade: float = field(
        default=0.05, metadata=doc("a drop below the best by more than this (beyond the noise) is degradation")
    )
    max_error_rate: float = field(
        default=0.01,
        metadata=doc("a level with a higher error rate is unhealthy: stop growing", was="error_rate"),
    )
    resolution: float = field(default=1.1, metadata=doc("bisect until the knee's bracket high/low is within this"))
    share: float = field(
        default=KNEE_FRACTION,
        metadata=doc("settle at the smallest parallelism expected to give this share of the plateau (0.97: the knee)"),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("start", self.start, 1)
        require(self.factor > 1, "factor", self.factor, "a multiplier above 1")
        at_least("plateau_gain", self.plateau_gain, 0.0, 10.0)
        at_least("lookahead", self.lookahead, 0, 8)
        at_least("degrade", self.degrade, 0.0, 1.0)
        at_least("max_error_rate", self.max_error_rate, 0.0, 1.0)
        require(self.resolution > 1, "resolution", self.resolution, "a ratio above 1")
        require(0 < self.share <= 1, "share", self.share, "a share in (0, 1]")


@dataclass
class SweepSettings(GrowthSettings):
    """A search of separate probes (``gymbench tune``): where it stops, and how often a doubt is re-measured."""

    max_parallelism: int = field(default=1024, metadata=doc("the largest parallelism measured"))
    reprobes: int = field(default=2, metadata=doc("re-measurements of a level when a decision is in doubt"))
    remeasure: bool = field(
        default=True,
        metadata=doc(
            "after the search, measure every level again in reverse order and merge the two passes "
            "(the sweep's; the adaptive method has no levels to measure again)"
        ),
    )
    """Levels measured one after another turn a machine's drift into a slope of the curve: on this
    project's 2-core VM the speed moved 2-8% between passes minutes apart, and a 4-slot llama.cpp
    sweep put its knee at 21 where the truth was 5. In reverse order every level's two readings
    straddle the middle of the run, so a steady drift cancels in their merge
    (:func:`gymbench.tune.rates.remeasured`), and the merge's interval covers how far the two
    passes differ; the drift read from all levels' two passes widens every level
    (:meth:`~gymbench.tune.knee_search.KneeSearch.allow_drift`): the interval then says how sure the
    knee is on a machine that drifts. The
    default since the sweep stops where the server says it is full: a 4-slot llama.cpp tune took
    54 s in one pass and 74 s in two, its knee 4.8 [4.4, 8.0] in one and 3.7 [2.0, 8.0] in two
    (docs/tuning.md). ``+remeasure=false`` halves a long sweep's time."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.max_parallelism >= self.start, "max_parallelism", self.max_parallelism, "at least start")
        at_least("reprobes", self.reprobes, 0)


@dataclass
class SearchSettings(SweepSettings):
    """What :class:`~gymbench.tune.knee_search.KneeSearch` runs by: the sweep's settings and two of its own."""

    knee_precision: float = 0.05
    """Re-measure the levels the knee is read from until its 95% interval is within ± this share."""
    fine_growth: bool = False
    """Once a step gains less than half, grow by √factor: less overshoot past the plateau (the
    adaptive search, where a level far past the knee is the costliest to measure)."""


@dataclass
class PrecisionSettings(Checked):
    """How long one level is measured: until its rate is known this well, within turnover bounds."""

    target_precision: float = field(
        default=0.02,
        metadata=doc("measure each level until its rate's 95% interval is within this share of it", was="precision"),
    )
    min_batches: int = field(default=6, metadata=doc("turnovers (p rollouts each) a level is measured at least"))
    max_batches: int = field(
        default=40,
        metadata=doc("turnovers a level is measured at most (then under-measured, if still short of the target)"),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 < self.target_precision < 1, "target_precision", self.target_precision, "a share in (0, 1)")
        at_least("min_batches", self.min_batches, 2)
        require(
            self.max_batches >= self.min_batches,
            "max_batches",
            self.max_batches,
            f"at least min_batches ({self.min_batches})",
        )

    def precision_rule(self) -> Precision:
        from gymbench.tune.rates import Precision

        return Precision(self.target_precision, self.min_batches, self.max_batches)


@dataclass
class AdaptiveSettings(GrowthSettings, PrecisionSettings):
    """The ``adaptive`` strategy's settings: the knee search's rules, found during one run."""

    max_limit: int = field(default=4096, metadata=doc("largest limit tried"))
    stop_when_converged: bool = field(default=False, metadata=doc("stop the run once the knee is found"))

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.max_limit >= self.start, "max_limit", self.max_limit, f"at least start ({self.start})")

    def search_settings(self) -> SearchSettings:
        growth = {name: getattr(self, name) for name in GrowthSettings.__dataclass_fields__}
        return SearchSettings(**growth, max_parallelism=self.max_limit, fine_growth=True)


AdaptiveSettings = with_defaults(AdaptiveSettings, start=4, max_error_rate=0.02, min_batches=3)  # type: ignore[misc]
