"""The built-in concurrency strategies' plugin: ``semaphore`` and ``adaptive``, with their options."""

from __future__ import annotations

from dataclasses import dataclass, field

from gymbench.hookspecs import hookimpl
from gymbench.settings import at_least, require
from gymbench.types import Component, ConcurrencyStrategy


@dataclass
class SemaphoreSettings:
    num_samples_in_parallel: int | None = field(
        default=None, metadata={"help": "rollouts at once, at most (unset: unbounded, as NeMo Gym)"}
    )

    def __post_init__(self) -> None:
        at_least("num_samples_in_parallel", self.num_samples_in_parallel, 1)


@dataclass
class AdaptiveSettings:
    start: int = field(default=4, metadata={"help": "first limit"})
    max_limit: int = field(default=4096, metadata={"help": "largest limit tried"})
    factor: float = field(default=2.0, metadata={"help": "grow the limit by this factor while throughput grows"})
    plateau_gain: float = field(default=0.10, metadata={"help": "a gain below this (beyond the noise) is a plateau"})
    degrade: float = field(default=0.05, metadata={"help": "a drop below the best by more than this is degradation"})
    error_rate: float = field(default=0.02, metadata={"help": "a level with more errors is unhealthy"})
    resolution: float = field(default=1.1, metadata={"help": "stop bisecting when high/low is below this"})
    precision: float = field(
        default=0.02, metadata={"help": "measure a level until its 95% interval is within this share of its rate"}
    )
    min_batches: int = field(default=3, metadata={"help": "turnovers per level at least"})
    max_batches: int = field(default=40, metadata={"help": "turnovers per level at most (then it is under-measured)"})
    share: float = field(
        default=0.97, metadata={"help": "settle at the smallest limit expected to give this share of the plateau"}
    )
    stop_when_converged: bool = field(default=False, metadata={"help": "stop the run once the knee is found"})

    def __post_init__(self) -> None:
        at_least("start", self.start, 1)
        require(self.max_limit >= self.start, "max_limit", self.max_limit, f"at least start ({self.start})")
        require(self.factor > 1, "factor", self.factor, "a multiplier above 1")
        at_least("plateau_gain", self.plateau_gain, 0.0, 10.0)
        at_least("degrade", self.degrade, 0.0, 1.0)
        require(self.resolution > 1, "resolution", self.resolution, "a ratio above 1")
        at_least("error_rate", self.error_rate, 0.0, 1.0)
        require(0 < self.precision < 1, "precision", self.precision, "a share in (0, 1)")
        at_least("min_batches", self.min_batches, 2)
        require(self.max_batches >= self.min_batches, "max_batches", self.max_batches, "at least min_batches")
        require(0 < self.share <= 1, "share", self.share, "a share in (0, 1]")


def make_semaphore(settings: SemaphoreSettings) -> ConcurrencyStrategy:
    from gymbench.builtin.semaphore import SemaphoreStrategy

    return SemaphoreStrategy(settings.num_samples_in_parallel)


def make_adaptive(settings: AdaptiveSettings) -> ConcurrencyStrategy:
    from gymbench.builtin.adaptive import AdaptiveStrategy
    from gymbench.knee_search import SearchSettings
    from gymbench.rates import Precision

    search = SearchSettings(
        start=settings.start,
        factor=settings.factor,
        max_parallelism=settings.max_limit,
        plateau_gain=settings.plateau_gain,
        degrade=settings.degrade,
        error_rate=settings.error_rate,
        resolution=settings.resolution,
        share=settings.share,
        fine_growth=True,
    )
    precision = Precision(settings.precision, settings.min_batches, settings.max_batches)
    return AdaptiveStrategy(search, precision, settings.stop_when_converged)


@hookimpl
def gymbench_register_strategies() -> list[Component]:
    return [
        Component(
            "semaphore",
            make_semaphore,
            "at most num_samples_in_parallel rollouts at once (unset: unbounded, as NeMo Gym)",
            settings=SemaphoreSettings,
        ),
        Component(
            "adaptive",
            make_adaptive,
            "finds the knee of the throughput curve during the run and settles there (gymbench tune +method=adaptive)",
            settings=AdaptiveSettings,
        ),
    ]
