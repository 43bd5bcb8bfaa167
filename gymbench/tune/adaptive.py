"""The ``adaptive`` concurrency strategy: find the knee of the throughput curve during the run.

Instead of restarting a collection at 5, 10, 20, 40, 80 (NeMo Gym's doubling sweep), one run
changes its own limit. Each limit is a *level*, measured exactly as a sweep's probe is
(:class:`gymbench.tune.rates.Meter`: half a turnover of warm-up, then until the rate's 95% interval is
tight), and the next limit comes from the same rules as the sweep's
(:class:`gymbench.tune.knee_search.KneeSearch`): grow while throughput grows beyond its noise, stop on a
plateau, on degradation beyond the noise, on errors or on a rate limit, re-measure when a
decision is in doubt, then bisect around the peak and the knee. No collection is restarted, so
no warm-up from an empty server and no drain are paid per level. A level is never left before it
is measured: the search only moves when the level's meter says so.

Once the knee is found the limit settles at the recommendation, and the run stops there when
``stop_when_converged`` (``gymbench tune +method=adaptive``) or goes on collecting.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gymbench.tune.knee_search import KneeSearch, Level, SearchResult, SearchSettings, Step
from gymbench.tune.rates import Completion, Meter, Precision, Rate
from gymbench.types import RequestOutcome, StopDispatch

THROTTLED_SHARE = 0.1
LEVEL_WARMUP = 0.5
"""Turnovers discarded after a change of limit: rollouts from the level before are ignored
anyway, so only the new ones' first landings (the short ones) need dropping."""


class DynamicLimiter:
    """A semaphore whose size can change while it is held, with its occupancy integral."""

    def __init__(self, limit: int, clock: Callable[[], float]) -> None:
        self.limit = limit
        self.in_flight = 0
        self.clock = clock
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._area = 0.0
        self._changed = clock()

    def use_clock(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._changed = clock()

    def occupancy_area(self) -> float:
        """∫ in_flight dt so far: occupancy over any interval is the difference ÷ its length."""
        return self._area + self.in_flight * (self.clock() - self._changed)

    def _count(self, delta: int) -> None:
        now = self.clock()
        self._area += self.in_flight * (now - self._changed)
        self._changed = now
        self.in_flight += delta

    async def acquire(self) -> None:
        if self.in_flight < self.limit and not self._waiters:
            self._count(+1)
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter  # the releaser counted us in

    def release(self) -> None:
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


class _Hold:
    """One rollout's slot: when it was taken, and the outcome reported while it was held."""

    def __init__(self, strategy: AdaptiveStrategy) -> None:
        self.strategy = strategy
        self.start = 0.0

    async def __aenter__(self) -> None:
        await self.strategy.limiter.acquire()
        self.start = self.strategy.clock()
        self.strategy.holding.add(self)

    async def __aexit__(self, *exc_info: object) -> None:
        self.strategy.release(self)


@dataclass
class LevelLog:
    """What one level saw besides its rate: request latencies and tokens of the rollouts measured."""

    parallelism: int
    latencies: list[float] = field(default_factory=list)
    tokens: int = 0
    measured_s: float = 0.0


class AdaptiveStrategy:
    def __init__(
        self,
        search: SearchSettings,
        precision: Precision | None = None,
        stop_when_converged: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock
        """Seconds, monotonic; a test passes a fake one, and :meth:`use_clock` sets the event
        loop's in simulated time."""
        self.search = KneeSearch(search)
        self.precision = precision or Precision()
        self.stop_when_converged = stop_when_converged
        self.converged = False
        self.outcome: SearchResult | None = None
        self.logs: dict[int, LevelLog] = {}
        self.unit: str | None = None
        self.counters: list[tuple[float, float]] | None = None
        first = self.search.next_step()
        assert first is not None
        self.limiter = DynamicLimiter(first.parallelism, self.clock)
        self.meter = self._meter(first)
        self._outcomes: dict[asyncio.Task[object] | None, RequestOutcome] = {}
        self._refused = 0
        """429 failures at the current level."""
        self._judged = 0
        self.holding: set[_Hold] = set()
        self._earlier: set[_Hold] = set()
        """Rollouts of the levels before still out."""

    def use_clock(self, clock: Callable[[], float], counters: list[tuple[float, float]] | None = None) -> None:
        """Time from ``clock`` (set before the run starts), and the server's token counter when sampled."""
        self.clock = clock
        self.limiter.use_clock(clock)
        self.meter.since = clock()
        self.counters = counters

    @property
    def limit(self) -> int | None:
        return self.limiter.limit

    def slot(self) -> _Hold:
        if self.converged and self.stop_when_converged:
            raise StopDispatch
        return _Hold(self)

    def observe(self, outcome: RequestOutcome) -> None:
        self._outcomes[asyncio.current_task()] = outcome

    def release(self, hold: _Hold) -> None:
        outcome = self._outcomes.pop(asyncio.current_task(), None)
        area = self.limiter.occupancy_area()
        self.limiter.release()
        self.holding.discard(hold)
        if self.converged or outcome is None:
            return
        if outcome.ok and self.unit is None:
            self.unit = "tokens" if outcome.output_tokens > 0 else "rollouts"
        work = (outcome.output_tokens if self.unit == "tokens" else 1.0) if outcome.ok else 0.0
        throttled = outcome.status == 429 or outcome.retries > 0
        done = Completion(hold.start, self.clock(), float(work), outcome.ok, area, throttled, outcome.rate_limited)
        self._record(done, outcome, hold)
        if self.meter.done() or self._decided():
            self._finish_level()

    def _record(self, done: Completion, outcome: RequestOutcome, hold: _Hold) -> None:
        meter = self.meter
        if hold in self._earlier:
            self._earlier.discard(hold)
            meter.settled = not self._earlier
            return
        meter.add(done)
        self._refused += outcome.rate_limited
        if self.unit == "tokens" and meter.counters is None:
            meter.counters = self.counters
        log = self.logs.setdefault(meter.parallelism, LevelLog(meter.parallelism))
        if meter.window_start is not None and done.ok:
            log.latencies.append(outcome.latency_s)
            log.tokens += outcome.output_tokens

    def _decided(self) -> bool:
        """A growing level may end before its precision once its growth decision is clear."""
        meter = self.meter
        if meter.batches() < meter.precision.min_batches or meter.batches() == self._judged:
            return False
        self._judged = meter.batches()
        rate = meter.estimate()
        return rate is not None and self.search.decisive(self._level(rate))

    def _level(self, rate: Rate) -> Level:
        meter = self.meter
        limited = self._refused > 0 or meter.throttled >= THROTTLED_SHARE * meter.completions
        errors = meter.failures / max(1, meter.completions)
        return Level(meter.parallelism, rate, errors, limited, rate.relative <= meter.precision.target)

    def _finish_level(self) -> None:
        meter = self.meter
        rate = meter.final()
        log = self.logs[meter.parallelism]
        if meter.window and meter.window_start is not None:
            log.measured_s += meter.window[-1].end - meter.window_start.end
        self.search.record(self._level(rate))
        step = self.search.next_step()
        if step is None:
            self.outcome = self.search.result()
            self.converged = True
            self.limiter.set_limit(self.outcome.recommendation.parallelism)
            return
        self.meter = self._meter(step)
        self._refused = 0
        self._judged = 0
        self._earlier = set(self.holding)
        self.meter.settled = not self._earlier
        self.limiter.set_limit(step.parallelism)

    def _meter(self, step: Step) -> Meter:
        wanted = replace(self.precision, target=self.precision.target * step.precision_scale)
        return Meter(step.parallelism, wanted, since=self.clock(), warmup=LEVEL_WARMUP)
