"""Open-loop arrivals: requests go out on a schedule, whether or not earlier ones have answered.

RL collection is closed-loop (a fixed number in flight), but a serving question ("what p99 at 20
req/s?") is open-loop: the arrivals do not slow down when the server does, so a slow server shows
as latency, and one too slow for the rate shows as a queue that grows. Schedules: ``constant``
(every 1/rate s), ``poisson`` (exponential gaps), ``gamma`` (gamma gaps of mean 1/rate; a shape
below 1 is burstier than Poisson, above 1 more regular) and ``trace`` (the times in a file).

A slot is taken at the scheduled time; a rollout's ``slot_wait`` is how late it went out against
its schedule (the client's delay or the ``max_in_flight`` cap), so a late send is counted, not
hidden. Over-saturation ends the run cleanly: when, in ``saturation_windows`` windows in a row of
``saturation_window_s`` each, fewer requests were answered than arrived by more than
``saturation_tolerance``, the queue is growing without bound and further arrivals measure only
the queue.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from gymbench.builtin.strategy_settings import ArrivalSettings
from gymbench.errors import GymbenchError
from gymbench.types import RequestOutcome, StopDispatch


def constant_gaps(rate: float) -> Iterator[float]:
    while True:
        yield 1.0 / rate


def gamma_gaps(rate: float, shape: float, seed: int) -> Iterator[float]:
    """Gamma gaps of mean ``1/rate``; shape 1 is Poisson's exponential gaps."""
    rng = np.random.default_rng(seed)
    scale = 1.0 / (rate * shape)
    while True:
        yield from rng.gamma(shape, scale, 1024).tolist()


TRACE_MAX_S = 7 * 24 * 3600.0
"""The latest arrival a trace may ask for: a week. A first arrival at 1e308 s was accepted and the
run sat silent; times in milliseconds given as seconds land here too."""


def read_trace(path: Path, time_scale: float = 1.0) -> list[float]:
    """Arrival times in seconds from the start, from a file with one per line: a number of seconds,
    or a JSON object with ``timestamp_s`` (seconds) or ``timestamp`` (milliseconds, as AIPerf's
    fixed schedules have it). Times must not go backwards (a repeated time is simultaneous arrivals);
    the first arrival is at its own time."""
    from gymbench.jsonio import read_capped

    try:  # capped, a device refused, a FIFO with a deadline: as every file gymbench reads whole
        lines = read_capped(path, "trace").decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise GymbenchError(f"cannot read the trace file {path}: {exc}") from None
    times: list[float] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        at = _trace_time(line)
        if at is None or not math.isfinite(at) or at < 0 or (times and at * time_scale < times[-1]):
            raise GymbenchError(
                f"{path}:{number}: expected an arrival time in seconds (a number, or a JSON object with "
                f"timestamp_s, or timestamp in milliseconds), at least 0 and not before the line above; "
                f"got {line.strip()[:80]!r}"
            )
        if at * time_scale > TRACE_MAX_S:
            raise GymbenchError(
                f"{path}:{number}: an arrival {at * time_scale:g} s after the start, more than a week "
                f"({TRACE_MAX_S:g} s); are the times in milliseconds? Give them as timestamp (ms) or scale them "
                "with trace_time_scale"
            )
        times.append(at * time_scale)
    if not times:
        raise GymbenchError(f"{path}: the trace has no arrival times; give one per line (seconds from the start)")
    return times


def _trace_time(line: str) -> float | None:
    try:
        value: Any = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: a line of 100,000 '[' nests past the parser
        return None
    if isinstance(value, dict):
        if isinstance(value.get("timestamp_s"), (int, float)):
            value = value["timestamp_s"]
        elif isinstance(value.get("timestamp"), (int, float)):
            value = value["timestamp"] / 1e3
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def trace_gaps(times: list[float]) -> Iterator[float]:
    previous = 0.0
    for at in times:
        yield at - previous
        previous = at


class ArrivalSlot:
    """Entered at its scheduled time (or as soon after as the ``max_in_flight`` cap allows)."""

    __slots__ = ("strategy", "late_s")

    def __init__(self, strategy: ArrivalStrategy) -> None:
        self.strategy = strategy
        self.late_s = 0.0

    async def __aenter__(self) -> None:
        self.late_s = await self.strategy.arrive()

    async def __aexit__(self, *exc_info: object) -> None:
        self.strategy.leave()


class ArrivalStrategy:
    """Dispatches on a schedule of gaps; see the module's docstring."""

    open_loop = True
    """Sends whatever is in flight (:func:`gymbench.types.is_open_loop`): tune and diagnose refuse it."""

    def __init__(
        self,
        gaps: Iterator[float],
        shape: str,
        target_per_s: float | None,
        settings: ArrivalSettings | None = None,
    ) -> None:
        cfg = settings if settings is not None else ArrivalSettings()
        self.gaps = gaps
        self.shape = shape
        self.target_per_s = target_per_s
        self._cap = asyncio.Semaphore(cfg.max_in_flight) if cfg.max_in_flight else None
        self.window_s = cfg.saturation_window_s
        self.windows = cfg.saturation_windows
        self.tolerance = cfg.saturation_tolerance
        self.start: float | None = None
        self.next_at = 0.0
        self.sent = 0
        self.answered = 0
        self.in_flight = 0
        self.first_sent: float | None = None
        self.last_sent: float | None = None
        self.lateness: list[float] = []
        self._window_start = 0.0
        self._window_counts = (0, 0)
        self._growing = 0

    @property
    def limit(self) -> int | None:
        return None

    def slot(self) -> ArrivalSlot:
        return ArrivalSlot(self)

    async def arrive(self) -> float:
        loop = asyncio.get_running_loop()
        if self.start is None:
            self.start = loop.time()
        try:
            gap = next(self.gaps)
        except StopIteration:
            raise StopDispatch(f"the trace's {self.sent} arrivals were all sent") from None
        self.next_at += gap
        due = self.start + self.next_at
        wait = due - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        if self._cap is not None:
            await self._cap.acquire()
        now = loop.time()
        self._judge_saturation(now)
        self.sent += 1
        self.in_flight += 1
        self.first_sent = now if self.first_sent is None else self.first_sent
        self.last_sent = now
        late = max(0.0, now - due)
        self.lateness.append(late)
        return late

    def leave(self) -> None:
        self.in_flight -= 1
        if self._cap is not None:
            self._cap.release()

    def observe(self, outcome: RequestOutcome) -> None:
        self.answered += 1

    def _judge_saturation(self, now: float) -> None:
        """At each window's end: did fewer answers come back than arrivals went out?"""
        assert self.start is not None
        if now - self.start - self._window_start < self.window_s:
            return
        sent, answered = self.sent - self._window_counts[0], self.answered - self._window_counts[1]
        self._window_start = now - self.start
        self._window_counts = (self.sent, self.answered)
        growing = sent > 0 and answered < (1 - self.tolerance) * sent
        self._growing = self._growing + 1 if growing else 0
        if self._growing >= self.windows:
            raise StopDispatch(
                f"over-saturated: in {self.windows} windows of {self.window_s:g} s in a row fewer requests were "
                f"answered than arrived (last: {answered} answered, {sent} sent; {self.in_flight} in flight): the "
                "queue grows without bound, so further arrivals would measure the queue. Lower the rate"
            )

    def arrival_summary(self) -> dict[str, object]:
        achieved = None
        if self.sent > 1 and self.first_sent is not None and self.last_sent is not None:
            span = self.last_sent - self.first_sent
            achieved = (self.sent - 1) / span if span > 0 else None
        late = np.percentile(self.lateness, [50, 99]).tolist() if self.lateness else [None, None]
        return {
            "shape": self.shape,
            "target_per_s": self.target_per_s,
            "achieved_per_s": achieved,
            "achieved_share": achieved / self.target_per_s if achieved and self.target_per_s else None,
            "sent": self.sent,
            "answered": self.answered,
            "late_p50_s": late[0],
            "late_p99_s": late[1],
        }
