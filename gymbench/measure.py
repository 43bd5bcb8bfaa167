"""Running a measured case: warm-up, rounds until enough time and samples, per-call timings.

Shared by the pytest fixture and the test kit so that a benchmark measures the same way wherever
it runs. Sync and async callables are both measured; for async ones the timing brackets the
``await`` on the running loop, which is what pytest-benchmark cannot do (its issue #66).

Two other drivers take the same benchmark code: an :class:`InstructionCounter` (the session runs
under callgrind and counts instructions instead of timing) and a :class:`RoundPacer` (the
interleaved A/B runner decides when each round runs and how many calls it makes).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from gymbench.errors import GymbenchError
from gymbench.record import BenchmarkResult, Metric
from gymbench.threads import THREADS_EXTRA, ThreadWatch, lifted, settle
from gymbench.types import Direction

T = TypeVar("T")
INSTRUCTIONS_UNIT = "instructions"


def instruction_metric(metric: str) -> str:
    """``instructions`` beside ``time``; ``<metric>_instructions`` beside any other timed metric."""
    return INSTRUCTIONS_UNIT if metric == "time" else f"{metric}_{INSTRUCTIONS_UNIT}"


class InstructionCounter(Protocol):
    """Counts the instructions of a bracket of calls (the gate's callgrind counter,
    :class:`gymbench.gate.callgrind.InstructionCounter`, in its child session)."""

    brackets: int
    """Counted brackets per benchmark."""

    def count(self, calls: Callable[[], None], sample: int = 0) -> int:
        """The instructions ``calls()`` took."""


PROBE_CPU_S = 0.03
PROBE_WALL_S = 1.0


class RoundPacer(Protocol):
    """Runs the measured rounds on someone else's schedule (the A/B runner's worker process)."""

    def next_round(self, metric: str, iterations: int) -> int | None:
        """Block until the next round may run; its number of calls, or ``None`` when done."""

    def round_done(self, wall_s: float, cpu_s: float) -> None:
        """The round just timed: wall and CPU seconds per call."""


class MeasureSettingsError(GymbenchError, ValueError):
    """A measurement setting out of range (a ``ValueError`` too, as it always was)."""


@dataclass(frozen=True)
class MeasureSettings:
    warmup_rounds: int = 1
    min_rounds: int = field(default=5, metadata={"help": "minimum measured rounds per case"})
    max_rounds: int = 10_000
    min_time_s: float = 0.5
    max_time_s: float = field(default=5.0, metadata={"help": "seconds per case, at most"})
    quick: bool = field(
        default=False,
        metadata={"help": "run every benchmark briefly: proves they run, figures are not comparable"},
    )

    def __post_init__(self) -> None:
        if self.min_rounds < 1 or self.max_rounds < self.min_rounds:
            raise MeasureSettingsError(
                f"need 1 <= min_rounds <= max_rounds, got {self.min_rounds} and {self.max_rounds}"
            )

    @classmethod
    def quick_mode(cls) -> MeasureSettings:
        """Enough to prove a benchmark still runs, not enough to compare figures."""
        return cls(warmup_rounds=0, min_rounds=2, max_rounds=3, min_time_s=0.0, max_time_s=0.5, quick=True)

    def keep_going(self, rounds_done: int, elapsed_s: float) -> bool:
        if rounds_done >= self.max_rounds:
            return False
        if rounds_done < self.min_rounds:
            return True
        return elapsed_s < self.min_time_s and elapsed_s < self.max_time_s


def measure_settings(quick: bool = False, **given: Any) -> MeasureSettings:
    """The defaults (or quick mode's) ← the values ``given`` (``None``: not given), built and checked
    as every settings object is (:func:`gymbench.settings.build_settings`)."""
    from gymbench.settings import build_settings, settings_dict

    base = MeasureSettings.quick_mode() if quick else MeasureSettings()
    return build_settings(MeasureSettings, (), settings_dict(base), {k: v for k, v in given.items() if v is not None})


class Recorder:
    """Collects the metrics of one benchmark case."""

    def __init__(
        self,
        settings: MeasureSettings | None = None,
        *,
        counter: InstructionCounter | None = None,
        pacer: RoundPacer | None = None,
    ) -> None:
        self.settings = settings or MeasureSettings()
        self.metrics: dict[str, Metric] = {}
        self.extra: dict[str, Any] = {}
        self.counter = counter
        self.pacer = pacer
        self.measured_sync = False
        """Whether :meth:`measure` ran: its calls can be counted under callgrind, ``ameasure``'s cannot."""
        self.measured_async = False
        """Whether :meth:`ameasure` ran: said in every verdict on counts (not counted: asyncio)."""

    @property
    def quick(self) -> bool:
        """Benchmarks may shrink their workload when this is set (CI's quick mode)."""
        return self.settings.quick

    def record(
        self,
        name: str,
        value: float | Iterable[float],
        unit: str,
        direction: Direction,
    ) -> Metric:
        """Record a metric the benchmark computed itself (a throughput, a memory peak ...)."""
        if direction not in ("higher", "lower"):
            raise ValueError(f"direction must be 'higher' or 'lower', got {direction!r}")
        samples = [value] if isinstance(value, (int, float)) else list(value)
        metric = Metric.from_samples(samples, unit=unit, direction=direction)
        self.metrics[name] = metric
        return metric

    def measure(self, fn: Callable[..., T], *args: Any, metric: str = "time", iterations: int = 1, **kwargs: Any) -> T:
        """Call ``fn`` repeatedly; record seconds per call (wall and CPU). Returns the last result.

        Under callgrind (a ``counter``) the calls are counted instead: ``instructions`` per call.
        """
        self.measured_sync = True
        if self.counter is not None:
            return self._count(fn, args, kwargs, metric, iterations)
        for calls in self._rounds(metric, iterations):
            for _ in range(calls):
                result = fn(*args, **kwargs)
        return result

    async def ameasure(
        self,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        metric: str = "time",
        iterations: int = 1,
        **kwargs: Any,
    ) -> T:
        """The ``async`` twin of :meth:`measure`: awaits ``fn(*args, **kwargs)`` each call.

        Awaited calls cannot be counted (the loop runs between them), so under callgrind this
        only makes one call and records nothing.
        """
        self.measured_async = True
        if self.counter is not None:
            return await fn(*args, **kwargs)
        for calls in self._rounds(metric, iterations):
            for _ in range(calls):
                result = await fn(*args, **kwargs)
        return result

    def _rounds(self, metric: str, iterations: int) -> Iterator[int]:
        """Yield how many calls to make per round; the time between yields is the round's time.

        Warm-up rounds come first and are not recorded. A generator keeps the sync and async
        loops identical apart from the ``await``.
        """
        if iterations < 1:
            raise ValueError(f"iterations must be at least 1, got {iterations}")
        for _ in range(self.settings.warmup_rounds):
            yield 1
        if self.pacer is not None:
            yield from self._thread_probe(iterations)
        walls: list[float] = []
        cpus: list[float] = []
        started = time.perf_counter()
        if self.pacer is None:
            settle()  # a previous benchmark's BLAS pool stops spinning first
        with ThreadWatch() as watch:
            while (calls := self._next_round(metric, iterations, len(walls), started)) is not None:
                wall0, cpu0 = time.perf_counter(), time.process_time()
                yield calls
                walls.append((time.perf_counter() - wall0) / calls)
                cpus.append((time.process_time() - cpu0) / calls)
                if self.pacer is not None:
                    self.pacer.round_done(walls[-1], cpus[-1])
        if watch.helpers and self.pacer is None:
            self.extra[THREADS_EXTRA] = max(watch.helpers, int(self.extra.get(THREADS_EXTRA, 0)))
        if walls:
            self._store_times(metric, walls, cpus)

    def _thread_probe(self, iterations: int) -> Iterator[int]:
        """Calls with the BLAS/OpenMP limits lifted, before an A/B worker's rounds: does it use threads?

        The worker was started with one thread forced, as its rounds must be, so only a probe
        with the limit lifted shows a pool; about 30 ms of CPU (at most 1 s of wall) is enough
        to see one. What it finds goes to the runner (``threads_seen``), once per measurement.
        """
        with lifted():
            settle()  # threads the lifted limit started spin before their first job
            with ThreadWatch() as watch:
                started, cpu0 = time.perf_counter(), time.process_time()
                while time.process_time() - cpu0 < PROBE_CPU_S and time.perf_counter() - started < PROBE_WALL_S:
                    yield iterations
        settle()  # the pool this opened stops spinning before the pinned rounds start
        seen = getattr(self.pacer, "threads_seen", None)
        if seen is not None:
            seen(watch.helpers)

    def _next_round(self, metric: str, iterations: int, rounds_done: int, started: float) -> int | None:
        if self.pacer is not None:
            return self.pacer.next_round(metric, iterations)
        return iterations if self.settings.keep_going(rounds_done, time.perf_counter() - started) else None

    def _store_times(self, metric: str, walls: list[float], cpus: list[float]) -> None:
        self.record(metric, walls, unit="s", direction="lower")
        self.record(f"{metric}_cpu", cpus, unit="s", direction="lower")

    def _count(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any], metric: str,
               iterations: int) -> T:  # fmt: skip
        """A warm-up call (first-call set-up is not the code's cost), then counted brackets."""
        assert self.counter is not None
        if iterations < 1:
            raise ValueError(f"iterations must be at least 1, got {iterations}")
        last = [fn(*args, **kwargs)]

        def calls() -> None:
            for _ in range(iterations):
                last[0] = fn(*args, **kwargs)

        counts = [self.counter.count(calls, sample) / iterations for sample in range(self.counter.brackets)]
        self.record(instruction_metric(metric), counts, unit=INSTRUCTIONS_UNIT, direction="lower")
        return last[0]

    def result(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        group: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> BenchmarkResult:
        return BenchmarkResult(
            name=name,
            params=dict(params or {}),
            metrics=dict(self.metrics),
            group=group,
            options=dict(options or {}),
            extra=dict(self.extra),
        )
