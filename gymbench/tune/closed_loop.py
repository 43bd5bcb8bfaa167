"""The pieces of a closed loop over a task sample: endless passes, counted slots, a watcher.

A probe keeps exactly ``p`` rollouts in flight for as long as it measures, so its input must not
run dry: :class:`SampleCycle` yields the sample's tasks pass after pass (each pass's rollouts are
new requests; the simulator and real servers sample a fresh output for each). The slots are
counted (:class:`CountedSlots`) for the occupancy integral that Little's law needs, and a
watcher measures the event loop's lag, the process's CPU and, when readable, the server's counters.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gymbench.engine_metrics import Counters
from gymbench.rollout.dataset import Task, TaskSlice, read_tasks
from gymbench.types import ConcurrencyStrategy, RequestOutcome, StopDispatch

LAG_TICK_S = 0.02
POLL_SEED = 20_250_612


class SampleCycle:
    """The first ``size`` tasks of ``path``, read once, yielded in passes until ``limit`` rollouts."""

    def __init__(self, path: Path, size: int, limit: int | None = None) -> None:
        self.rows = list(read_tasks(path, TaskSlice(limit=size)))
        self.limit = limit

    def __iter__(self) -> Iterator[Task]:
        handed = 0
        passes = 0
        while self.rows and (self.limit is None or handed < self.limit):
            for task in self.rows:
                if self.limit is not None and handed >= self.limit:
                    return
                yield Task(task.task_index, passes, task.row)
                handed += 1
            passes += 1

    def close(self) -> None:
        """Nothing to close: the sample was read whole."""


class _CountedSlot:
    def __init__(self, owner: CountedSlots) -> None:
        self.owner = owner
        self.inner = owner.strategy.slot()
        self.index = -1

    async def __aenter__(self) -> None:
        await self.inner.__aenter__()
        self.index = self.owner.taken(id(self))

    async def __aexit__(self, *exc_info: Any) -> None:
        self.owner.freed(id(self), self.index)
        await self.inner.__aexit__(*exc_info)


class CountedSlots:
    """A strategy whose slots are counted: ∫ rollouts in flight dt (the mean occupancy), and the
    order in which rollouts took them (:class:`FairSample`)."""

    def __init__(self, strategy: ConcurrencyStrategy, clock: Callable[[], float]) -> None:
        self.strategy = strategy
        self.clock = clock
        self.in_flight = 0
        self.dispatched = 0
        self.held: dict[int, int] = {}
        """Dispatch index of each slot now held."""
        self.on_freed: Callable[[int], None] | None = None
        self.closed = False
        """Measuring is done: no new rollout is dispatched (a rollout that fails at once would
        otherwise be replaced at once, forever, without a simulated clock ever moving)."""
        self._area = 0.0
        self._changed = clock()

    @property
    def limit(self) -> int | None:
        return self.strategy.limit

    def slot(self) -> AbstractAsyncContextManager[None]:
        if self.closed:
            raise StopDispatch
        return _CountedSlot(self)

    def observe(self, outcome: RequestOutcome) -> None:
        self.strategy.observe(outcome)

    def taken(self, key: int) -> int:
        self._count(+1)
        index = self.dispatched
        self.dispatched += 1
        self.held[key] = index
        return index

    def freed(self, key: int, index: int) -> None:
        self._count(-1)
        self.held.pop(key, None)
        if self.on_freed is not None:
            self.on_freed(index)

    def _count(self, delta: int) -> None:
        now = self.clock()
        self._area += self.in_flight * (now - self._changed)
        self._changed = now
        self.in_flight += delta

    def area(self) -> float:
        return self._area + self.in_flight * (self.clock() - self._changed)


class FairSample:
    """Work per rollout from the first ``cut`` rollouts dispatched, once every one has landed.

    A request's output length is drawn when it is sent, so the first ``cut`` dispatched are a fair
    sample of the workload. The rollouts *completed* in a window are not after a cold start (the
    short ones land first), nor are those *started* before a time (each slot's rollout spanning
    that time is length-biased: the inspection paradox), nor all that landed before a stop (the
    long ones are still out). When the measuring is done the cut is set at all but the last four
    turnovers' dispatches (at least half of them), dispatching stops (a length is drawn at
    dispatch, so the load after the cut cannot change the sample), and the run waits until every
    rollout before the cut has landed (a long one may take a while).
    """

    def __init__(self, slots: CountedSlots) -> None:
        self.slots = slots
        self.cut: int | None = None
        self.when_complete: Callable[[], None] = lambda: None
        self._results: dict[object, tuple[float, bool]] = {}
        self._below: list[tuple[int, float, bool]] = []
        slots.on_freed = self._freed

    def landed(self, work: float, ok: bool) -> None:
        """Called from the rollout's own task before it frees its slot."""
        self._results[asyncio.current_task()] = (work, ok)

    def _freed(self, index: int) -> None:
        work, ok = self._results.pop(asyncio.current_task(), (0.0, False))
        self._below.append((index, work, ok))
        if self.complete():
            self.when_complete()

    def close(self) -> None:
        """Measuring is done: cut, and wait for the rollouts before the cut."""
        if self.cut is None:
            dispatched = self.slots.dispatched
            self.cut = max(1, dispatched // 2, dispatched - 4 * self.slots.in_flight)
        self.slots.closed = True
        if self.complete():
            self.when_complete()

    def complete(self) -> bool:
        """Cut, and no rollout dispatched before the cut is still out."""
        if self.cut is None:
            return False
        cut = self.cut
        return all(index >= cut for index in self.slots.held.values())

    def totals(self) -> tuple[float, float, int]:
        """Σ work, Σ work², successes of the rollouts before the cut."""
        cut = self.cut if self.cut is not None else self.slots.dispatched
        chosen = [(work, ok) for index, work, ok in self._below if index < cut]
        return sum(w for w, _ in chosen), sum(w * w for w, ok in chosen if ok), sum(ok for _, ok in chosen)


@dataclass
class Watch:
    """What the watcher saw while a loop ran."""

    lags: list[float] = field(default_factory=list)
    waiting: list[float] = field(default_factory=list)
    tokens: list[tuple[float, float]] = field(default_factory=list)
    """(time, the server's cumulative generated tokens)."""
    running: list[tuple[float, float]] = field(default_factory=list)
    """(time, requests the server was running), at the polls."""
    cpu_s: float = 0.0


async def watch(seen: Watch, clock: Callable[[], float], counters: Counters | None, poll_s: float) -> None:
    """Event-loop lag (how late a short sleep wakes) and, about every ``poll_s``, the server's counters.

    The polls come at random intervals (0.5-1.5 × ``poll_s``, from a fixed seed): at a fixed
    period they would lock onto the engine's own step period, and every batch would miss the
    same part of a step.
    """
    loop = asyncio.get_running_loop()
    cpu0 = time.process_time()
    jitter = random.Random(POLL_SEED)
    next_poll = clock()
    try:
        while True:
            if counters is not None and clock() >= next_poll:
                next_poll += poll_s * jitter.uniform(0.5, 1.5)
                reading = await asyncio.to_thread(counters.read)
                if reading is not None:
                    if reading.waiting is not None:
                        seen.waiting.append(reading.waiting)
                    if reading.generation_tokens is not None:
                        seen.tokens.append((clock(), reading.generation_tokens))
                    if reading.running is not None:
                        seen.running.append((clock(), reading.running))
            before = loop.time()
            await asyncio.sleep(LAG_TICK_S)
            seen.lags.append(max(0.0, loop.time() - before - LAG_TICK_S))
    finally:
        seen.cpu_s = time.process_time() - cpu0
