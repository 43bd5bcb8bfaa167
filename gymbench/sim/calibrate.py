"""Measuring a real engine for a simulator profile (``gymbench calibrate-sim``).

Three phases, each short enough that the whole takes a minute or two against a small model:

1. **facts**: the slot count and context size from llama.cpp's ``/props`` (``total_slots``,
   ``default_generation_settings.n_ctx``), the model from ``/v1/models``;
2. **prefill**: one client, prompts of a few lengths, one output token, the prompt cache off: the
   server's ``prompt_ms`` against ``prompt_n`` gives the cost of a prompt token;
3. **decode**: closed loops of ``p`` clients at a few ``p`` around the slot count, each
   request the workload's (streamed or not, as the workload is: on a small machine streaming's
   per-token work slows the engine itself) (a fixed prompt, ``max_tokens`` output tokens with ``ignore_eos``): the
   server's ``predicted_per_token_ms`` against the running sequences gives the step's fixed and
   per-sequence cost; the clients' own TTFT and throughput are kept as the record and the check.

The fit is :mod:`gymbench.sim.calibration_fit`; the profile's check runs the fitted simulator at
the same ``p`` in simulated time (:mod:`gymbench.sim.virtual_load`) beside the measured throughput.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gymbench.client_cycles import ClientCycles, closed_loop_rate
from gymbench.engine_metrics import EngineMetrics
from gymbench.errors import GymbenchError
from gymbench.sim.loadgen import settle_server

FILLER = "the quick brown fox jumps over the lazy dog while a robot paints a small red house "
PREFILL_WORDS = (8, 48, 144)
"""Prompt lengths of the prefill phase (cut to fit a slot's context: about 4 tokens a word, at most)."""
PREFILL_REPEATS = 3
LONGEST_WINDOW = 8
"""A load in which nothing finished is measured again with a window twice as long, up to this
many times ``window_s``: the window waits for work rather than failing on a slow engine."""


def prompt_text(words: int, salt: str = "") -> str:
    """``words`` words of plain English (a tokenizer's ordinary case), optionally made unique."""
    filler = FILLER.split()
    text = " ".join(filler[i % len(filler)] for i in range(words))
    return f"{salt} {text}" if salt else text


def workload_body(model: str, prompt_words: int, max_tokens: int, stream: bool = False) -> dict[str, Any]:
    """The calibration's request, and the bench's: a fixed prompt and exactly ``max_tokens`` out.

    ``ignore_eos`` (llama.cpp, vLLM) keeps every output at ``max_tokens`` even from a model that
    would stop early, as the profile's ``output_tokens_dist: max_tokens`` assumes; servers that do
    not know it ignore it.
    """
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt_text(prompt_words)}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
    }
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


@dataclass(frozen=True)
class EngineFacts:
    root_url: str
    model: str
    slots: int
    context_per_slot: int | None
    engine: str


@dataclass
class Answer:
    sent: float
    first_token: float | None
    done: float
    timings: Mapping[str, Any]


@dataclass
class LoadPoint:
    concurrency: int
    window_s: float
    answers: list[Answer] = field(default_factory=list)
    errors: int = 0
    cycles: list[ClientCycles] = field(default_factory=list)
    """Each client's whole cycles in the window: the rate is not quantised by batches finishing
    together (:class:`~gymbench.client_cycles.ClientCycles`)."""
    pass_rates: list[float] = field(default_factory=list)
    """With ``passes`` > 1: each pass's rate, in the order measured (the point's rate is their mean)."""

    @property
    def requests_per_s(self) -> float:
        if self.pass_rates:
            return float(sum(self.pass_rates) / len(self.pass_rates))
        by_cycles = closed_loop_rate(self.cycles)
        return len(self.answers) / self.window_s if by_cycles is None else by_cycles


def merge_passes(readings: Sequence[LoadPoint]) -> LoadPoint:
    """One load measured in several passes: every answer (the step timings' evidence) and the mean
    of the passes' rates. The mean, not the pool of their cycles: in ABBA order a drift of the
    machine that is steady over the calibration cancels in the mean of a load's two readings."""
    if len(readings) == 1:
        return readings[0]
    return LoadPoint(
        readings[0].concurrency,
        sum(point.window_s for point in readings),
        [answer for point in readings for answer in point.answers],
        sum(point.errors for point in readings),
        pass_rates=[point.requests_per_s for point in readings],
    )


def root_of(base_url: str) -> str:
    """The server's root (``/props`` lives there) from an OpenAI base URL ending in ``/v1`` or not."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


async def read_facts(
    session: aiohttp.ClientSession, base_url: str, model: str | None, slots: int | None
) -> EngineFacts:
    root = root_of(base_url)
    props = await _get_json(session, f"{root}/props")
    found_slots = props.get("total_slots") if props else None
    if slots is None and not isinstance(found_slots, int):
        from gymbench.sim.profile import public_url

        raise GymbenchError(
            f"{public_url(root)}/props gives no total_slots (not a llama.cpp server, or --props is off); "
            "give the engine's slot count (max running sequences) as +slots=N"
        )
    settings = (props or {}).get("default_generation_settings") or {}
    context = settings.get("n_ctx") if isinstance(settings.get("n_ctx"), int) else None
    if model is None:
        listing = await _get_json(session, f"{root}/v1/models") or {}
        data = listing.get("data") or [{}]
        model = str(data[0].get("id") or "model")
    build = (props or {}).get("build_info")
    engine = f"llama.cpp {build}" if build else ("llama.cpp" if props else "unknown OpenAI-compatible engine")
    count = slots if slots is not None else int(found_slots or 0)
    return EngineFacts(root, model, count, context, engine)


async def _get_json(session: aiohttp.ClientSession, url: str) -> dict[str, Any] | None:
    """The JSON object at ``url``; None when the server has no such endpoint (a refused connection
    is raised: the engine is not there at all)."""
    async with session.get(url) as answer:
        if answer.status != 200:
            return None
        try:
            data = await answer.json(content_type=None)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None


async def send(session: aiohttp.ClientSession, url: str, body: Mapping[str, Any]) -> Answer:
    """One request, streamed or not; the client's TTFT and the server's ``timings``."""
    loop = asyncio.get_running_loop()
    sent = loop.time()
    first: float | None = None
    timings: Mapping[str, Any] = {}
    async with session.post(url, json=body) as answer:
        if answer.status != 200:
            raise _Refused(answer.status, (await answer.text())[:200])
        if not body.get("stream"):
            data = await answer.json(content_type=None)
            return Answer(sent, None, loop.time(), data.get("timings") or {})
        async for raw in answer.content:
            line = raw.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if first is None and any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or []):
                first = loop.time()
            timings = chunk.get("timings") or timings
    return Answer(sent, first, loop.time(), timings)


def _where(base_url: str) -> str:
    """The engine's root URL without credentials, for messages."""
    from gymbench.sim.profile import public_url

    return public_url(root_of(base_url))


def _reason(exc: BaseException) -> str:
    """The error without the address (which may carry credentials, and is named anyway)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect ({exc.os_error.strerror or exc.os_error})"
    return str(exc) or type(exc).__name__


class _Refused(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text}")


async def measure_prefill(session: aiohttp.ClientSession, facts: EngineFacts) -> list[Answer]:
    """One client, prompts of a few lengths, the prompt cache off, one token out."""
    answers = []
    fits = (facts.context_per_slot or 4096) // 4
    for words in sorted({min(words, fits) for words in PREFILL_WORDS}):
        for repeat in range(PREFILL_REPEATS):
            body = workload_body(facts.model, words, 1) | {"cache_prompt": False}
            body["messages"][0]["content"] = prompt_text(words, salt=f"r{repeat}")
            answers.append(await send(session, f"{facts.root_url}/v1/chat/completions", body))
    return answers


async def measure_closed_loop(
    session: aiohttp.ClientSession,
    url: str,
    body: Mapping[str, Any],
    concurrency: int,
    warmup_s: float,
    window_s: float,
) -> LoadPoint:
    """``concurrency`` clients for ``warmup_s + window_s``; the answers that finish in the window."""
    loop = asyncio.get_running_loop()
    start = loop.time() + warmup_s
    stop = start + window_s
    point = LoadPoint(concurrency, window_s)

    async def client() -> None:
        cycles = ClientCycles()
        point.cycles.append(cycles)
        began = loop.time()
        while loop.time() < stop:
            try:
                answer = await send(session, url, body)
            except (aiohttp.ClientError, asyncio.TimeoutError, _Refused, ValueError):
                point.errors += 1
                await asyncio.sleep(0.05)
                if start <= loop.time() < stop:
                    cycles.cycle(began, loop.time(), ok=False)
                began = loop.time()
                continue
            if start <= answer.done < stop:
                point.answers.append(answer)
                cycles.cycle(began, answer.done, ok=True)
            began = answer.done

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return point


def default_concurrencies(slots: int) -> list[int]:
    """A few points below the slot count (the decode fit's slope), the slot count, and one above
    (the plateau the slots set)."""
    below = {p for p in (1, 2, 4, 8, slots // 4, slots // 2) if 1 <= p <= slots}
    return sorted(below | {slots, min(2 * slots, slots + 16)})


@dataclass
class Measurements:
    facts: EngineFacts
    prefill: list[Answer]
    points: list[LoadPoint]
    wall_s: float
    notes: list[str] = field(default_factory=list)
    """Waits for a busy engine before a load (see :func:`gymbench.sim.loadgen.settle_server`)."""
    passes: int = 1
    """How many times each load was measured (every other pass in reverse order)."""


async def measure(
    base_url: str,
    *,
    model: str | None,
    slots: int | None,
    concurrencies: Sequence[int] | None,
    prompt_words: int,
    max_tokens: int,
    warmup_s: float,
    window_s: float,
    headers: Mapping[str, str],
    stream: bool = False,
    on_phase: Callable[[str, float], None] = lambda label, seconds: None,
    engines: list[EngineMetrics] | None = None,
    passes: int = 1,
) -> Measurements:
    """All three phases against ``base_url``; ``on_phase(label, seconds)`` after each step (a bar).

    ``passes``: the loads measured that many times, every other pass in reverse order (ABBA)."""
    began = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=max(120.0, 4 * (warmup_s + window_s)))
    # Streamed: a connection per request. llama.cpp's server closes one after a streamed answer,
    # and a pooled connection reused just then fails the next request before it is sent.
    connector = aiohttp.TCPConnector(limit=0, force_close=stream)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector, headers=dict(headers)) as session:
        try:
            facts = await read_facts(session, base_url, model, slots)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise GymbenchError(
                f"cannot measure the engine at {_where(base_url)}: {_reason(exc)}; is it running?"
            ) from None
        # The closed loops come before the prefill phase: after prefill requests that skip the prompt
        # cache (``cache_prompt: false``), llama.cpp served the next two identical requests one at a
        # time (p = 2 read the same requests/s as p = 1: 33 against 60 without the prefill first).
        url = f"{facts.root_url}/v1/chat/completions"
        body = workload_body(facts.model, prompt_words, max_tokens, stream=stream)
        notes: list[str] = []
        if engines is None:  # asked of the plugins once, not before every load
            from gymbench.plugins import Plugins

            engines = Plugins().engine_metrics()
        order = list(concurrencies or default_concurrencies(facts.slots))
        readings: dict[int, list[LoadPoint]] = {p: [] for p in order}
        for p in [p for index in range(passes) for p in (order if index % 2 == 0 else order[::-1])]:
            # An engine still generating for clients gone away (a tune or load test just before, or
            # this calibration's own last window) would make this load read low: start it idle.
            waited = (await settle_server(session, f"{facts.root_url}/metrics", engines)).note()
            if waited:
                notes.append(f"p={p}: {waited}")
            window = window_s
            point = await measure_closed_loop(session, url, body, p, warmup_s, window)
            while not point.answers and not point.errors and window < LONGEST_WINDOW * window_s:
                window *= 2  # a slow engine (or a busy machine): the window waits for work
                point = await measure_closed_loop(session, url, body, p, warmup_s, window)
            if not point.answers:
                raise GymbenchError(f"no request finished at p={p} in {window:g} s ({point.errors} failed): "
                                    "is the engine answering? raise +window_s for a slow one")  # fmt: skip
            readings[p].append(point)
            on_phase(f"p={p}: {point.requests_per_s:.2f} req/s", warmup_s + window_s)
        points = [merge_passes(readings[p]) for p in order]
        try:
            prefill = await measure_prefill(session, facts)
        except _Refused as exc:
            raise GymbenchError(f"the engine at {_where(base_url)} refused a prefill request: {exc}") from None
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise GymbenchError(
                f"cannot measure the engine at {_where(base_url)}: {_reason(exc)}; is it running?"
            ) from None
        on_phase("prefill", 0.0)
    return Measurements(facts, prefill, points, time.perf_counter() - began, notes, passes)
