"""Settings of ``gymbench tune`` and ``gymbench diagnose``: the server settings plus the search's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gymbench.collect.config import ServerConfig
from gymbench.settings import at_least, doc, one_of, require

METHODS = ("sweep", "adaptive")


@dataclass
class ProbeConfig(ServerConfig):
    """What every probe of the task sample needs."""

    strategy: str = field(
        default="semaphore",
        metadata=doc("concurrency strategy probed at each parallelism (it must take num_samples_in_parallel)"),
    )
    strategy_options: dict[str, Any] = field(default_factory=dict, metadata=doc("the strategy's own settings"))
    sample_size: int = field(default=200, metadata=doc("tasks in the sample every probe cycles through"))
    precision: float = field(
        default=0.02, metadata=doc("measure each level until its rate's 95% interval is within this share of it")
    )
    min_batches: int = field(default=6, metadata=doc("turnovers (p rollouts each) a probe measures at least"))
    max_batches: int = field(
        default=40, metadata=doc("turnovers a probe measures at most (then it is marked under-measured)")
    )
    server_counters: bool = field(
        default=True, metadata=doc("read throughput from the server's /metrics token counter when it serves one")
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("sample_size", self.sample_size, 1)
        require(0 < self.precision < 1, "precision", self.precision, "a share in (0, 1)")
        at_least("min_batches", self.min_batches, 2)
        require(self.max_batches >= self.min_batches, "max_batches", self.max_batches, "at least min_batches")


@dataclass
class TuneConfig(ProbeConfig):
    method: str = field(default="sweep", metadata=doc("sweep (NeMo Gym's doubling sweep) or adaptive"))
    start: int = field(default=5, metadata=doc("first parallelism of the sweep"))
    factor: float = field(default=2.0, metadata=doc("sweep multiplier"))
    max_parallelism: int = field(default=1024, metadata=doc("stop the sweep here"))
    plateau_gain: float = field(
        default=0.10, metadata=doc("a gain below this (beyond the noise) is a plateau: stop growing")
    )
    degrade: float = field(
        default=0.05, metadata=doc("a drop below the best by more than this (beyond the noise) is degradation")
    )
    error_rate: float = field(default=0.01, metadata=doc("an error rate above this stops the sweep"))
    resolution: float = field(default=1.1, metadata=doc("bisect until the knee's bracket high/low is within this"))
    reprobes: int = field(default=2, metadata=doc("re-measurements of a level when a decision is in doubt"))
    share: float = field(
        default=0.97,
        metadata=doc("recommend the smallest parallelism expected to give this share of the plateau (0.97: the knee)"),
    )
    stability_rollouts: int = field(default=0, metadata=doc("after tuning, a run this long at the recommendation"))
    plot: str | None = field(default="tune.png", metadata=doc("PNG plot path (empty: no plot)"))
    run_name: str = field(default="tune", metadata=doc("name of the results record"))

    def __post_init__(self) -> None:
        super().__post_init__()
        one_of("method", self.method, METHODS)
        at_least("start", self.start, 1)
        require(self.factor > 1, "factor", self.factor, "a multiplier above 1")
        require(self.max_parallelism >= self.start, "max_parallelism", self.max_parallelism, "at least start")
        require(self.resolution > 1, "resolution", self.resolution, "a ratio above 1")
        at_least("reprobes", self.reprobes, 0)
        require(0 < self.share <= 1, "share", self.share, "a share in (0, 1]")
        at_least("plateau_gain", self.plateau_gain, 0.0)
        at_least("degrade", self.degrade, 0.0, 1.0)
        at_least("error_rate", self.error_rate, 0.0, 1.0)
        at_least("stability_rollouts", self.stability_rollouts, 0)


@dataclass
class DiagnoseConfig(ProbeConfig):
    low: int = field(default=5, metadata=doc("the low parallelism"))
    high: int = field(default=20, metadata=doc("the high parallelism"))
    run_name: str = field(default="diagnose", metadata=doc("name of the results record"))

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("low", self.low, 1)
        require(self.high > self.low, "high", self.high, f"above low ({self.low})")
