"""Measuring a real engine for a simulator profile (``gymbench calibrate-sim``).

Three phases, each short enough that the whole takes a minute or two against a small model:

1. **facts**: the slot count and context size from llama.cpp's ``/props`` (``total_slots``,
   ``default_generation_settings.n_ctx``), the model from ``/v1/models``;
2. **prefill**: one client, prompts of a few lengths, one output token, the prompt cache off: the
   server's ``prompt_ms`` against ``prompt_n`` gives the cost of a prompt token;
3. **decode**: closed loops of ``p`` clients at a few ``p`` around the slot count, each
   request the workload's (streamed or not, as the workload is: on a small machine streaming's
   per-token work slows the engine itself) (:data:`LOAD_PROMPTS` distinct prompts of
   ``+prompt_words`` words; with ``ignore_eos``, ``+output_tokens`` output
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

from gymbench.builtin.http_client import PREFLIGHT_TRIES, REACH_TIMEOUT_S, RetryingClient
from gymbench.calibrate.loadgen import (
    PASSES_AGREE,
    Answer,
    LoadResult,
    answer_of,
    closed_loop,
    disagreeing,
    load_backend,
    merge_passes,
    session_of,
    settings_client,
    settle_server,
)
from gymbench.engine_metrics import EngineMetrics
from gymbench.errors import GymbenchError, ServerUnreachable
from gymbench.sim.profile import public_url
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


LOAD_PROMPTS = 64
"""The loads cycle through this many prompts, each its own (its number in front), as a collection's
tasks differ. With one prompt repeated, llama.cpp's prompt cache serves every prefill but the first
and the clients' requests stay identical; the truth it was judged against sends distinct prompts."""


def workload_tasks(prompt_words: int, max_tokens: int | None, count: int = LOAD_PROMPTS) -> list[dict[str, Any]]:
    """The workload as ``count`` tasks of the same length, each prompt its own (:func:`workload_params`
    with the task's number in front): the calibration's loads and the real-engine bench's truth."""
    return [workload_params(prompt_words, max_tokens, salt=f"t{i}") for i in range(count)]


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


async def read_facts(
    client: RetryingClient, base_url: str, model: str | None, slots: int | None, timeout_s: float = REACH_TIMEOUT_S
) -> EngineFacts:
    """The engine's slots and context from ``/props`` and its model from ``/v1/models``.

    An endpoint that is missing (or answers something that is not JSON) is read as absent: another
    OpenAI-compatible server has no ``/props``. One that answers JSON of another shape than
    llama.cpp's is refused, naming the URL and the shape expected: read loosely, a wrong slot count
    or model would be fitted and written into a profile without a word."""
    root = root_of(base_url)
    props = await _get_json(client, root, "/props", timeout_s)
    found_slots, context = _props_facts(props, f"{public_url(root)}/props")
    if slots is None and found_slots is None:
        raise GymbenchError(
            f"{public_url(root)}/props gives no total_slots (not a llama.cpp server, or --props is off); "
            "give the engine's slot count (max running sequences) as +engine_slots=N"
        )
    if model is None:
        model = _served_model(await _get_json(client, root, "/v1/models", timeout_s), f"{public_url(root)}/v1/models")
    build = props.get("build_info") if isinstance(props, dict) else None
    unknown = "llama.cpp" if props is not None else "unknown OpenAI-compatible engine"
    engine = f"llama.cpp {build}" if build else unknown
    count = slots if slots is not None else int(found_slots or 0)
    return EngineFacts(root, model, count, context, engine)


PROPS_SHAPE = 'a JSON object such as {"total_slots": 4, "default_generation_settings": {"n_ctx": 4096}}'
MODELS_SHAPE = 'a JSON object such as {"data": [{"id": "MODEL"}]}'


def _props_facts(props: object, url: str) -> tuple[int | None, int | None]:
    """``total_slots`` and ``default_generation_settings.n_ctx`` from llama.cpp's ``/props``
    (None: no ``/props``, or it does not give them)."""
    if props is None:
        return None, None
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    settings = {} if isinstance(props, dict) and settings is None else settings
    if not isinstance(props, dict) or not isinstance(settings, dict):
        got = f"default_generation_settings as {json_shape(settings)}" if isinstance(props, dict) else json_shape(props)
        raise GymbenchError(f"{url}: expected {PROPS_SHAPE}, got {got}; is this a llama.cpp server?")
    slots, context = props.get("total_slots"), settings.get("n_ctx")
    for name, value in (("total_slots", slots), ("default_generation_settings.n_ctx", context)):
        if value is not None and not _count(value):
            raise GymbenchError(f"{url}: expected {name} a whole number above 0, got {json_shape(value)}; "
                                "is this a llama.cpp server?")  # fmt: skip
    return slots, context


def _served_model(listing: object, url: str) -> str:
    """The first model ``/v1/models`` lists; ``model`` where the server has no such endpoint or
    lists none (llama.cpp answers to any name)."""
    if listing is None:
        return "model"
    data = listing.get("data") if isinstance(listing, dict) else None
    first = data[0] if isinstance(data, list) and data else {}
    if not isinstance(data, list) or not isinstance(first, dict) or not isinstance(first.get("id", ""), str):
        got = f"data as {json_shape(data)}" if isinstance(listing, dict) else json_shape(listing)
        raise GymbenchError(f"{url}: expected {MODELS_SHAPE}, got {got}; give the served model as +model=NAME")
    return str(first.get("id") or "model")


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def json_shape(value: object) -> str:
    """What a JSON value is, in words, for a message (never its text: a server may echo a key)."""
    if isinstance(value, list):
        kinds = sorted({f"{_kind(item)}s" for item in value})
        return f"a list of {' and '.join(kinds)}" if kinds else "an empty list"
    kind = _kind(value)
    return kind if kind == "null" else f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _kind(value: object) -> str:
    kinds = {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


async def _get_json(client: RetryingClient, root: str, path: str, timeout_s: float) -> object:
    """The JSON at ``root + path``; None when the server has no such endpoint or answers it with no JSON (one
    that does not answer at all is raised: the engine is not there)."""
    url = root + path
    try:
        reached = await client.reach(url, "engine", timeout_s)  # its tries, its 401/403 message
    except ServerUnreachable:
        raise GymbenchError(
            f"cannot measure the engine at {public_url(root)}: {public_url(url)} gave no answer "
            f"in {PREFLIGHT_TRIES} tries of {timeout_s:g} s; is it running?"
        ) from None
    if reached.status != 200:
        return None
    try:
        return orjson.loads(reached.body)
    except ValueError:
        return None


def _where(base_url: str) -> str:
    """The engine's root URL without credentials, for messages."""
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
    say: Callable[[str], None] = lambda text: None,
) -> Measurements:
    """All three phases against the engine ``settings`` name; ``on_phase(label, seconds)`` after each
    step (a bar); ``say(text)`` before each wait that is no step: what it waits for, and how long.

    The loads are measured ``settings.passes`` times, every other pass in reverse order (ABBA),
    and up to ``settings.extra_passes`` more while their passes disagree (:func:`_more_passes`)."""
    began = time.perf_counter()
    assert isinstance(settings.base_url, str), "one URL: the settings check"
    where = _where(settings.base_url)
    reads = f"up to {PREFLIGHT_TRIES} tries of {facts_timeout_s(settings):g} s each"
    say(f"reading the engine's slots and model from {where}/props and /v1/models ({reads})")
    facts = await _facts(settings)
    # The backend's requests go to the engine's /v1 with the model it serves, ignore_eos added.
    engine = dataclasses.replace(
        settings, base_url=f"{facts.root_url}/v1", model=facts.model, extra_body={**IGNORE_EOS, **settings.extra_body}
    )
    await first_answer(engine, say)
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
    passes = max(len(point.pass_rates) or 1 for point in points)
    return Measurements(facts, prefill, points, time.perf_counter() - began, notes, passes, output,
                        settings.output_tokens)  # fmt: skip


EXPECTED_ANSWER = {
    "chat": "a chat completion (a JSON object with choices)",
    "responses": "a Responses API answer (a JSON object with output)",
}


async def first_answer(settings: CalibrateSettings, say: Callable[[str], None]) -> None:
    """One request of the workload, within ``request_timeout_s``, before any load.

    An engine whose chat endpoint never answers (or answers what no reader can read) is found
    here, in one line naming the endpoint, not in a load whose every client waits on it: a load
    waits for the requests it has in flight, retries included, before the next load starts."""
    try:
        async with load_backend(settings) as backend:
            endpoint, timeout_s = public_url(backend.url), settings.request_timeout_s
            say(f"waiting for a first answer from {endpoint} (up to {timeout_s:g} s, +request_timeout_s)")
            request = GenerationRequest(0, 0, workload_params(settings.prompt_words, settings.output_tokens))
            try:
                await asyncio.wait_for(backend.generate(request), timeout_s)
            except (asyncio.TimeoutError, GenerationFailed) as exc:
                raise GymbenchError(_no_first_answer(exc, endpoint, settings)) from None
    except ServerUnreachable:  # its message holds the URL as given, credentials and all
        where = _where(str(settings.base_url))
        raise GymbenchError(f"cannot measure the engine at {where}: it stopped answering; is it running?") from None


def _no_first_answer(exc: BaseException, endpoint: str, settings: CalibrateSettings) -> str:
    kind = exc.kind if isinstance(exc, GenerationFailed) else "timeout"
    if kind == "timeout":
        return (f"{endpoint} gave no answer within {settings.request_timeout_s:g} s: is the engine answering? "
                "raise +request_timeout_s for a slow one")  # fmt: skip
    assert isinstance(exc, GenerationFailed)
    if kind == "invalid_response":
        return (f"{endpoint}: expected {EXPECTED_ANSWER[settings.api]}, got an answer the openai backend cannot "
                f"read ({exc.reason}); is this the engine's OpenAI-compatible API?")  # fmt: skip
    return f"the engine at {_where(str(settings.base_url))} refused a request: {exc.reason}"


def facts_timeout_s(settings: CalibrateSettings) -> float:
    """Each read of ``/props`` and ``/v1/models``: a reachability check's, or a request's if shorter."""
    return min(REACH_TIMEOUT_S, settings.request_timeout_s)


async def _facts(settings: CalibrateSettings) -> EngineFacts:
    """The engine's slots, context and model, read through the backend's client."""
    assert isinstance(settings.base_url, str), "one URL: the settings check"
    client = settings_client(settings)
    where = _where(settings.base_url)
    try:
        await client.open(None)
        return await read_facts(
            client, settings.base_url, settings.model, settings.engine_slots, facts_timeout_s(settings)
        )
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
    params = workload_tasks(settings.prompt_words, settings.output_tokens)
    notes: list[str] = []
    order = list(settings.points() or default_concurrencies(facts.slots))
    readings: dict[int, list[LoadResult]] = {p: [] for p in order}
    warmup_s, window_s = settings.load_warmup_s, settings.window_s
    async with load_backend(settings) as backend:
        session = session_of(backend.client)
        passes = 0
        while passes < settings.passes or _more_passes(readings, passes, settings, notes):
            for p in order if passes % 2 == 0 else order[::-1]:
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
                    last = f"; the last failure: {point.last_error}" if point.last_error else ""
                    raise GymbenchError(f"no request finished at p={p} in {window:g} s ({point.errors} failed{last}): "
                                        "is the engine answering? raise +window_s for a slow one")  # fmt: skip
                readings[p].append(point)
                on_phase(f"p={p}: {point.requests_per_s:.2f} req/s", warmup_s + window_s)
            passes += 1
    return [merge_passes(readings[p]) for p in order], notes


def _more_passes(readings: dict[int, list[LoadResult]], passes: int, settings: CalibrateSettings,
                 notes: list[str]) -> bool:  # fmt: skip
    """Whether to measure the loads again: while some load's passes disagree (the machine's speed
    moved between them), two more passes at a time (ABBA again, so a steady drift still cancels),
    up to ``extra_passes``; a note says which loads and how far, and whether they still disagree.

    A calibration of llama.cpp with 4 slots whose two 8 s windows per load landed on a slow
    stretch read its passes -26.6% ... +12.8% apart and put the simulator's knee at 1.9 where the
    engine's was 4.6; measured again on a quieter stretch, the same calibration met it (issue 39)."""
    extra = passes - settings.passes
    if extra % 2 == 1:  # a pair's second pass, in the other order: a drift cancels over the pair
        return True
    spread = disagreeing(readings)
    if not spread:
        return False
    worst = ", ".join(f"p={p} ±{100 * s:.1f}%" for p, s in sorted(spread.items(), key=lambda item: -item[1])[:3])
    if extra >= settings.extra_passes:
        notes.append(
            f"after {passes} passes some loads' passes still disagree beyond ±{100 * PASSES_AGREE:g}% "
            f"(their mean's standard error: {worst}): the machine's speed moved during the calibration; "
            "repeat it on a quieter machine, or raise +extra_passes"
        )
        return False
    notes.append(
        f"passes {passes + 1}-{passes + 2} added: after {passes}, the passes disagreed beyond "
        f"±{100 * PASSES_AGREE:g}% (their mean's standard error: {worst})"
    )
    return True


def _output_tokens(points: list[LoadResult], where: str) -> int:
    """The tokens the engine generated per request under its own default (the median answer's)."""
    counted = [a.output_tokens for point in points for a in point.answers if a.output_tokens]
    if not counted:
        raise GymbenchError(
            f"the engine at {where} did not say how many tokens it generated (no usage, no timings): "
            "give the output length as +max_tokens=N"
        )
    return round(statistics.median(counted))
