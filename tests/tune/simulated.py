"""Probing in simulated time: the in-process simulator (or a closed loop of known rate) and a prober.

Every duration here is simulated, so a starved CPU cannot move a rate, and every run repeats
exactly. Two kinds of server: the simulator's engine, whose long-run rate is read here from its
own token counter over a long closed loop; and :class:`HoldingBackend`, a server with no
engine at all that holds each request for a time proportional to its drawn output length, whose
rate is known in closed form (``p ÷ E[hold]``). And a verifier pool on the same clock
(:func:`simulated_verification`), whose workers each hold a verdict a fixed simulated time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import numpy as np

from gymbench.collect.driver import Collection
from gymbench.engine_metrics import Counters
from gymbench.jsonio import loads
from gymbench.rollout.verification import VerificationRunner, VerifySettings
from gymbench.sim import InProcessBackend, SimConfig, run_in_simulated_time
from gymbench.sim.capacity import mean_output_tokens
from gymbench.testing import make_plugins
from gymbench.tune.probe import Prober
from gymbench.tune.rates import Precision
from gymbench.types import Generation, GenerationRequest, TokenUsage, Verdict

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "gymbench" / "data" / "example_tasks.jsonl"


class HoldingBackend:
    """A server that holds each request ``(length + 1) × token_s`` seconds (one step to admit it,
    one per token), ``length`` drawn as the simulator draws output lengths. ``p`` closed-loop
    clients get exactly ``p / ((E[length] + 1) · token_s)`` requests/s and ``E[length]`` times as
    many tokens/s. ``report_tokens=False`` answers without usage (the probe then counts rollouts)."""

    def __init__(self, dist: str, mean: int, token_s: float = 0.01, seed: int = 0, report_tokens: bool = True) -> None:
        self.dist, self.mean, self.token_s = dist, mean, token_s
        self.rng = np.random.default_rng(seed)
        self.report_tokens = report_tokens

    @property
    def mean_length(self) -> float:
        return mean_output_tokens(SimConfig(output_tokens_dist=self.dist, output_tokens_mean=self.mean), None)

    def rate(self, parallelism: int) -> float:
        """Requests/s of ``parallelism`` closed-loop clients."""
        return parallelism / ((self.mean_length + 1) * self.token_s)

    def draw(self) -> int:
        if self.dist == "uniform":
            return int(self.rng.integers(1, 2 * self.mean))
        if self.dist == "exponential":
            return max(1, round(self.rng.exponential(self.mean)))
        return self.mean

    async def __aenter__(self) -> HoldingBackend:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    async def generate(self, request: GenerationRequest) -> Generation:
        length = self.draw()
        await asyncio.sleep((length + 1) * self.token_s)
        usage = TokenUsage(10, length if self.report_tokens else 0)
        return Generation("59", {}, usage, {"generation": (length + 1) * self.token_s})


def simulated_verification(seconds: float) -> type[VerificationRunner]:
    """The verification runner with its pool on the simulated clock: ``verifier_workers`` workers,
    each holding a verdict ``seconds``; a rollout waits for a free one, as for a real pool's thread.

    A real pool runs in real time while the simulated clock stands still (see
    :mod:`gymbench.sim.virtual`), so its verdicts would take no simulated time at all. The verdict
    itself is still the real verifier's. Install it where the collector builds its runner:
    ``monkeypatch.setattr(gymbench.rollout.engine, "VerificationRunner", simulated_verification(s))``.
    """

    class SimulatedVerification(VerificationRunner):
        def start(self) -> None:
            self.workers = asyncio.Semaphore(self.settings.workers)

        async def _run(self, row: Mapping[str, Any], text: str) -> Verdict:
            async with self.workers:
                await asyncio.sleep(seconds)
                return self.verifier.verify(row, text)

    return SimulatedVerification


def with_prober(
    backend: object,
    work: Callable[[Prober], Awaitable[T]],
    precision: Precision | None = None,
    counters: Callable[[], str | None] | None = None,
    verify: VerifySettings | None = None,
) -> T:
    """``work(prober)`` in simulated time against ``backend``."""
    plugins = make_plugins()
    verify = verify or VerifySettings("exact-match")

    async def main() -> T:
        loop = asyncio.get_running_loop()
        collection = Collection.around(backend, TASKS, lambda: plugins.verifier(verify.name, dict(verify.config)),  # type: ignore[arg-type]
                                       verify=verify)  # fmt: skip
        engines = plugins.engine_metrics()
        with contextlib.closing(collection):
            prober = Prober(collection, 200, precision, Counters(counters, engines=engines) if counters else None,
                            clock=loop.time)  # fmt: skip
            return await work(prober)

    return run_in_simulated_time(main())


def sim_counters(backend: InProcessBackend) -> Callable[[], str | None]:
    """The in-process server's ``/metrics`` text, as an HTTP client of it would read it (nothing
    before the backend is first entered: no server is listening yet)."""
    return backend.metrics_text


def long_run_tokens_per_s(config: SimConfig, parallelism: int, completions: int = 6000) -> float:
    """Generated tokens/s of ``parallelism`` closed-loop clients in the long run, read from the
    engine's own counter over ``completions`` rollouts after a warm-up (÷ the exact mean output
    length, :func:`gymbench.sim.capacity.mean_output_tokens`, it is the long-run rollouts/s)."""
    rows = [loads(line) for line in TASKS.read_text().splitlines() if line.strip()]

    async def main() -> float:
        backend = InProcessBackend(config)
        loop = asyncio.get_running_loop()
        tasks = itertools.cycle(rows)
        done, warmup = 0, 3 * parallelism
        marks: list[tuple[float, int]] = []
        async with backend:
            engine = backend.service.engine

            async def client() -> None:
                nonlocal done
                while done < warmup + completions:
                    row = next(tasks)
                    await backend.generate(GenerationRequest(0, 0, row["responses_create_params"], row))
                    done += 1
                    if done in (warmup, warmup + completions):
                        marks.append((loop.time(), engine.stats.generation_tokens))

            await asyncio.gather(*(client() for _ in range(parallelism)))
        (t0, g0), (t1, g1) = marks[0], marks[1]
        return (g1 - g0) / (t1 - t0)

    return run_in_simulated_time(main())


class PooledBackend:
    """``backend`` behind a pool of ``size`` connections, as aiohttp's connector limit makes one:
    a request waits for a free connection, and that wait is its ``connection_wait`` stage."""

    def __init__(self, backend: InProcessBackend, size: int) -> None:
        self.backend = backend
        self.pool = asyncio.Semaphore(size)

    async def __aenter__(self) -> PooledBackend:
        await self.backend.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.backend.__aexit__(exc_type, exc, tb)

    async def generate(self, request: GenerationRequest) -> Generation:
        loop = asyncio.get_running_loop()
        asked = loop.time()
        async with self.pool:
            waited = loop.time() - asked
            generation = await self.backend.generate(request)
        return dataclasses.replace(generation, timings={**generation.timings, "connection_wait": waited})
