"""Settings of ``gymbench tune`` and ``gymbench diagnose``: the server settings plus the search's."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gymbench.collect.config import ServerConfig
from gymbench.settings import at_least, doc, one_of, require, with_defaults
from gymbench.tune.search_settings import PrecisionSettings, SearchSettings, SweepSettings

METHODS = ("sweep", "adaptive")


@dataclass
class ProbeConfig(ServerConfig, PrecisionSettings):
    """What every probe of the task sample needs."""

    sample_size: int = field(default=200, metadata=doc("tasks in the sample every probe cycles through"))
    server_counters: bool = field(
        default=True, metadata=doc("read throughput from the server's /metrics token counter when it serves one")
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("sample_size", self.sample_size, 1)


@dataclass
class TuneConfig(ProbeConfig, SweepSettings):
    method: str = field(default="sweep", metadata=doc("sweep (NeMo Gym's doubling sweep) or adaptive"))
    stability_rollouts: int = field(default=0, metadata=doc("after tuning, a run this long at the recommendation"))
    plot: str | None = field(default="tune.png", metadata=doc("PNG plot path (empty: no plot)"))
    slo_p50_ms: float | None = field(
        default=None,
        metadata=doc("latency objective: recommend at most the largest level measured with p50 latency within this"),
    )
    time_budget_s: float = field(
        default=290.0,
        metadata=doc("seconds the search may take (0: no limit); near it, stop and answer from the levels measured"),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        one_of("method", self.method, METHODS)
        at_least("stability_rollouts", self.stability_rollouts, 0)
        at_least("time_budget_s", self.time_budget_s, 0.0)
        if self.slo_p50_ms is not None:
            require(math.isfinite(self.slo_p50_ms) and self.slo_p50_ms > 0, "slo_p50_ms", self.slo_p50_ms,
                    "a finite number of milliseconds above 0")  # fmt: skip

    def search_settings(self) -> SearchSettings:
        """The knee search's settings: those of the sweep given here, the rest the search's own."""
        return SearchSettings(**{name: getattr(self, name) for name in SweepSettings.__dataclass_fields__})


@dataclass
class DiagnoseConfig(ProbeConfig):
    low: int = field(default=5, metadata=doc("the low parallelism"))
    high: int = field(default=20, metadata=doc("the high parallelism"))

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("low", self.low, 1)
        require(self.high > self.low, "high", self.high, f"above low ({self.low})")


TuneConfig = with_defaults(TuneConfig, run_name="tune")  # type: ignore[misc]
DiagnoseConfig = with_defaults(DiagnoseConfig, run_name="diagnose")  # type: ignore[misc]
