"""The built-in concurrency strategies' settings, each declared once.

``num_samples_in_parallel`` (:class:`Parallelism`) is NeMo Gym's name, offered by ``gymbench
collect`` and taken by the ``semaphore`` strategy. The ``adaptive`` strategy is tune's
(:mod:`gymbench.tune.adaptive`, its settings in :mod:`gymbench.tune.search_settings`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from gymbench.settings import Checked, at_least, doc, require


@dataclass
class Parallelism(Checked):
    num_samples_in_parallel: int | None = field(
        default=None,
        metadata=doc(
            "rollouts at once, at most (unset: unbounded, as NeMo Gym)",
            run_neutral=True,
            flags=("--concurrency", "--num-samples-in-parallel"),
            metavar="N",
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("num_samples_in_parallel", self.num_samples_in_parallel, 1)


@dataclass
class SemaphoreSettings(Parallelism):
    """The ``semaphore`` strategy's settings: the limit alone."""


RATE_RANGE = (1e-3, 1e6)
"""Arrivals per second that make sense for one process: one every 1,000 s at the least (a rate of
1e-308 was accepted and the run sat silent for ever), a million a second at the most."""
SCALE_RANGE = (1e-3, 1e3)
"""A trace's time scale and a gamma shape: three orders of magnitude either way of 1."""
WINDOW_S_MAX = 3600.0


def _within(name: str, value: float, bounds: tuple[float, float], what: str) -> None:
    low, high = bounds
    require(math.isfinite(value) and low <= value <= high, name, value, f"{what} from {low:g} to {high:g}")


OPEN_LOOP_STRATEGIES = ("constant", "poisson", "gamma", "trace")
"""The built-in open-loop strategies: their schedule is one process's, so a sharded run would
multiply the rate by the workers."""


@dataclass
class ArrivalSettings(Checked):
    """What every open-loop strategy takes: a cap on requests in flight and the over-saturation rule."""

    open_loop: ClassVar[bool] = True
    """Tune and diagnose refuse these strategies before their options are checked
    (:func:`gymbench.types.is_open_loop`)."""

    max_in_flight: int | None = field(
        default=None,
        metadata=doc("requests in flight at most (unset: no cap; a capped schedule falls behind, which is recorded)"),
    )
    saturation_window_s: float = field(
        default=5.0, metadata=doc("over-saturation: the window in which arrivals and answers are compared")
    )
    saturation_windows: int = field(
        default=3, metadata=doc("over-saturation: windows in a row with the queue growing before the run ends")
    )
    saturation_tolerance: float = field(
        default=0.1, metadata=doc("over-saturation: answers below (1 - this) x arrivals in a window count as growing")
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("max_in_flight", self.max_in_flight, 1)
        window = self.saturation_window_s
        require(math.isfinite(window) and 0 < window <= WINDOW_S_MAX, "saturation_window_s", window,
                f"seconds above 0, at most {WINDOW_S_MAX:g}")  # fmt: skip
        at_least("saturation_windows", self.saturation_windows, 1)
        tolerance = self.saturation_tolerance
        require(0 <= tolerance < 1, "saturation_tolerance", tolerance, "a share from 0 up to (not including) 1")


@dataclass
class RateSettings(ArrivalSettings):
    """An arrival rate; ``poisson`` and ``gamma`` draw their gaps from a seeded generator."""

    request_rate: float = field(default=0.0, metadata=doc("arrivals per second (required, above 0)"))
    arrival_seed: int = field(default=0, metadata=doc("seed of the random gaps (poisson, gamma)"))

    def __post_init__(self) -> None:
        super().__post_init__()
        _within("request_rate", self.request_rate, RATE_RANGE, "arrivals per second (e.g. 20)")


@dataclass
class GammaSettings(RateSettings):
    gamma_shape: float = field(
        default=1.0, metadata=doc("shape of the gamma gaps: below 1 burstier than Poisson, 1 Poisson, above 1 steadier")
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        _within("gamma_shape", self.gamma_shape, SCALE_RANGE, "a shape (1: Poisson)")


@dataclass
class TraceSettings(ArrivalSettings):
    trace_file: str = field(
        default="",
        metadata=doc("arrival times, one a line: seconds, or JSON with timestamp_s (or timestamp in ms)", path=True),
    )
    trace_time_scale: float = field(
        default=1.0, metadata=doc("multiply the trace's times by this (0.5: twice as fast)")
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require(bool(self.trace_file), "trace_file", self.trace_file, "the path of a trace file")
        _within("trace_time_scale", self.trace_time_scale, SCALE_RANGE, "a factor")
