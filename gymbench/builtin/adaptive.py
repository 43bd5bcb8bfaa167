"""The ``adaptive`` concurrency strategy: find the knee of the throughput curve during the run.

Instead of restarting a collection at 5, 10, 20, 40, 80 (the seeds' sweep), one run changes its
own limit: it measures throughput at the current limit over a short window (after letting the new
limit settle for about one request latency), grows the limit while throughput still grows by more
than ``plateau_gain`` (doubling it), then brackets
the knee between the last two limits and bisects in log space until the bracket is narrower than
``resolution``. No run is restarted, so no ramp-up and drain are paid per probe. The knee is then
estimated from every window measured (:func:`gymbench.curves.find_knee`) and the run continues
at it, or stops (``stop_when_converged``), as the ``tune`` command asks.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from dataclasses import dataclass, field

import numpy as np

from gymbench.curves import KNEE_FRACTION, Knee, find_knee
from gymbench.errors import GymbenchError
from gymbench.types import RequestOutcome, StopDispatch


class DynamicLimiter:
    """A semaphore whose size can change while it is held."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._area = 0.0
        self._changed = time.monotonic()

    def occupancy_area(self) -> float:
        """∫ in_flight dt so far: occupancy over any interval is the difference ÷ its length."""
        now = time.monotonic()
        return self._area + self.in_flight * (now - self._changed)

    def _count(self, delta: int) -> None:
        now = time.monotonic()
        self._area += self.in_flight * (now - self._changed)
        self._changed = now
        self.in_flight += delta

    async def __aenter__(self) -> None:
        if self.in_flight < self.limit and not self._waiters:
            self._count(+1)
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter  # the releaser counted us in

    async def __aexit__(self, *exc_info: object) -> None:
        self._count(-1)
        self._wake()

    def set_limit(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._count(+1)
                waiter.set_result(None)


@dataclass
class Window:
    limit: int
    started: float
    area_at_start: float
    completions: int = 0
    errors: int = 0
    latency_sum: float = 0.0
    marks: list[tuple[float, float, float]] = field(default_factory=list)
    """(time, occupancy area, latency) at each completion."""

    def batch_rates(self, batches: int = 4) -> list[float]:
        """Throughput by Little's law (mean occupancy ÷ mean latency) in equal slices of time.

        Counting completions is biased when they arrive in bursts (an engine finishing a whole
        batch in one step); occupancy and latency use every rollout's whole duration. Slices are
        equal in time, not in completions, so a burst's instant does not weigh like a second.
        """
        times = np.array([self.started] + [mark[0] for mark in self.marks])
        areas = np.array([self.area_at_start] + [mark[1] for mark in self.marks])
        latencies = np.array([mark[2] for mark in self.marks])
        edges = np.linspace(times[0], times[-1], batches + 1)
        rates = []
        for low, high in zip(edges[:-1], edges[1:], strict=True):
            inside = (times[1:] > low) & (times[1:] <= high)
            if high > low and inside.any():
                occupancy = (np.interp(high, times, areas) - np.interp(low, times, areas)) / (high - low)
                rates.append(float(occupancy / latencies[inside].mean()))
        return rates or [self.limit / max(1e-9, float(latencies.mean()) if len(latencies) else 1.0)]


@dataclass
class SearchLog:
    """Every window measured: (limit, throughput samples per sub-window, error rate)."""

    samples: dict[int, list[float]] = field(default_factory=dict)
    errors: dict[int, float] = field(default_factory=dict)
    latency: dict[int, float] = field(default_factory=dict)
    knee: Knee | None = None


class AdaptiveStrategy:
    def __init__(
        self,
        start: int = 4,
        max_limit: int = 4096,
        plateau_gain: float = 0.10,
        resolution: float = 1.2,
        error_rate: float = 0.02,
        min_window: int = 24,
        stop_when_converged: bool = False,
    ) -> None:
        if start < 1 or max_limit < start:
            raise GymbenchError(f"adaptive strategy needs 1 <= start <= max_limit, got {start} and {max_limit}")
        self.limiter = DynamicLimiter(start)
        self.max_limit = max_limit
        self.plateau_gain = plateau_gain
        self.resolution = resolution
        self.error_rate = error_rate
        self.min_window = min_window
        self.stop_when_converged = stop_when_converged
        self.log = SearchLog()
        self.converged = False
        self._settle_until = 0.0
        self._window: Window | None = None
        self._bracket: tuple[int, int] | None = None
        self._latency = 0.0

    @property
    def limit(self) -> int | None:
        return self.limiter.limit

    def slot(self) -> DynamicLimiter:
        if self.converged and self.stop_when_converged:
            raise StopDispatch
        return self.limiter

    def observe(self, outcome: RequestOutcome) -> None:
        if self.converged:
            return
        now = time.monotonic()
        self._latency = outcome.latency_s if not self._latency else 0.8 * self._latency + 0.2 * outcome.latency_s
        if now < self._settle_until or self.limiter.in_flight > self.limiter.limit:
            return  # settling, or still draining down to a lowered limit
        window = self._window
        if window is None or window.limit != self.limiter.limit:
            self._window = Window(self.limiter.limit, now, self.limiter.occupancy_area())
            return
        window.completions += 1
        window.marks.append((now, self.limiter.occupancy_area(), outcome.latency_s))
        window.errors += not outcome.ok
        window.latency_sum += outcome.latency_s
        elapsed = now - window.started
        if window.completions >= max(self.min_window, window.limit) and elapsed >= 1.5 * self._latency:
            self._finish_window(window, elapsed)

    def _finish_window(self, window: Window, elapsed: float) -> None:
        limit = window.limit
        rates = window.batch_rates()
        rate = sum(rates) / len(rates)
        self.log.samples.setdefault(limit, []).extend(rates)
        self.log.errors[limit] = window.errors / window.completions
        self.log.latency[limit] = window.latency_sum / window.completions
        self._move(self._next_limit(limit, rate))

    def _next_limit(self, limit: int, rate: float) -> int | None:
        """The next limit to measure, or None once the knee is bracketed tightly enough."""
        means = {p: sum(v) / len(v) for p, v in self.log.samples.items()}
        overloaded = self.log.errors[limit] > self.error_rate
        if self._bracket is None:
            smaller = [p for p in means if p < limit]
            previous = means[max(smaller)] if smaller else None
            growing = previous is None or rate >= previous * (1 + self.plateau_gain)
            if growing and not overloaded and limit < self.max_limit:
                return min(self.max_limit, limit * 2)
            self._bracket = (1, limit)
        best = max(means.values())
        healthy = [p for p in means if self.log.errors.get(p, 0.0) <= self.error_rate]
        reached = [p for p in healthy if means[p] >= KNEE_FRACTION * best]
        high = min(reached) if reached else limit
        below = [p for p in means if p < high]
        low = max(below) if below else max(1, high // 2)
        self._bracket = (low, high)
        if high / low <= self.resolution or high - low <= 1:
            return None
        return max(low + 1, min(high - 1, round(math.sqrt(low * high))))

    def _move(self, limit: int | None) -> None:
        if limit is None:
            self.log.knee = find_knee(self.log.samples)
            self.converged = True
            self.limiter.set_limit(max(1, round(self.log.knee.parallelism)))
            return
        growth = max(1.0, limit / self.limiter.limit)
        self.limiter.set_limit(limit)
        # Past the knee latency grows with the limit; wait until requests sent at the new limit
        # are the ones completing, or their shorter old latencies inflate the measurement.
        self._settle_until = time.monotonic() + self._latency * growth
        self._window = None
