"""The timing loop: warm-up steps excluded, then per-step wall time, phase times, counts and memory.

The default clock synchronises CUDA at phase boundaries, otherwise a phase would measure only the
time to queue its kernels. On the CPU that is a no-op, so the loop costs a handful of
``perf_counter`` calls per step, which the harness-overhead benchmark compares against a bare torch
loop. On a GPU those synchronisations stall the queue a trainer keeps full, so they inflate the
step; ``cuda_timing=events`` records a CUDA event pair per phase instead and synchronises once per
step (a phase's time is then the GPU's time between its events). ``sync`` stays the default: its
phase times are wall times that add up to the step, and the stored baselines were taken with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psutil
import torch
from tqdm import tqdm

from gymbench.train.packing import StepCount
from gymbench.train.session import TrainSession

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class PhaseClock:
    """Adds each phase's time (a phase may run once per micro-batch) to its total for the step."""

    def __init__(self, session: TrainSession) -> None:
        self.sync = session.synchronize
        self.names = session.phases
        self.totals = dict.fromkeys(self.names, 0.0)

    def start(self) -> None:
        self.totals = dict.fromkeys(self.names, 0.0)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.sync()
        started = time.perf_counter()
        yield
        self.sync()
        self.totals[name] += time.perf_counter() - started

    def mark(self, event: str) -> None:
        return None

    def finish(self) -> None:
        """The step has ended; every phase synchronised already."""
        return None


class EventClock:
    """A CUDA event pair around each phase; one synchronise at the end of the step reads them all."""

    def __init__(self, session: TrainSession, event: Callable[[], Any] | None = None) -> None:
        self.sync = session.synchronize
        self.names = session.phases
        self.event = event or (lambda: torch.cuda.Event(enable_timing=True))
        self.totals = dict.fromkeys(self.names, 0.0)
        self.pending: list[tuple[str, Any, Any]] = []

    def start(self) -> None:
        self.totals = dict.fromkeys(self.names, 0.0)
        self.pending = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        begin = self.event()
        begin.record()
        yield
        end = self.event()
        end.record()
        self.pending.append((name, begin, end))

    def mark(self, event: str) -> None:
        return None

    def finish(self) -> None:
        self.sync()
        for name, begin, end in self.pending:
            self.totals[name] += begin.elapsed_time(end) / 1e3  # milliseconds
        self.pending = []


def step_clock(session: TrainSession) -> PhaseClock | EventClock:
    if session.device.type == "cuda" and session.config.cuda_timing == "events":
        return EventClock(session)
    return PhaseClock(session)


@dataclass
class StepTimings:
    step_s: list[float] = field(default_factory=list)
    phases_s: dict[str, list[float]] = field(default_factory=dict)
    counts: list[StepCount] = field(default_factory=list)
    """What each measured step processed: real tokens, slots with padding, attention pairs."""
    losses: list[float] = field(default_factory=list)
    memory_bytes: list[int] = field(default_factory=list)
    """Memory after each measured step (CUDA allocated, or process RSS): the leak check reads it."""
    memory_source: str = ""

    @property
    def tokens_per_s(self) -> list[float]:
        """Real tokens only: pad slots are work done, not progress made."""
        return [count.tokens / seconds for count, seconds in zip(self.counts, self.step_s, strict=True)]

    @property
    def padding_share(self) -> float:
        slots = sum(count.slots for count in self.counts)
        return 1 - sum(count.tokens for count in self.counts) / slots if slots else 0.0


def memory_now(session: TrainSession) -> tuple[int, str]:
    """Live memory after a step, for the leak check.

    On the CPU, glibc's count of bytes in use where it has one: RSS keeps freed memory that glibc
    has not returned, so with variable-length batches it ratchets up at each new longest batch and
    reads like a leak when nothing leaks.
    """
    if session.device.type == "cuda":
        return int(torch.cuda.memory_allocated(session.device)), "cuda memory_allocated"
    in_use = malloc_in_use()
    if in_use is not None:
        return in_use, "malloc bytes in use (glibc mallinfo2)"
    return process_rss(), "process RSS"


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _load_mallinfo2() -> Any:
    try:
        function = ctypes.CDLL(None).mallinfo2  # glibc 2.33+
    except (OSError, AttributeError):
        return None
    function.restype = _MallInfo2
    return function


_MALLINFO2 = _load_mallinfo2()


def malloc_in_use() -> int | None:
    """Bytes glibc's malloc has handed out and not had back (heap chunks plus mmapped blocks)."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return int(info.uordblks + info.hblkhd)


def process_rss() -> int:
    """Resident set size; ``/proc/self/statm`` directly costs a few µs, psutil's object ~10x that."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * PAGE_SIZE
    except OSError:
        return int(psutil.Process().memory_info().rss)


def run_steps(
    session: TrainSession, *, progress: bool = False, clock: PhaseClock | EventClock | None = None
) -> StepTimings:
    """Run ``warmup`` unmeasured steps, then ``steps`` measured ones."""
    config = session.config
    clock = clock or step_clock(session)
    timings = StepTimings(phases_s={phase: [] for phase in session.phases})
    losses: list[torch.Tensor] = []
    for index in tqdm(range(config.warmup + config.steps), desc="train steps", disable=not progress):
        if index == config.warmup:
            session.precision.scaling.scales.clear()
            session.precision.scaling.skipped_steps = 0
        session.synchronize()
        started = time.perf_counter()
        loss = session.step(clock)
        clock.finish()
        elapsed = time.perf_counter() - started
        if index >= config.warmup:
            keep_step(timings, clock, elapsed, session)
            losses.append(loss)
    timings.losses = [float(loss) for loss in losses]
    return timings


def keep_step(timings: StepTimings, clock: PhaseClock | EventClock, elapsed: float, session: TrainSession) -> None:
    """The per-step bookkeeping (the harness-overhead benchmark times it on its own)."""
    timings.step_s.append(elapsed)
    timings.counts.append(session.last_count)
    for phase, seconds in clock.totals.items():
        timings.phases_s.setdefault(phase, []).append(seconds)
    used, timings.memory_source = memory_now(session)
    timings.memory_bytes.append(used)
