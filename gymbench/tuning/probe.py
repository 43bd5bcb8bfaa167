"""One measurement: the same task sample collected at one parallelism, measured in steady state.

Throughput counts only the completions between the first ``p`` (the ramp, when fewer than ``p``
are in flight yet) and the last ``p`` (the drain): the window where ``p`` rollouts really are in
flight. Its batches give repeated measurements for a confidence interval. While the probe runs, a
ticker measures event-loop lag and the process CPU is read, which tells a busy client from an
idle one waiting on its server.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from gymbench.rollout.dataset import TaskSlice
from gymbench.rollout.engine import Collector, CollectSettings
from gymbench.types import Backend, ConcurrencyStrategy, Verifier

LAG_TICK_S = 0.02


@dataclass
class ProbeResult:
    parallelism: int
    rollouts: int
    rollouts_per_s: float
    batch_rates: list[float]
    output_tokens_per_s: float
    latency_p50_s: float | None
    latency_p99_s: float | None
    error_rate: float
    failure_kinds: dict[str, int]
    stage_mean_s: dict[str, float | None]
    client_cpu_cores: float
    loop_lag_p99_s: float
    elapsed_s: float
    server_waiting_max: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        return {
            "parallelism": self.parallelism,
            "rollouts_per_s": self.rollouts_per_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "latency_p50_s": self.latency_p50_s,
            "latency_p99_s": self.latency_p99_s,
            "error_rate": self.error_rate,
        }


def rollouts_for(parallelism: int, minimum: int) -> int:
    """Enough for a ramp, a window of at least ``p + 32`` and a drain."""
    return max(minimum, 3 * parallelism + 32)


def steady_rates(spans: list[tuple[float, float]], parallelism: int, batches: int = 5) -> list[float]:
    """Throughput by Little's law over the window between ramp and drain, per time batch.

    ``spans`` are (start, end) of each rollout's hold on its slot. Counting completions in a
    short window is biased when completions arrive in bursts (engines that finish a batch in the
    same step); occupancy ÷ mean hold time uses every rollout's whole duration instead, and equals
    the completion rate in steady state whether or not every slot is busy.
    """
    ends = sorted(end for _, end in spans)
    if len(ends) < 4:
        return [len(ends) / max(1e-9, ends[-1] - min(s for s, _ in spans))] if ends else [0.0]
    skip = parallelism if len(ends) > 2 * parallelism + 4 else 0
    window_start, window_end = ends[skip], ends[len(ends) - 1 - skip]
    edges = np.linspace(window_start, window_end, batches + 1)
    rates = []
    for low, high in zip(edges[:-1], edges[1:], strict=True):
        occupied = sum(max(0.0, min(end, high) - max(start, low)) for start, end in spans)
        holds = [end - start for start, end in spans if low < end <= high]
        if holds and high > low:
            rates.append(occupied / (high - low) / float(np.mean(holds)))
    return rates or [0.0]


class Prober:
    """Runs probes against one backend on one task sample."""

    def __init__(
        self,
        input_path: Path,
        backend: Backend,
        verifier_factory: Callable[[], Verifier],
        settings: CollectSettings,
        sample_size: int,
        min_rollouts: int = 64,
        server_metrics: Callable[[], float | None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.input_path = input_path
        self.backend = backend
        self.verifier_factory = verifier_factory
        self.base = settings
        self.sample_size = sample_size
        self.min_rollouts = min_rollouts
        self.server_metrics = server_metrics
        self.clock = clock
        """Seconds, monotonic, for the collector; a simulated-time test passes its loop's ``time``."""
        self.workdir = Path(tempfile.mkdtemp(prefix="gymbench-tune-"))
        self.progress: Any = None
        """Optional: ``progress.start(parallelism, total)`` returns the collector's progress callback."""

    async def probe(self, parallelism: int, strategy: ConcurrencyStrategy, rollouts: int | None = None) -> ProbeResult:
        total = rollouts or rollouts_for(parallelism, self.min_rollouts)
        # Up to the sample's size, the first ``total`` tasks; beyond it, whole passes over the sample.
        selection = TaskSlice(limit=min(total, self.sample_size), num_repeats=-(-total // self.sample_size))
        settings = replace(
            self.base,
            output_path=self.workdir / f"p{parallelism}.jsonl",
            selection=selection,
            overwrite=True,
            resume=False,
        )
        spans: list[tuple[float, float]] = []
        collector = Collector(settings, self.backend, self.verifier_factory(), strategy, clock=self.clock)

        def on_rollout(timings: Mapping[str, float]) -> None:
            now = collector.clock()
            spans.append((now - timings["total"] + timings.get("slot_wait", 0.0), now))

        collector.on_rollout = on_rollout
        if self.progress is not None:
            collector.on_progress = self.progress.start(parallelism, total)
        lags: list[float] = []
        waiting: list[float] = []
        watcher = asyncio.ensure_future(self._watch(lags, waiting))
        cpu0 = time.process_time()
        try:
            stats = await collector.run()
        finally:
            watcher.cancel()
        cpu = time.process_time() - cpu0
        summary = stats.summary()
        attempted = stats.completed + stats.failed
        rates = steady_rates(spans, parallelism)
        return ProbeResult(
            parallelism=parallelism,
            rollouts=attempted,
            rollouts_per_s=float(np.mean(rates)),
            batch_rates=rates,
            output_tokens_per_s=summary["output_tokens_per_s"],
            latency_p50_s=summary["request_latency_s"]["p50"],
            latency_p99_s=summary["request_latency_s"]["p99"],
            error_rate=stats.failed / attempted if attempted else 0.0,
            failure_kinds=dict(stats.failure_kinds),
            stage_mean_s=summary["stage_mean_s"],
            client_cpu_cores=cpu / max(stats.elapsed_s, 1e-9),
            loop_lag_p99_s=float(np.percentile(lags, 99)) if lags else 0.0,
            elapsed_s=stats.elapsed_s,
            server_waiting_max=max(waiting) if waiting else None,
        )

    async def _watch(self, lags: list[float], waiting: list[float]) -> None:
        """Event-loop lag (how late a short sleep wakes) and, when readable, the server's queue."""
        loop = asyncio.get_running_loop()
        ticks = 0
        while True:
            before = loop.time()
            await asyncio.sleep(LAG_TICK_S)
            lags.append(max(0.0, loop.time() - before - LAG_TICK_S))
            ticks += 1
            if self.server_metrics is not None and ticks % 10 == 0:
                value = await asyncio.to_thread(self.server_metrics)
                if value is not None:
                    waiting.append(value)
