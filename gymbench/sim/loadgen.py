"""A closed-loop load generator: ``n`` clients, each sending its next request when one returns.

This is how the simulator's faithfulness is checked against its formula, and how its own CPU
cost is measured; a closed loop is also what ``num_samples_in_parallel`` does to a server.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gymbench.client_cycles import ClientCycles, closed_loop_rate
from gymbench.engine_metrics import EngineMetrics, Settled, recognise, sample_sums, settle


@dataclass
class LoadResult:
    concurrency: int
    window_s: float
    completed: int = 0
    errors: int = 0
    latencies_s: list[float] = field(default_factory=list)
    finished_s: list[float] = field(default_factory=list)
    """When each counted request finished, in seconds from the window's start (for the rate's
    spread over slices of the window)."""
    generated_tokens: float | None = None
    """Output tokens the server reports generating inside the window (when its /metrics is read)."""
    cycles: list[ClientCycles] = field(default_factory=list)
    """Each client's whole cycles inside the window (:class:`~gymbench.client_cycles.ClientCycles`)."""

    @property
    def requests_per_s(self) -> float:
        """Completions over the clients' whole cycles in the window; the count in the window when a
        client had none (a window shorter than a request)."""
        by_cycles = closed_loop_rate(self.cycles)
        return self.counted_per_s if by_cycles is None else by_cycles

    @property
    def counted_per_s(self) -> float:
        """The requests that finished in the window ÷ its length (quantised by batches finishing together)."""
        return self.completed / self.window_s

    @property
    def output_tokens_per_s(self) -> float | None:
        return None if self.generated_tokens is None else self.generated_tokens / self.window_s


async def closed_loop(
    base_url: str,
    concurrency: int,
    duration_s: float,
    warmup_s: float = 0.5,
    body: dict[str, Any] | None = None,
    path: str = "/chat/completions",
    metrics_url: str | None = None,
    engines: list[EngineMetrics] | None = None,
) -> LoadResult:
    """Run ``concurrency`` clients for ``warmup_s + duration_s``; count what finishes in the window.

    With ``metrics_url``, the server's own generated-token counter is read at the window's edges, by
    the names of the engine recognised among ``engines`` (default: those the plugins register).
    """
    request = body or {"model": "gymbench-sim", "messages": [{"role": "user", "content": "What is 1 + 1?"}]}
    result = LoadResult(concurrency=concurrency, window_s=duration_s)
    loop = asyncio.get_running_loop()
    start = loop.time() + warmup_s
    stop = start + duration_s
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=max(60.0, 4 * duration_s))

    async def client(session: aiohttp.ClientSession) -> None:
        cycles = ClientCycles()
        result.cycles.append(cycles)
        began = loop.time()
        while loop.time() < stop:
            sent = loop.time()
            try:
                async with session.post(base_url + path, json=request) as answer:
                    await answer.read()
                    ok = answer.status == 200
            except (aiohttp.ClientError, asyncio.TimeoutError):
                ok = False
            done = loop.time()
            if start <= done < stop:
                cycles.cycle(began, done, ok)
                if ok:
                    result.completed += 1
                    result.latencies_s.append(done - sent)
                    result.finished_s.append(done - start)
                else:
                    result.errors += 1
            began = done

    async def count_tokens_in_window(session: aiohttp.ClientSession) -> None:
        """Server-side tokens are not quantised by whole requests finishing at once."""
        assert metrics_url is not None
        await asyncio.sleep(max(0.0, start - loop.time()))
        engine = await metrics_engine(session, metrics_url, engines)
        first = await generation_tokens(session, metrics_url, engine)
        await asyncio.sleep(max(0.0, stop - loop.time()))
        result.generated_tokens = await generation_tokens(session, metrics_url, engine) - first

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        probes = [count_tokens_in_window(session)] if metrics_url else []
        await asyncio.gather(*(client(session) for _ in range(concurrency)), *probes)
    return result


async def metrics_engine(
    session: aiohttp.ClientSession, metrics_url: str, engines: list[EngineMetrics] | None = None
) -> EngineMetrics:
    """The engine whose names ``metrics_url`` serves (asked of the plugins once, before the window)."""
    if engines is None:
        from gymbench.plugins import Plugins

        engines = Plugins().engine_metrics()
    async with session.get(metrics_url) as answer:
        text = await answer.text()
    recognition = recognise(engines, sample_sums(text))
    if recognition.engine is None:
        raise ValueError(f"{metrics_url}: {recognition.reason}")
    return recognition.engine


async def settle_server(
    session: aiohttp.ClientSession, metrics_url: str, engines: list[EngineMetrics] | None = None
) -> Settled:
    """Wait until the server at ``metrics_url`` holds no request (:func:`gymbench.engine_metrics.settle`);
    a server without a readable ``/metrics`` of a known engine is not waited for."""
    try:
        engine = await metrics_engine(session, metrics_url, engines)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
        return Settled(0.0, None, None)

    async def in_flight() -> float | None:
        try:
            async with session.get(metrics_url) as answer:
                if answer.status != 200:
                    return None
                text = await answer.text()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return None
        return engine.in_flight(sample_sums(text, engine.wanted()))

    return await settle(in_flight, asyncio.get_running_loop().time)


async def generation_tokens(session: aiohttp.ClientSession, metrics_url: str, engine: EngineMetrics) -> float:
    async with session.get(metrics_url) as answer:
        text = await answer.text()
    value = engine.value(sample_sums(text, engine.wanted()), "generated_tokens")
    if value is None:
        wanted = " or ".join(engine.names("generated_tokens")) or "a generated-token counter"
        raise ValueError(f"{metrics_url} ({engine.name}) does not report {wanted}")
    return value


def run_closed_loop(base_url: str, concurrency: int, duration_s: float, **kwargs: Any) -> LoadResult:
    started = time.perf_counter()
    result = asyncio.run(closed_loop(base_url, concurrency, duration_s, **kwargs))
    result.window_s = min(result.window_s, time.perf_counter() - started)
    return result
