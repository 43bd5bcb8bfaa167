"""A closed loop against the simulator's engine in simulated time: what a profile predicts.

``p`` clients each submit a request of ``prompt_tokens`` and ``output_tokens`` as soon as their last
one finished, for ``warmup_s + window_s`` simulated seconds; the requests that finish inside the
window give the throughput, over the time their clients' whole cycles covered (as the real engine's
is measured: :class:`~gymbench.client_cycles.ClientCycles`). It drives :class:`~gymbench.sim.engine.Engine`
directly on a :class:`~gymbench.sim.virtual.VirtualTimeLoop`, so the answer depends on the
configuration alone (no HTTP, no machine load): a calibration compares it with the real engine, a
test with the fit.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gymbench.client_cycles import ClientCycles, closed_loop_rate
from gymbench.sim.config import SimConfig
from gymbench.sim.engine import Engine, Sequence
from gymbench.sim.virtual import run_in_simulated_time


@dataclass(frozen=True)
class SimulatedLoad:
    concurrency: int
    requests_per_s: float
    mean_latency_s: float
    mean_ttft_s: float
    steps: int


def simulated_closed_loop(
    config: SimConfig,
    concurrency: int,
    *,
    prompt_tokens: int,
    output_tokens: int,
    window_s: float = 30.0,
    warmup_s: float = 2.0,
) -> SimulatedLoad:
    """The engine's closed-loop throughput at ``concurrency`` clients (simulated seconds)."""
    return run_in_simulated_time(_loop(config, concurrency, prompt_tokens, output_tokens, window_s, warmup_s))


async def _loop(
    config: SimConfig, concurrency: int, prompt_tokens: int, output_tokens: int, window_s: float, warmup_s: float
) -> SimulatedLoad:
    engine = Engine(config)
    engine.start()
    loop = asyncio.get_running_loop()
    start, stop = loop.time() + warmup_s, loop.time() + warmup_s + window_s
    latencies: list[float] = []
    ttfts: list[float] = []

    clients: list[ClientCycles] = []

    async def client() -> None:
        cycles = ClientCycles()
        clients.append(cycles)
        while loop.time() < stop:
            seq = Sequence(prompt_tokens, output_tokens)
            engine.submit(seq)
            await seq.done
            done = loop.time()
            if start <= done < stop:
                cycles.cycle(seq.arrived, done, ok=True)
                latencies.append(done - seq.arrived)
                ttfts.append((seq.first_token_at or done) - seq.arrived)

    steps_before = engine.stats.steps
    try:
        await asyncio.gather(*(client() for _ in range(concurrency)))
    finally:
        await engine.stop()
    count = len(latencies)
    return SimulatedLoad(
        concurrency=concurrency,
        requests_per_s=closed_loop_rate(clients) or count / window_s,
        mean_latency_s=sum(latencies) / count if count else 0.0,
        mean_ttft_s=sum(ttfts) / count if count else 0.0,
        steps=engine.stats.steps - steps_before,
    )
