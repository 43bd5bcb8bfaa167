"""One probe: ``p`` rollouts of the task sample kept in flight until their rate is known well enough.

The sample is cycled (:class:`~gymbench.tune.closed_loop.SampleCycle`) so exactly ``p`` stay in
flight for as long as the probe measures; a :class:`~gymbench.tune.rates.Meter` discards the warm-up,
measures the rate in steady state and says when its interval is tight enough; then the probe
stops and the rollouts still in flight are cancelled (no drain, so no drain to bias anything).
Throughput is work per second (output tokens, or successful rollouts when the backend reports no
tokens) ÷ work per rollout, the latter pooled over every probe of the tune: it is a figure of the
workload, not of the parallelism, and pooling it keeps one sample's lengths out of each point.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from gymbench.collect.driver import Collection
from gymbench.engine_metrics import Counters, Settled, settle
from gymbench.rollout.engine import Collector
from gymbench.rollout.stats import CollectStats
from gymbench.tune.closed_loop import CountedSlots, FairSample, SampleCycle, Watch, watch
from gymbench.tune.knee_search import Level
from gymbench.tune.rates import Completion, Meter, Precision, Rate
from gymbench.types import ConcurrencyStrategy, GenerationFailed, JSONObject

THROTTLED_SHARE = 0.1
"""A level where this share of rollouts met 429s (or retries) is read as rate-limited."""


@dataclass
class ProbeResult:
    parallelism: int
    work_rate: Rate
    """Work per second: output tokens (``work_unit == "tokens"``) or successful rollouts."""
    work_unit: str
    per_rollout: float
    """Work per successful rollout, pooled over the tune; rollouts/s = work/s ÷ this."""
    rollouts: int
    error_rate: float
    failure_kinds: dict[str, int]
    throttled: int
    """Rollouts that met a 429 or were retried."""
    latency_p50_s: float | None
    latency_p99_s: float | None
    per_token_p50_s: float | None
    per_token_p99_s: float | None
    """Request latency ÷ (output tokens + 1): what is left of latency once length is divided out."""
    output_tokens_per_s: float
    stage_mean_s: dict[str, float | None]
    client_cpu_cores: float
    loop_lag_p99_s: float
    elapsed_s: float
    server_waiting_max: float | None = None
    latency_per_work_s: float | None = None
    """Request latency per unit of work (Σ latency ÷ Σ work over the rollouts measured): with the
    work rate, how many requests were at the server on average (:attr:`in_server`). Per unit of
    work, since a level's few dozen rollouts of random lengths move a mean latency by 10-15%."""
    server_running: float | None = None
    """Requests the server said it was running, the mean of its gauge's polls inside the measured
    window (None: no such gauge). At a slot-bound server, its busy slots: the same window's own
    reading of how full the server was, which no drift between windows can move."""
    batch_rates: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rate_limit_refusals: int = 0
    """Failures that were a rate limit's 429 ("rate limit" in the answer), not a full queue's."""

    @property
    def rate(self) -> Rate:
        """Rollouts per second with its 95% interval."""
        return self.work_rate.scaled(1 / self.per_rollout) if self.per_rollout > 0 else self.work_rate

    @property
    def rollouts_per_s(self) -> float:
        return self.rate.value

    @property
    def rate_limited(self) -> bool:
        """The server refused for a rate limit, or refused so many (retried into success) that it must be one."""
        if self.rate_limit_refusals:
            return True
        return not self.failure_kinds and self.throttled >= THROTTLED_SHARE * max(1, self.rollouts)

    @property
    def in_server(self) -> float | None:
        """Requests at the server on average (Little's law: work/s × latency per unit of work); the
        rest of :attr:`parallelism` was the clients' own turnaround between an answer and the next
        request. None where no request latency was timed. At most the parallelism: the rate and
        the latencies are two readings of one window, and their noise can put the product above it."""
        if self.latency_per_work_s is None:
            return None
        return min(float(self.parallelism), self.work_rate.value * self.latency_per_work_s)

    def level(self) -> Level:
        return Level(
            self.parallelism,
            self.work_rate,
            self.error_rate,
            self.rate_limited,
            not self.work_rate.under_measured,
            queue=self.server_waiting_max,
            in_server=self.in_server,
            running=self.server_running,
        )

    def row(self) -> JSONObject:
        rate = self.rate
        return {
            "parallelism": self.parallelism,
            "rollouts_per_s": rate.value,
            "rollouts_per_s_ci": [rate.low, rate.high],
            "source": rate.source,
            "output_tokens_per_s": self.output_tokens_per_s,
            "latency_p50_s": self.latency_p50_s,
            "latency_p99_s": self.latency_p99_s,
            "error_rate": self.error_rate,
            "server_running": self.server_running,
            "rollouts": self.rollouts,
            "under_measured": rate.under_measured,
        }


@dataclass
class LoopRun:
    """What one closed-loop run left behind."""

    stats: CollectStats
    seen: Watch
    rate_limit_refusals: int
    latencies: list[tuple[float, float]]
    """(request latency, output tokens) of the rollouts measured."""
    settled: Settled | None = None
    """The wait, before the run, for the server to finish what earlier runs left it (None: no gauges)."""


class Prober:
    """Runs probes on one task sample through a collection in closed-loop mode
    (:meth:`~gymbench.collect.driver.Collection.prepare_probes`, or
    :meth:`~gymbench.collect.driver.Collection.around` a backend the caller built)."""

    def __init__(
        self,
        collection: Collection,
        sample_size: int,
        precision: Precision | None = None,
        counters: Counters | None = None,
        clock: Callable[[], float] = time.perf_counter,
        poll_s: float = 0.25,
    ) -> None:
        self.collection = collection
        self.input_path = collection.settings.input_path
        self.sample_size = sample_size
        self.precision = precision or Precision()
        self.counters = counters
        self.server: dict[str, object] | None = None
        """What was found at the server's /metrics (the engine recognised, or why none), for the record."""
        self.clock = clock
        """Seconds, monotonic, for everything timed; a simulated-time test passes its loop's ``time``."""
        self.poll_s = poll_s
        self.progress: Any = None
        """Optional: ``progress.start(parallelism, None)`` returns the collector's progress callback;
        ``progress.show(text)`` shows the rate so far."""
        self.deadline: float | None = None
        """On :attr:`clock`: a probe still measuring then stops once it has two batches (a tune's time
        budget); None: no deadline."""
        self.unit: str | None = None
        self.pooled_work = 0.0
        self.pooled_squares = 0.0
        self.pooled_successes = 0
        self._shared_server = False

    @property
    def workdir(self) -> Path | None:
        """Where the probes' rollout files go: the collection's scratch, removed when it closes (the
        rates are what a tune keeps)."""
        return self.collection.scratch

    @property
    def per_rollout(self) -> float:
        return self.pooled_work / self.pooled_successes if self.pooled_successes else 1.0

    @property
    def per_rollout_relative_se(self) -> float:
        """Relative standard error of :attr:`per_rollout` (a sample mean of the rollouts' work)."""
        n = self.pooled_successes
        if n < 2 or self.unit != "tokens":
            return 0.0
        mean = self.pooled_work / n
        variance = max(0.0, self.pooled_squares / n - mean * mean) * n / (n - 1)
        return math.sqrt(variance / n) / mean if mean > 0 else 0.0

    async def probe(
        self, parallelism: int, strategy: ConcurrencyStrategy, precision_scale: float = 1.0, rollouts: int | None = None
    ) -> ProbeResult:
        """Measure ``parallelism`` until precise (or exactly ``rollouts`` completions past the warm-up)."""
        wanted = replace(self.precision, target=self.precision.target * precision_scale)
        meter = Meter(parallelism, wanted)
        if rollouts is not None:
            batches = max(2, -(-rollouts // meter.batch_size))
            meter.precision = replace(wanted, min_batches=batches, max_batches=batches)
        run = await self.run(strategy, parallelism, meter.add, lambda: meter.done() or self._out_of_time(meter), meter)
        return self.result(parallelism, meter, run)

    def _out_of_time(self, meter: Meter) -> bool:
        """Past the deadline with enough to give a rate (two batches: an interval)."""
        return self.deadline is not None and self.clock() >= self.deadline and meter.batches() >= 2

    async def run(
        self,
        strategy: ConcurrencyStrategy,
        label: int,
        listen: Callable[[Completion], None],
        stop: Callable[[], bool],
        meter: Meter | None = None,
        budget: int | None = None,
    ) -> LoopRun:
        """Collect from the endless sample under ``strategy`` until ``stop()``; every rollout to ``listen``.

        It starts on an idle server: the rollouts an earlier run cancelled may still be generating
        there (llama.cpp does not abort them), and would slow this run's first batches."""
        settled = await self.settle()
        seen = Watch()
        counted = CountedSlots(strategy, self.clock)
        use_clock = getattr(strategy, "use_clock", None)
        if use_clock is not None:
            use_clock(self.clock, seen.tokens)
        tasks = SampleCycle(self.input_path, self.sample_size, budget)
        collector = self.collection.closed_loop(counted, tasks, f"p{label}", self.clock)
        if self.progress is not None:
            collector.on_progress = self.progress.start(label, None)
        finished = asyncio.Event()
        latencies: list[tuple[float, float]] = []
        reader = _RolloutReader(self, collector, counted)
        collector.on_failure = reader.failed
        fair = FairSample(counted)
        fair.when_complete = finished.set

        def on_rollout(timings: Mapping[str, float]) -> None:
            done = reader.completion(timings)
            fair.landed(done.work, done.ok)
            if fair.cut is None:
                self._measure(done, timings, listen, meter, seen, latencies)
                if stop():
                    fair.close()

        collector.on_rollout = on_rollout
        job = asyncio.ensure_future(collector.run())
        watcher = asyncio.ensure_future(watch(seen, self.clock, self.counters, self.poll_s))
        stopper = asyncio.ensure_future(finished.wait())
        try:
            await asyncio.wait([job, stopper], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pending in (job, stopper, watcher):
                pending.cancel()
            await asyncio.gather(job, stopper, watcher, return_exceptions=True)
        if job.done() and not job.cancelled() and job.exception() is not None:
            raise job.exception()  # type: ignore[misc]
        work, squares, successes = fair.totals()
        self.pooled_work += work
        self.pooled_squares += squares
        self.pooled_successes += successes
        return LoopRun(collector.stats, seen, reader.rate_limit_refusals, latencies, settled)

    async def settle(self) -> Settled | None:
        """Wait for the server to hold no request (by its ``/metrics`` gauges), when they can be read."""
        counters = self.counters
        if counters is None or self._shared_server:
            return None

        async def in_flight() -> float | None:
            return await asyncio.to_thread(counters.in_flight)

        settled = await settle(in_flight, self.clock, poll_s=self.poll_s)
        self._shared_server = bool(settled.left)  # others keep it busy: waiting again would only cost time
        return settled

    def _measure(
        self,
        done: Completion,
        timings: Mapping[str, float],
        listen: Callable[[Completion], None],
        meter: Meter | None,
        seen: Watch,
        latencies: list[tuple[float, float]],
    ) -> None:
        if meter is not None and self.unit == "tokens" and meter.counters is None:
            meter.counters = seen.tokens
        listen(done)
        if meter is not None and meter.window_start is not None and done.ok:
            latencies.append((request_latency(timings, done.end - done.start), done.work))
            self._show(meter)

    def _show(self, meter: Meter) -> None:
        show = getattr(self.progress, "show", None)
        if show is None or len(meter.window) % meter.batch_size:
            return
        rate = meter.estimate()
        if rate is None:
            return
        per = 1.0
        if self.unit == "tokens":  # before any fair sample, the window's own mean will do for a display
            window_mean = sum(c.work for c in meter.window) / max(1, sum(c.ok for c in meter.window))
            per = self.per_rollout if self.pooled_successes else window_mean
        show(f"{rate.value / per:.3g} rollouts/s ±{rate.relative:.1%}")

    def result(self, parallelism: int, meter: Meter, run: LoopRun) -> ProbeResult:
        stats = run.stats
        attempted = stats.completed + stats.failed
        rate = meter.final()
        latency = np.array([lat for lat, _ in run.latencies]) if run.latencies else None
        per_token = np.array([lat / (tokens + 1) for lat, tokens in run.latencies]) if run.latencies else None
        summary = stats.summary()
        tokens_per_s = rate.value if self.unit == "tokens" else summary["output_tokens_per_s"]
        notes = [meter.note] if meter.note else []
        waited = run.settled.note() if run.settled is not None else None
        if waited:
            notes.append(waited)
        if meter.failing():
            notes.append(f"mostly failing ({meter.failures} of {meter.completions}): stopped measuring")
        elif rate.under_measured:
            cut = " (cut by the time budget)" if meter.batches() < meter.precision.max_batches else ""
            notes.append(
                f"under-measured: ±{rate.relative:.1%} after {meter.batches()} batches{cut} "
                f"(target ±{meter.precision.target:.1%})"
            )
        return ProbeResult(
            parallelism=parallelism,
            work_rate=rate,
            work_unit=self.unit or "rollouts",
            per_rollout=self.per_rollout,
            rollouts=attempted,
            error_rate=stats.failed / attempted if attempted else 0.0,
            failure_kinds=dict(stats.failure_kinds),
            throttled=meter.throttled,
            latency_p50_s=_percentile(latency, 50),
            latency_p99_s=_percentile(latency, 99),
            latency_per_work_s=_per_work(run.latencies),
            per_token_p50_s=_percentile(per_token, 50),
            per_token_p99_s=_percentile(per_token, 99),
            output_tokens_per_s=tokens_per_s,
            stage_mean_s=summary["stage_mean_s"],
            client_cpu_cores=run.seen.cpu_s / max(stats.elapsed_s, 1e-9),
            loop_lag_p99_s=float(np.percentile(run.seen.lags, 99)) if run.seen.lags else 0.0,
            elapsed_s=stats.elapsed_s,
            server_waiting_max=max(run.seen.waiting) if run.seen.waiting else None,
            server_running=_in_window(run.seen.running, meter),
            batch_rates=[r / self.per_rollout for r in meter.batch_rates()],
            notes=notes,
            rate_limit_refusals=run.rate_limit_refusals,
        )

    def normalise(self, results: list[ProbeResult]) -> None:
        """Every probe's rollouts/s from the work per rollout pooled over all of them."""
        for result in results:
            result.per_rollout = self.per_rollout


def request_latency(timings: Mapping[str, float], otherwise: float) -> float:
    """The server's answer time: to the first token, then to the last (a streamed backend times
    them apart; one that does not stream reports ``generation`` alone)."""
    if "generation" not in timings:
        return otherwise
    return timings["generation"] + timings.get("ttft", 0.0)


def _per_work(latencies: list[tuple[float, float]]) -> float | None:
    """Σ request latency ÷ Σ work of the rollouts measured (None without either)."""
    work = sum(done for _, done in latencies)
    return sum(latency for latency, _ in latencies) / work if work > 0 else None


def _in_window(polls: list[tuple[float, float]], meter: Meter) -> float | None:
    """The mean of the polls taken while the window was measured (not the warm-up before it, nor
    the drain after it, when the loop no longer dispatches); None without any."""
    if meter.window_start is None or not meter.window:
        return None
    start, end = meter.window_start.end, meter.window[-1].end
    inside = [value for at, value in polls if start <= at <= end]
    return sum(inside) / len(inside) if inside else None


def _percentile(values: np.ndarray | None, q: float) -> float | None:
    return float(np.percentile(values, q)) if values is not None and len(values) else None


class _RolloutReader:
    """Turns the collector's per-rollout callback into a :class:`Completion` (work, ok, throttled)."""

    def __init__(self, prober: Prober, collector: Collector, counted: CountedSlots) -> None:
        self.prober = prober
        self.collector = collector
        self.counted = counted
        self.last = (0, 0, 0, 0)
        self.rate_limit_refusals = 0
        self._refusals_seen = 0

    def failed(self, failure: GenerationFailed) -> None:
        if failure.rate_limit:
            self.rate_limit_refusals += 1

    def completion(self, timings: Mapping[str, float]) -> Completion:
        stats = self.collector.stats
        now = self.prober.clock()
        current = (stats.completed, stats.completion_tokens, stats.retries, stats.failure_kinds.get("rate_limited", 0))
        ok = current[0] > self.last[0]
        tokens = current[1] - self.last[1]
        throttled = current[2] > self.last[2] or current[3] > self.last[3]
        self.last = current
        limited = self.rate_limit_refusals > self._refusals_seen
        self._refusals_seen = self.rate_limit_refusals
        if ok and self.prober.unit is None:
            self.prober.unit = "tokens" if tokens > 0 else "rollouts"
        work = float(tokens) if self.prober.unit == "tokens" else float(ok)
        hold = timings.get("total", 0.0) - timings.get("slot_wait", 0.0)
        return Completion(now - hold, now, work if ok else 0.0, ok, self.counted.area(), throttled, limited and not ok)
