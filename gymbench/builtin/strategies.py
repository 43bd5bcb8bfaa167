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
    plateau_gain: float = field(default=0.10, metadata={"help": "a gain below this is a plateau"})
    resolution: float = field(default=1.2, metadata={"help": "stop bisecting when high/low is below this"})
    error_rate: float = field(default=0.02, metadata={"help": "a level with more errors is unhealthy"})
    min_window: int = field(default=24, metadata={"help": "completions per measurement window, at least"})
    stop_when_converged: bool = field(default=False, metadata={"help": "stop the run once the knee is found"})

    def __post_init__(self) -> None:
        at_least("start", self.start, 1)
        require(self.max_limit >= self.start, "max_limit", self.max_limit, f"at least start ({self.start})")
        at_least("plateau_gain", self.plateau_gain, 0.0, 10.0)
        require(self.resolution > 1, "resolution", self.resolution, "a ratio above 1")
        at_least("error_rate", self.error_rate, 0.0, 1.0)
        at_least("min_window", self.min_window, 1)


def make_semaphore(settings: SemaphoreSettings) -> ConcurrencyStrategy:
    from gymbench.builtin.semaphore import SemaphoreStrategy

    return SemaphoreStrategy(settings.num_samples_in_parallel)


def make_adaptive(settings: AdaptiveSettings) -> ConcurrencyStrategy:
    from dataclasses import asdict

    from gymbench.builtin.adaptive import AdaptiveStrategy

    return AdaptiveStrategy(**asdict(settings))


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
