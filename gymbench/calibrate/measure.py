"""Measuring a real engine for a simulator profile (``gymbench calibrate-sim``).

Three phases, each short enough that the whole takes a minute or two against a small model:

1. **facts**: the slot count and context size from llama.cpp's ``/props`` (``total_slots``,
   ``default_generation_settings.n_ctx``), the model from ``/v1/models``;
2. **prefill**: one client, prompts of a few lengths, one output token, the prompt cache off: the
   server's ``prompt_ms`` against ``prompt_n`` gives the cost of a prompt token;
3. **decode**: closed loops of ``p`` clients at a few ``p`` around the slot count, each
   request the workload's (streamed or not, as the workload is: on a small machine streaming's
   per-token work slows the engine itself) (a fixed prompt; with ``ignore_eos``, ``+output_tokens`` output
   tokens, or the engine's default when unset): the
   server's ``predicted_per_token_ms`` against the running sequences gives the step's fixed and
   per-sequence cost; the clients' own TTFT and throughput are kept as the record and the check.

Every request goes through the built-in ``openai`` backend, built from the command's settings as
``collect`` builds it (:mod:`gymbench.calibrate.loadgen`): the loads send the body ``collect`` sends for
the same task (``max_tokens`` only where the task sets ``max_output_tokens``; ``ignore_eos`` as in
``+extra_body.ignore_eos=true``), through the same client and stream parser.

The fit is :mod:`gymbench.calibrate.fit`; the profile's check runs the fitted simulator at
the same ``p`` in simulated time (:mod:`gymbench.sim.virtual_load`) beside the measured throughput.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from gymbench.builtin.http_client import PREFLIGHT_TRIES, RetryingClient
from gymbench.calibrate.loadgen import (
    Answer,
    LoadResult,
    answer_of,
    closed_loop,
    load_backend,
    merge_passes,
    session_of,
    settings_client,
    settle_server,
)
from gymbench.engine_metrics import EngineMetrics
from gymbench.errors import GymbenchError, ServerUnreachable
from gymbench.types import GenerationFailed, GenerationRequest

if TYPE_CHECKING:
    from gymbench.calibrate.command import CalibrateSettings

FILLER = "the quick brown fox jumps over the lazy dog while a robot paints a small red house "
PREFILL_WORDS = (8, 48, 144)
"""Prompt lengths of the prefill phase (cut to fit a slot's context: about 4 tokens a word, at most)."""
PREFILL_REPEATS = 3
LONGEST_WINDOW = 8
"""A load in which nothing finished is measured again with a window twice as long, up to this
many times ``window_s``: the window waits for work rather than failing on a slow engine."""
IGNORE_EOS = {"ignore_eos": True}
"""Added to every body (as ``+extra_body.ignore_eos=true`` adds it to collect's): llama.cpp and vLLM
then generate every output to its limit even from a model that would stop early, as the profile's
``output_tokens_dist: max_tokens`` assumes; servers that do not know it ignore it."""


def prompt_text(words: int, salt: str = "") -> str:
    """``words`` words of plain English (a tokenizer's ordinary case), optionally made unique."""
    filler = FILLER.split()
    text = " ".join(filler[i % len(filler)] for i in range(words))
    return f"{salt} {text}" if salt else text


def workload_params(prompt_words: int, max_tokens: int | None, salt: str = "") -> dict[str, Any]:
    """The calibration's task, and the bench's, as a row's ``responses_create_params``: a fixed
    prompt, greedy, and ``max_output_tokens`` only when given (unset, the engine's default applies,
    as for a collected task that sets none)."""
    params: dict[str, Any] = {
        "input": [{"role": "user", "content": prompt_text(prompt_words, salt)}],
        "temperature": 0.0,
    }
    if max_tokens is not None:
        params["max_output_tokens"] = max_tokens
    return params


@dataclass(frozen=True)
class EngineFacts:
    root_url: str
    model: str
    slots: int
    context_per_slot: int | None
    engine: str


def root_of(base_url: str) -> str:
    """The server's root (``/props`` lives there) from an OpenAI base URL ending in ``/v1`` or not."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


async def read_facts(client: RetryingClient, base_url: str, model: str | None, slots: int | None) -> EngineFacts:
    root = root_of(base_url)
    props = await _get_json(client, f"{root}/props")
    found_slots = props.get("total_slots") if props else None
    if slots is None and not isinstance(found_slots, int):
        from gymbench.sim.profile import public_url

        raise GymbenchError(
            f"{public_url(root)}/props gives no total_slots (not a llama.cpp server, or --props is off); "
            "give the engine's slot count (max running sequences) as +engine_slots=N"
        )
    settings = (props or {}).get("default_generation_settings")
    settings = settings if isinstance(settings, dict) else {}  # a list here was an AttributeError
    context = settings.get("n_ctx") if isinstance(settings.get("n_ctx"), int) else None
    if model is None:
        listing = await _get_json(client, f"{root}/v1/models") or {}
        data = listing.get("data")  # a dict or a list of strings here were a KeyError or an AttributeError
        first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
        model = str(first.get("id") or "model")
    build = (props or {}).get("build_info")
    engine = f"llama.cpp {build}" if build else ("llama.cpp" if props else "unknown OpenAI-compatible engine")
    count = slots if slots is not None else int(found_slots or 0)
    return EngineFacts(root, model, count, context, engine)


async def _get_json(client: RetryingClient, url: str) -> dict[str, Any] | None:
    """The JSON object at ``url``; None when the server has no such endpoint (one that does not
    answer at all is raised: the engine is not there)."""
    reached = await client.reach(url, "engine")  # its tries, its 401/403 message
    if reached.status != 200:
        return None
    try:
        data = orjson.loads(reached.body)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _where(base_url: str) -> str:
    """The engine's root URL without credentials, for messages."""
    from gymbench.sim.profile import public_url

    return public_url(root_of(base_url))


async def measure_prefill(settings: CalibrateSettings, facts: EngineFacts) -> list[Answer]:
    """One client, prompts of a few lengths, the prompt cache off, one token out."""
    unstreamed = dataclasses.replace(settings, stream=False, extra_body={**settings.extra_body, "cache_prompt": False})
    loop = asyncio.get_running_loop()
    answers = []
    fits = (facts.context_per_slot or 4096) // 4
    async with load_backend(unstreamed) as backend:
        for words in sorted({min(words, fits) for words in PREFILL_WORDS}):
            for repeat in range(PREFILL_REPEATS):
                request = GenerationRequest(0, repeat, workload_params(words, 1, salt=f"r{repeat}"))
                sent = loop.time()
                generation = await backend.generate(request)
                answers.append(answer_of(sent, loop.time(), generation))
    return answers


def default_concurrencies(slots: int) -> list[int]:
    """A few points below the slot count (the decode fit's slope), the slot count, and one above
    (the plateau the slots set)."""
    below = {p for p in (1, 2, 4, 8, slots // 4, slots // 2) if 1 <= p <= slots}
    return sorted(below | {slots, min(2 * slots, slots + 16)})


@dataclass
class Measurements:
    facts: EngineFacts
    prefill: list[Answer]
    points: list[LoadResult]
    wall_s: float
    notes: list[str] = field(default_factory=list)
    """Waits for a busy engine before a load (see :func:`gymbench.calibrate.loadgen.settle_server`)."""
    passes: int = 1
    """How many times each load was measured (every other pass in reverse order)."""
    output_tokens: int = 0
    """Tokens each load request generated: the task's ``max_output_tokens`` when it set one, else
    what the engine reported generating under its own default."""
    max_tokens_sent: int | None = None
    """The task's ``max_output_tokens`` (None: none was sent, the engine's default applied)."""


async def measure(
    settings: CalibrateSettings,
    *,
    on_phase: Callable[[str, float], None] = lambda label, seconds: None,
    engines: Sequence[EngineMetrics],
) -> Measurements:
    """All three phases against the engine ``settings`` name; ``on_phase(label, seconds)`` after each step (a bar).

    The loads are measured ``settings.passes`` times, every other pass in reverse order (ABBA)."""
    began = time.perf_counter()
    assert settings.base_url is not None
    where = _where(settings.base_url)
    facts = await _facts(settings)
    # The backend's requests go to the engine's /v1 with the model it serves, ignore_eos added.
    engine = dataclasses.replace(
        settings, base_url=f"{facts.root_url}/v1", model=facts.model, extra_body={**IGNORE_EOS, **settings.extra_body}
    )
    try:
        # The closed loops come before the prefill phase: after prefill requests that skip the prompt
        # cache (``cache_prompt: false``), llama.cpp served the next two identical requests one at a
        # time (p = 2 read the same requests/s as p = 1: 33 against 60 without the prefill first).
        points, notes = await _measure_loads(engine, facts, on_phase, engines)
        prefill = await measure_prefill(engine, facts)
    except GenerationFailed as exc:
        raise GymbenchError(f"the engine at {where} refused a request: {exc.reason}") from None
    except ServerUnreachable:
        raise GymbenchError(f"cannot measure the engine at {where}: it stopped answering; is it running?") from None
    on_phase("prefill", 0.0)
    output = settings.output_tokens or _output_tokens(points, where)
    return Measurements(facts, prefill, points, time.perf_counter() - began, notes, settings.passes, output,
                        settings.output_tokens)  # fmt: skip


async def _facts(settings: CalibrateSettings) -> EngineFacts:
    """The engine's slots, context and model, read through the backend's client."""
    assert settings.base_url is not None
    client = settings_client(settings)
    where = _where(settings.base_url)
    try:
        await client.open(None)
        return await read_facts(client, settings.base_url, settings.model, settings.engine_slots)
    except ServerUnreachable:
        raise GymbenchError(
            f"cannot measure the engine at {where}: no answer after {PREFLIGHT_TRIES} tries; is it running?"
        ) from None
    except GymbenchError as exc:  # the client's own message names the URL, credentials and all
        raise GymbenchError(str(exc).replace(root_of(settings.base_url), where)) from None
    finally:
        await client.close()


async def _measure_loads(
    settings: CalibrateSettings,
    facts: EngineFacts,
    on_phase: Callable[[str, float], None],
    engines: Sequence[EngineMetrics],
) -> tuple[list[LoadResult], list[str]]:
    params = workload_params(settings.prompt_words, settings.output_tokens)
    notes: list[str] = []
    order = list(settings.points() or default_concurrencies(facts.slots))
    readings: dict[int, list[LoadResult]] = {p: [] for p in order}
    warmup_s, window_s = settings.load_warmup_s, settings.window_s
    async with load_backend(settings) as backend:
        session = session_of(backend.client)
        for p in [p for index in range(settings.passes) for p in (order if index % 2 == 0 else order[::-1])]:
            # An engine still generating for clients gone away (a tune or load test just before, or
            # this calibration's own last window) would make this load read low: start it idle.
            waited = (await settle_server(session, f"{facts.root_url}/metrics", engines)).note()
            if waited:
                notes.append(f"p={p}: {waited}")
            window = window_s
            point = await closed_loop(backend, params, p, window, warmup_s)
            while not point.answers and not point.errors and window < LONGEST_WINDOW * window_s:
                window *= 2  # a slow engine (or a busy machine): the window waits for work
                point = await closed_loop(backend, params, p, window, warmup_s)
            if not point.answers:
                raise GymbenchError(f"no request finished at p={p} in {window:g} s ({point.errors} failed): "
                                    "is the engine answering? raise +window_s for a slow one")  # fmt: skip
            readings[p].append(point)
            on_phase(f"p={p}: {point.requests_per_s:.2f} req/s", warmup_s + window_s)
    return [merge_passes(readings[p]) for p in order], notes


def _output_tokens(points: list[LoadResult], where: str) -> int:
    """The tokens the engine generated per request under its own default (the median answer's)."""
    counted = [a.output_tokens for point in points for a in point.answers if a.output_tokens]
    if not counted:
        raise GymbenchError(
            f"the engine at {where} did not say how many tokens it generated (no usage, no timings): "
            "give the output length as +max_tokens=N"
        )
    return round(statistics.median(counted))
