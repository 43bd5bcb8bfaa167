"""A closed-loop load generator: ``n`` clients, each sending its next request when one returns.

This is how the simulator's faithfulness is checked against its formula, how the benches measure a
real engine's truth, and how ``calibrate-sim`` loads an engine; a closed loop is also what
``num_samples_in_parallel`` does to a server. Every request goes through the built-in ``openai``
backend (:class:`~gymbench.builtin.openai_backend.OpenAIBackend`, built as ``collect`` builds it),
so a load sends the body ``collect`` would send for the same task, through the same pooled client,
and reads the answer (streamed or not) with the same parser.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.builtin.http_client import RetryingClient
from gymbench.builtin.openai_backend import OpenAIBackend
from gymbench.client_cycles import ClientCycles, closed_loop_rate
from gymbench.engine_metrics import EngineMetrics, Settled, recognise, sample_sums, settle
from gymbench.types import Generation, GenerationFailed, GenerationRequest

ERROR_PAUSE_S = 0.05
"""A client whose request failed waits this long before its next: a server refusing at once would
otherwise have the loop spin on refusals."""


@dataclass
class Answer:
    """One request that finished: the client's clock (loop seconds) and the server's own timings."""

    sent: float
    ttft: float | None
    """The client's time to first token (streamed answers), seconds."""
    done: float
    timings: Mapping[str, float]
    """The server's per-request timings (llama.cpp's ``timings``; empty when it gives none)."""
    output_tokens: int | None = None
    """Generated tokens, as the server counted them (``predicted_n`` or the usage's), if it said."""


@dataclass
class LoadResult:
    concurrency: int
    window_s: float
    answers: list[Answer] = field(default_factory=list)
    """The requests that finished in the window."""
    errors: int = 0
    cycles: list[ClientCycles] = field(default_factory=list)
    """Each client's whole cycles inside the window (:class:`~gymbench.client_cycles.ClientCycles`): the
    rate is not quantised by batches finishing together."""
    pass_rates: list[float] = field(default_factory=list)
    """With several passes merged (:func:`merge_passes`): each pass's rate, in the order measured."""
    generated_tokens: float | None = None
    """Output tokens the server reports generating inside the window (when its /metrics is read)."""
    started: float = 0.0
    """The window's start on the loop's clock."""
    last_error: str | None = None
    """The reason the last failed request gave (a load where nothing finished says it)."""

    @property
    def completed(self) -> int:
        return len(self.answers)

    @property
    def latencies_s(self) -> list[float]:
        return [answer.done - answer.sent for answer in self.answers]

    @property
    def finished_s(self) -> list[float]:
        """When each counted request finished, in seconds from the window's start (for the rate's
        spread over slices of the window)."""
        return [answer.done - self.started for answer in self.answers]

    @property
    def requests_per_s(self) -> float:
        """The passes' mean rate when merged; else completions over the clients' whole cycles in the
        window, or the count in the window when a client had none (a window shorter than a request)."""
        if self.pass_rates:
            return float(sum(self.pass_rates) / len(self.pass_rates))
        by_cycles = closed_loop_rate(self.cycles)
        return self.counted_per_s if by_cycles is None else by_cycles

    @property
    def counted_per_s(self) -> float:
        """The requests that finished in the window ÷ its length (quantised by batches finishing together)."""
        return self.completed / self.window_s

    @property
    def output_tokens_per_s(self) -> float | None:
        return None if self.generated_tokens is None else self.generated_tokens / self.window_s


def merge_passes(readings: list[LoadResult]) -> LoadResult:
    """One load measured in several passes: every answer (the step timings' evidence) and the mean
    of the passes' rates. The mean, not the pool of their cycles: in ABBA order a drift of the
    machine that is steady over the measurement cancels in the mean of a load's two readings."""
    if len(readings) == 1:
        return readings[0]
    return LoadResult(
        readings[0].concurrency,
        sum(point.window_s for point in readings),
        [answer for point in readings for answer in point.answers],
        sum(point.errors for point in readings),
        pass_rates=[point.requests_per_s for point in readings],
    )


PASSES_AGREE = 0.05
"""A load's passes agree when their mean's standard error is within this share of it (two passes:
within ±10% of each other)."""


def disagreeing(readings: dict[int, list[LoadResult]]) -> dict[int, float]:
    """The loads whose passes disagree: concurrency → their mean's standard error ÷ the mean, where
    that is above :data:`PASSES_AGREE` (a load read once says nothing)."""
    spread: dict[int, float] = {}
    for concurrency, points in readings.items():
        rates = [point.requests_per_s for point in points]
        mean = sum(rates) / len(rates) if rates else 0.0
        if len(rates) < 2 or mean <= 0:
            continue
        relative = statistics.stdev(rates) / math.sqrt(len(rates)) / mean
        if relative > PASSES_AGREE:
            spread[concurrency] = relative
    return spread


def load_settings(base_url: str, model: str, **settings: Any) -> OpenAISettings:
    """The ``openai`` backend's settings for a load on a chat-completions server (unless ``api`` is given)."""
    return OpenAISettings(**{"base_url": base_url, "model": model, "api": "chat", **settings})


def load_backend(settings: OpenAISettings) -> OpenAIBackend:
    """The built-in ``openai`` backend, built from its typed settings exactly as ``collect`` builds it."""
    from gymbench.builtin.backends import make_openai

    backend = make_openai(settings)
    assert isinstance(backend, OpenAIBackend)
    return backend


UNKNOWN_MODEL = "(read from the server)"


def settings_client(settings: OpenAISettings) -> RetryingClient:
    """The ``openai`` backend's own HTTP client, built as the backend builds it, for what a load
    reads beside its requests (``/props``, ``/v1/models``) before the model to ask for is known
    (the backend it comes from sends no request, so a model not yet known is not used)."""
    return load_backend(dataclasses.replace(settings, model=settings.model or UNKNOWN_MODEL)).client


def session_of(client: RetryingClient) -> aiohttp.ClientSession:
    assert client.session is not None, "open the client first"
    return client.session


def answer_of(sent: float, done: float, generation: Generation) -> Answer:
    timings = generation.server_timings or {}
    counted = timings.get("predicted_n")
    output = int(counted) if counted is not None else generation.usage.completion_tokens or None
    return Answer(sent, generation.timings.get("ttft"), done, timings, output)


async def closed_loop(
    backend: OpenAIBackend,
    params: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    concurrency: int,
    duration_s: float,
    warmup_s: float = 0.5,
    metrics_url: str | None = None,
    engines: Sequence[EngineMetrics] = (),
) -> LoadResult:
    """Run ``concurrency`` clients for ``warmup_s + duration_s`` through the opened ``backend``, each
    asking for the task ``params`` (its ``responses_create_params``), or for each of a list of tasks
    in turn (distinct prompts, so an engine's prompt cache does not make every request the same);
    count what finishes in the window.

    With ``metrics_url``, the server's own generated-token counter is read at the window's edges, by
    the names of the engine recognised among ``engines`` (the plugins' ``engine_metrics()``, handed
    down by the entry point that built the plugins).
    """
    if metrics_url and not engines:
        raise TypeError("closed_loop: a metrics_url needs the engines whose names to read it by")
    tasks = [params] if isinstance(params, Mapping) else list(params)
    requests = itertools.cycle([GenerationRequest(index, 0, task) for index, task in enumerate(tasks)])
    loop = asyncio.get_running_loop()
    start = loop.time() + warmup_s
    stop = start + duration_s
    result = LoadResult(concurrency=concurrency, window_s=duration_s, started=start)

    async def client() -> None:
        cycles = ClientCycles()
        result.cycles.append(cycles)
        began = loop.time()
        while loop.time() < stop:
            sent = loop.time()
            try:
                generation: Generation | None = await backend.generate(next(requests))
            except GenerationFailed as exc:
                generation, result.last_error = None, exc.reason
                await asyncio.sleep(ERROR_PAUSE_S)
            done = loop.time()
            if start <= done < stop:
                cycles.cycle(began, done, generation is not None)
                if generation is None:
                    result.errors += 1
                else:
                    result.answers.append(answer_of(sent, done, generation))
            began = done

    async def count_tokens_in_window() -> None:
        """Server-side tokens are not quantised by whole requests finishing at once."""
        assert metrics_url is not None
        session = session_of(backend.client)
        await asyncio.sleep(max(0.0, start - loop.time()))
        engine = await metrics_engine(session, metrics_url, engines)
        first = await generation_tokens(session, metrics_url, engine)
        await asyncio.sleep(max(0.0, stop - loop.time()))
        result.generated_tokens = await generation_tokens(session, metrics_url, engine) - first

    probes = [count_tokens_in_window()] if metrics_url else []
    await asyncio.gather(*(client() for _ in range(concurrency)), *probes)
    return result


async def metrics_engine(
    session: aiohttp.ClientSession, metrics_url: str, engines: Sequence[EngineMetrics]
) -> EngineMetrics:
    """The engine whose names ``metrics_url`` serves, among ``engines`` (the plugins', handed down)."""
    async with session.get(metrics_url) as answer:
        text = await answer.text()
    recognition = recognise(engines, sample_sums(text))
    if recognition.engine is None:
        raise ValueError(f"{metrics_url}: {recognition.reason}")
    return recognition.engine


async def settle_server(session: aiohttp.ClientSession, metrics_url: str, engines: Sequence[EngineMetrics]) -> Settled:
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


def run_closed_loop(
    settings: OpenAISettings, params: Mapping[str, Any], concurrency: int, duration_s: float, **kwargs: Any
) -> LoadResult:
    """One load on a backend of its own (:func:`closed_loop`), from a synchronous caller."""

    async def one_load() -> LoadResult:
        async with load_backend(settings) as backend:
            return await closed_loop(backend, params, concurrency, duration_s, **kwargs)

    started = time.perf_counter()
    result = asyncio.run(one_load())
    result.window_s = min(result.window_s, time.perf_counter() - started)
    return result
