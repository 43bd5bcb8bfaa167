"""A model server's Prometheus ``/metrics``: what it means engine by engine, how it is read, and watched.

The one module for server metrics: the engines' names (:class:`EngineMetrics`) and their
recognition, the bounded read (:func:`fetch_metrics_text`), the probe's counters (:class:`Counters`,
:func:`find_server_counters`), the watch around a collection (:class:`ServerWatch`) and the wait
for an idle server (:func:`settle`). ``collect``, ``tune``, ``diagnose``, the simulator's handle and
calibration all read ``/metrics`` through it.

vLLM, SGLang, llama.cpp and TGI each name the same few quantities differently (requests waiting,
requests running, KV-cache use, tokens generated, prompt tokens). An :class:`EngineMetrics` says
which sample names an engine uses for each; plugins register them through
``gymbench_register_engine_metrics`` (the built-ins in :mod:`gymbench.builtin.engines`, a third
party's the same way), and :func:`recognise` picks the engine whose names a server exposes. The
plugin hook runs once per run; what reads ``/metrics`` at every poll holds the recognised engine and
looks up its names only.
"""

from __future__ import annotations

import contextlib
import math
import re
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import http.client

QUANTITIES = ("running", "waiting", "kv_cache", "generated_tokens", "prompt_tokens")
"""The quantities gymbench reads from an engine, each an attribute of :class:`EngineMetrics`."""

AVERAGED = frozenset({"kv_cache"})
"""Shares (0-1), averaged over their label sets (data-parallel engines); the rest are summed."""


@dataclass(frozen=True)
class EngineMetrics:
    """One engine's sample names for each quantity, as its ``/metrics`` text writes them.

    A quantity may have several names (an engine that renamed it between versions, such as vLLM's
    ``vllm:gpu_cache_usage_perc`` and ``vllm:kv_cache_usage_perc``): the first one a server exposes
    is read, summed over its label sets. An empty tuple means the engine does not expose it. Name
    samples as they appear (a counter with its ``_total``, a histogram's ``_sum``).
    """

    name: str
    """What the record calls it (``"vllm"``); unique across plugins."""
    prefix: str
    """The prefix its own samples share (``"vllm:"``), named in the note when nothing is recognised."""
    running: tuple[str, ...] = ()
    """Gauge: requests being generated now (the batch)."""
    waiting: tuple[str, ...] = ()
    """Gauge: requests queued, not yet running (how much of the latency is queueing)."""
    kv_cache: tuple[str, ...] = ()
    """Gauge: share of the KV cache in use, 0-1."""
    generated_tokens: tuple[str, ...] = ()
    """Counter: output tokens generated since the server started."""
    prompt_tokens: tuple[str, ...] = ()
    """Counter: prompt tokens processed since the server started."""
    ttft_seconds: tuple[str, ...] = ()
    """Histogram family (without ``_sum``/``_count``) of time to first token, when the engine keeps one."""
    tokens_counted_at_finish: bool = False
    """The token counters advance only when a request finishes (llama.cpp, SGLang, TGI), so their
    increase over a short window counts whole requests, not the tokens made in it."""
    description: str = ""

    def names(self, quantity: str) -> tuple[str, ...]:
        names: tuple[str, ...] = getattr(self, quantity)
        return names

    def readable(self, present: Iterable[str]) -> list[str]:
        """The quantities among :data:`QUANTITIES` that a server exposing ``present`` lets us read."""
        seen = set(present)
        return [q for q in QUANTITIES if any(name in seen for name in self.names(q))]

    def unreadable(self) -> list[str]:
        """The quantities this engine does not expose at all."""
        return [q for q in QUANTITIES if not self.names(q)]

    def value(self, sums: Mapping[str, float], quantity: str) -> float | None:
        """``quantity`` from ``sums`` (sample name → value summed over label sets, see :func:`sample_sums`)."""
        for name in self.names(quantity):
            if name in sums:
                return sums[name]
        return None

    def in_flight(self, sums: Mapping[str, float]) -> float | None:
        """Requests the server holds now, running or queued; None when it exposes neither gauge."""
        running, waiting = self.value(sums, "running"), self.value(sums, "waiting")
        if running is None and waiting is None:
            return None
        return (running or 0.0) + (waiting or 0.0)

    def ttft_totals(self, sums: Mapping[str, float]) -> tuple[float, float] | None:
        """(Σ seconds, count) of the time-to-first-token histogram, when exposed."""
        for family in self.ttft_seconds:
            if f"{family}_sum" in sums and f"{family}_count" in sums:
                return sums[f"{family}_sum"], sums[f"{family}_count"]
        return None

    def wanted(self) -> frozenset[str]:
        """Every sample name this engine's readings need: a poll parses only these."""
        names = [n for q in QUANTITIES for n in self.names(q)]
        names += [f"{family}_{end}" for family in self.ttft_seconds for end in ("sum", "count")]
        return frozenset(names)


@dataclass(frozen=True)
class Recognition:
    """Which engine a server's ``/metrics`` belongs to, or why none."""

    engine: EngineMetrics | None
    reason: str | None = None
    """One line when no engine was recognised."""
    readable: tuple[str, ...] = ()
    """The quantities this server's samples let us read (a build may leave one of its engine's out)."""

    def record(self) -> dict[str, object]:
        """The fields a results record carries: ``engine`` (a name or null), and why, or what it lacks."""
        if self.engine is None:
            return {"engine": None, "engine_note": self.reason}
        return {"engine": self.engine.name, "unreadable": [q for q in QUANTITIES if q not in self.readable]}


def recognise(engines: Sequence[EngineMetrics], sample_names: Iterable[str]) -> Recognition:
    """The engine with the most quantities readable from ``sample_names``; the first registered on a tie."""
    present = set(sample_names)
    best: EngineMetrics | None = None
    best_readable: list[str] = []
    for engine in engines:
        readable = engine.readable(present)
        if len(readable) > len(best_readable):
            best, best_readable = engine, readable
    if best is not None:
        return Recognition(best, readable=tuple(best_readable))
    known = ", ".join(e.name for e in engines) or "none registered"
    prefixes = sorted({_prefix(name) for name in present})
    seen = ", ".join(prefixes[:8]) + (", ..." if len(prefixes) > 8 else "") if prefixes else "no samples"
    reason = f"no known engine's metric names among {len(present)} samples ({seen}); known engines: {known}"
    return Recognition(None, reason)


def _prefix(name: str) -> str:
    """``vllm:num_requests_running`` → ``vllm:``; ``tgi_queue_size`` → ``tgi_``."""
    if ":" in name:
        return name.split(":", 1)[0] + ":"
    return name.split("_", 1)[0] + "_"


def sample_sums(text: str, only: frozenset[str] | None = None) -> dict[str, float]:
    """Each sample name of Prometheus ``text`` → its value summed over label sets (``only``: just those).

    A hand parser rather than ``prometheus_client``'s: the probe reads ``/metrics`` every poll, and
    this skips every line but the few it needs. Lines that do not parse, and values that are not
    finite (NaN, ±Inf), are skipped.
    """
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if only is not None and name not in only:
            continue
        labelled = "{" in line
        if labelled and "}" not in line:
            continue
        rest = line.rpartition("}")[2] if labelled else line[len(name) :]
        try:
            value = float(rest.split()[0])  # a timestamp may follow the value
        except (IndexError, ValueError):
            continue
        if not math.isfinite(value):
            continue
        sums[name] = sums.get(name, 0.0) + value
    return sums


def averaged(engine: EngineMetrics, quantity: str, values: Mapping[str, float]) -> float | None:
    """``quantity`` from samples keyed with their labels (``name{a="b"}``), summed or averaged."""
    for name in engine.names(quantity):
        found = [v for k, v in values.items() if k == name or k.startswith(name + "{")]
        if found:
            return sum(found) / len(found) if quantity in AVERAGED else sum(found)
    return None


SCRAPE_DEADLINE_S = 5.0
"""The longest one ``/metrics`` read may take, from connecting to the last byte: a socket timeout
bounds each wait for a byte, not the whole answer, and a server that trickles one byte a second
would otherwise hold the scrape (and the run waiting on it) forever."""
SCRAPE_MAX_BYTES = 16 * 1024 * 1024
"""The most of an answer read: real engines write tens of kilobytes; past this it is not metrics."""


class ScrapeFailed(Exception):
    """``/metrics`` could not be read within the deadline and the byte cap; the message says why.
    ``slow``: the deadline passed or the cap was reached (a server misbehaving, worth a warning),
    not a plain refusal or HTTP error (a server without metrics, said in the record)."""

    def __init__(self, message: str, slow: bool = False) -> None:
        super().__init__(message)
        self.slow = slow


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
"""Control characters a server's bytes may put in an error (a status line of garbage): shown as
escapes, so a warning stays one line and never drives the terminal."""


def fetch_metrics_text(url: str, deadline_s: float | None = None, max_bytes: int | None = None) -> str:
    """``url``'s text, read within ``deadline_s`` in all and at most ``max_bytes`` (default: the
    module's :data:`SCRAPE_DEADLINE_S` and :data:`SCRAPE_MAX_BYTES`, read at each call); every scrape
    of ``/metrics`` (collect's watch, tune's probe, the simulator handle's read) and every health
    check (:func:`answers_ok`) goes through here.

    A timer shuts the socket down when the deadline passes, which ends a read blocked on a
    trickling server at once; the answer is read in chunks so a body that never ends stops at the
    cap. Every failure (refused, HTTP error, too slow, too big) is a :class:`ScrapeFailed`.
    """
    import contextlib
    import http.client
    import socket
    import threading
    from urllib.parse import urlsplit

    deadline_s = SCRAPE_DEADLINE_S if deadline_s is None else deadline_s
    max_bytes = SCRAPE_MAX_BYTES if max_bytes is None else max_bytes
    parts = urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    try:
        connection = kind(parts.hostname or "", parts.port, timeout=deadline_s)
    except (ValueError, http.client.HTTPException) as exc:
        raise ScrapeFailed(f"{url} could not be read ({exc})") from None
    expired = threading.Event()

    def cut() -> None:
        expired.set()
        sock = connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(deadline_s, cut)
    timer.daemon = True
    timer.start()
    try:
        connection.connect()  # the socket exists from here on, for the timer to shut down
        if expired.is_set():  # the deadline passed while connecting, before there was a socket to cut
            raise TimeoutError
        connection.request("GET", parts.path or "/", headers={"Accept": "text/plain"})
        answer = connection.getresponse()
        if answer.status != 200:
            raise ScrapeFailed(f"{url} answered HTTP {answer.status}")
        body = _read_capped(answer, max_bytes, url)
    except (http.client.HTTPException, OSError, ValueError) as exc:
        if expired.is_set() or isinstance(exc, TimeoutError):  # the socket's own timeout may fire first
            raise ScrapeFailed(f"{url} did not answer in full within {deadline_s:g} s; not scraped", True) from None
        reason = _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", str(getattr(exc, "strerror", None) or exc))
        raise ScrapeFailed(f"{url} could not be read ({reason[:300]})") from None
    finally:
        timer.cancel()
        connection.close()
    if expired.is_set():
        raise ScrapeFailed(f"{url} did not answer in full within {deadline_s:g} s; not scraped", True)
    return body.decode(errors="replace")


def _read_capped(answer: http.client.HTTPResponse, max_bytes: int, url: str) -> bytes:
    chunks, size = [], 0
    while chunk := answer.read1(65536):
        size += len(chunk)
        if size > max_bytes:
            raise ScrapeFailed(
                f"{url} answered more than {max_bytes // (1024 * 1024)} MiB; not metrics, not scraped", True
            )
        chunks.append(chunk)
    return b"".join(chunks)


HEALTH_DEADLINE_S = 2.0
"""The longest one ``/health`` check may take in all; a start-up loop polls it until its own deadline."""
HEALTH_MAX_BYTES = 64 * 1024


def answers_ok(url: str, deadline_s: float = HEALTH_DEADLINE_S) -> bool:
    """Whether ``url`` answers HTTP 200 in full within ``deadline_s`` (a health check). Bounded as a
    scrape is: a server that trickles its answer is not healthy, and never holds up the start-up
    loop polling it (a socket timeout alone bounds each byte, not the answer)."""
    try:
        fetch_metrics_text(url, deadline_s, HEALTH_MAX_BYTES)
    except ScrapeFailed:
        return False
    return True


SETTLE_MAX_S = 30.0
"""The longest a measurement waits for a server to finish the requests it still holds."""
SETTLE_POLL_S = 0.25


@dataclass(frozen=True)
class Settled:
    """What :func:`settle` found: how long it waited, and what the server still held after it."""

    waited_s: float
    held_at_start: float | None
    """Requests running or queued when the wait began; None when the server's gauges are unreadable."""
    left: float | None
    """Requests still held when the wait ended (more than zero: it gave up after ``max_s``)."""

    def note(self) -> str | None:
        """One line for a record's notes when the wait mattered, else None."""
        if self.left:
            return (f"the server still held {self.left:g} requests after {self.waited_s:.0f} s (another client?); "
                    "measured anyway, so this point may read low")  # fmt: skip
        if self.held_at_start:
            return (f"waited {self.waited_s:.1f} s for the server to finish {self.held_at_start:g} requests left "
                    "from before (an engine that keeps generating for a client that went away)")  # fmt: skip
        return None


async def settle(
    in_flight: Callable[[], Awaitable[float | None]],
    clock: Callable[[], float],
    max_s: float = SETTLE_MAX_S,
    poll_s: float = SETTLE_POLL_S,
) -> Settled:
    """Wait until the server holds no request (``in_flight()``, from its ``/metrics``), at most ``max_s``.

    Why: llama.cpp's server (and any engine that does not abort a request whose client went away)
    keeps generating the requests a measurement stopped waiting for. Measured on llama-server with 64
    slots: 256 cancelled requests kept it busy for 3 s, and a one-client calibration started then read
    24 requests/s where the idle server gives 32. A measurement starts on an idle server, or says it
    did not.
    """
    import asyncio

    began = clock()
    first = held = await in_flight()
    while held and clock() - began < max_s:
        await asyncio.sleep(poll_s)
        held = await in_flight()
    return Settled(clock() - began, first, held)


# --------------------------------------------------------------------------- where, and the probe's counters


def metrics_url(base_url: str) -> str:
    """``http://host:port/v1`` → ``http://host:port/metrics`` (``/metrics`` sits at the server's root)."""
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}/metrics"


@dataclass(frozen=True)
class Reading:
    """Requests waiting in the server's queue (how much of the latency is queueing), requests it is
    running (at a slot-bound server, how many of its slots are busy: a share of its full-slot
    throughput read within one window, so the machine's drift between windows cannot move it) and
    its cumulative generated tokens, whose increase over a window is the server's own measure of its
    throughput (:mod:`gymbench.tune.rates` prefers it to the client's estimate when both agree)."""

    waiting: float | None
    generation_tokens: float | None
    running: float | None = None


def parse(text: str, engine: EngineMetrics) -> Reading | None:
    """The waiting and running requests and generated tokens by ``engine``'s names; None when none
    can be read.

    An engine whose token counter advances only when a request finishes (llama.cpp, SGLang, TGI)
    gives no throughput here: over a poll window it counts whole requests, which the client already
    counts exactly, so its rate is read from the client and the record says so."""
    sums = sample_sums(text, engine.wanted())
    waiting, running = engine.value(sums, "waiting"), engine.value(sums, "running")
    generated = None if engine.tokens_counted_at_finish else engine.value(sums, "generated_tokens")
    if waiting is None and generated is None and running is None:
        return None
    return Reading(waiting, generated, running)


class Counters:
    """A server's counters, read by ``fetch`` (its ``/metrics`` text, or None when unreadable)
    through ``engine``'s names (when not given, recognised among ``engines`` once, from the first
    text it reads: the poll itself only looks names up)."""

    def __init__(
        self,
        fetch: Callable[[], str | None],
        where: str = "",
        engine: EngineMetrics | None = None,
        engines: Sequence[EngineMetrics] = (),
    ) -> None:
        self.fetch = fetch
        self.where = where
        self.engine = engine
        self.engines = engines
        self._recognised = engine is not None

    def in_flight(self) -> float | None:
        """Requests the server holds now (running or queued), by the engine's gauges; None when unreadable."""
        text, engine = self._scrape()
        return None if text is None or engine is None else engine.in_flight(sample_sums(text, engine.wanted()))

    def read(self) -> Reading | None:
        text, engine = self._scrape()
        return None if text is None or engine is None else parse(text, engine)

    def _scrape(self) -> tuple[str | None, EngineMetrics | None]:
        """The ``/metrics`` text and the engine it is read by (recognised from the first text read)."""
        text = self.fetch()
        if text is not None and not self._recognised:
            self.engine = recognise(self.engines, sample_sums(text)).engine
            self._recognised = True
        return text, self.engine


def http_fetch(url: str) -> Callable[[], str | None]:
    """Reads ``url`` within a deadline (:func:`fetch_metrics_text`); a server too slow or too wordy
    is said once, on stderr, and the probe goes on without it."""
    warned = False

    def fetch() -> str | None:
        nonlocal warned
        try:
            return fetch_metrics_text(url)
        except ScrapeFailed as exc:
            if exc.slow and not warned:
                warned = True
                print(f"gymbench: warning: {exc}; the probe goes on with the client's figures", file=sys.stderr)
            return None

    return fetch


@dataclass(frozen=True)
class ServerCounters:
    """What the probe found at the server's ``/metrics``: the counters it reads (or None) and why."""

    counters: Counters | None
    record: dict[str, object]
    """For the results record: ``url``, ``engine`` (a name or null), and what is read or why not."""


def find_server_counters(base_url: str | Sequence[str] | None, engines: Sequence[EngineMetrics]) -> ServerCounters:
    """Fetch ``base_url``'s ``/metrics`` once and recognise its engine among ``engines``.

    Several replicas (a list of base URLs) are read as one server: every read fetches each one's
    ``/metrics`` and joins the texts, and :func:`sample_sums` adds their samples up, so the queue
    and the generated tokens are the replicas' totals (a tune over three replicas read only the
    first one's, a third of the tokens). A replica that cannot be read makes the read None: a
    partial sum would read as a drop in throughput."""
    urls = [base_url] if isinstance(base_url, str) else [str(u) for u in base_url or () if u]
    if not urls:
        return ServerCounters(None, {"url": None, "engine": None, "engine_note": "this backend names no server"})
    each = [metrics_url(u) for u in urls]
    url = each[0] if len(each) == 1 else ", ".join(each)
    fetch = http_fetch(each[0]) if len(each) == 1 else _joined_fetch([http_fetch(u) for u in each])
    text = fetch()
    if text is None:
        return ServerCounters(None, {"url": url, "engine": None, "engine_note": f"{url} could not be read"})
    recognition = recognise(engines, sample_sums(text))
    record: dict[str, object] = {"url": url, **recognition.record()}
    if recognition.engine is None:
        return ServerCounters(None, record)
    engine = recognition.engine
    record["reads"] = _what_is_read(engine)
    counters = Counters(fetch, url, engine)
    return ServerCounters(counters if counters.read() is not None else None, record)


def _joined_fetch(fetches: Sequence[Callable[[], str | None]]) -> Callable[[], str | None]:
    """Every replica's ``/metrics`` text, one after another; None when any cannot be read."""

    def fetch() -> str | None:
        texts = [one() for one in fetches]
        return None if any(text is None for text in texts) else "\n".join(t for t in texts if t is not None)

    return fetch


def _what_is_read(engine: EngineMetrics) -> dict[str, str]:
    """One line per figure the probe wants: the name it reads, or why it reads none."""
    reads = {}
    waiting = engine.names("waiting")
    reads["waiting"] = waiting[0] if waiting else f"{engine.name} exposes no queue gauge"
    generated = engine.names("generated_tokens")
    if not generated:
        reads["generated_tokens"] = f"{engine.name} exposes no token counter: throughput is read from the client"
    elif engine.tokens_counted_at_finish:
        reads["generated_tokens"] = (
            f"{generated[0]} advances only when a request finishes, so throughput is read from the client"
        )
    else:
        reads["generated_tokens"] = generated[0]
    return reads


# --------------------------------------------------------------------------- the watch around a collection

HIGHLIGHTS = {
    "running": ("requests running", "gauge"),
    "waiting": ("requests waiting", "gauge"),
    "kv_cache": ("KV-cache use", "gauge"),
    "generated_tokens": ("tokens generated", "counter"),
    "prompt_tokens": ("prompt tokens", "counter"),
}
"""What a summary shows first (each key a quantity of :class:`EngineMetrics`)."""
OVER_TIME = ("running", "waiting", "kv_cache")


def scrape(
    url: str, deadline_s: float | None = None, on_slow: Callable[[str], None] | None = None
) -> tuple[dict[str, float] | None, str | None]:
    """Every sample of ``url`` keyed ``name{labels}`` (histogram buckets left out), or ``None`` and
    why not; never longer than ``deadline_s`` (:func:`fetch_metrics_text`). ``on_slow`` hears why
    when the server was too slow or said too much (not when it is merely absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = fetch_metrics_text(url, deadline_s)
    except ScrapeFailed as exc:
        if exc.slow and on_slow is not None:
            on_slow(str(exc))
        return None, str(exc)
    values: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith(("_bucket", "_created")):
                    continue
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()) if k != "model_name")
                key = f"{sample.name}{{{labels}}}" if labels else sample.name
                values[key] = values.get(key, 0.0) + float(sample.value)
    except (ValueError, TypeError) as exc:
        return None, f"{url} is not Prometheus text ({str(exc)[:80]})"
    return (values, None) if values else (None, f"{url} exposes no metrics")


def recognise_scraped(values: Mapping[str, float], engines: Sequence[EngineMetrics]) -> Recognition:
    """The engine whose names the scraped samples (keyed ``name{labels}``) use."""
    return recognise(engines, {key.split("{", 1)[0] for key in values})


def highlight(values: Mapping[str, float], key: str, engines: Sequence[EngineMetrics]) -> float | None:
    """A highlight's value by the names of the engine recognised among ``engines``, summed over label
    sets (a share such as KV-cache use: averaged)."""
    engine = recognise_scraped(values, engines).engine
    return averaged(engine, key, values) if engine is not None else None


def _warn(message: str) -> None:
    print(f"gymbench: warning: {message}", file=sys.stderr)


class ServerWatch:
    """``with ServerWatch(base_url, engines=...) as watch: collect()``, then ``watch.record()``.

    vLLM, SGLang, llama.cpp, TGI and the simulator expose queue length, running requests, KV-cache
    use and token counters, each under its own names; the engine is recognised among ``engines``
    (those the plugins register) from the first scrape, and the record says which, or why none.
    Scraping is cheap: one small GET before, one after, and one per ``interval_s`` on a background
    thread for the over-time plot. ``warn`` says (once) that a scrape was too slow."""

    def __init__(
        self,
        base_url: str | None,
        enabled: bool = True,
        interval_s: float = 1.0,
        *,
        engines: Sequence[EngineMetrics],
        warn: Callable[[str], None] = _warn,
    ) -> None:
        self.url = metrics_url(base_url) if base_url else None
        self.engines = engines
        self.recognition: Recognition | None = None
        self.enabled = enabled
        self.interval_s = interval_s
        self.before: dict[str, float] | None = None
        self.after: dict[str, float] | None = None
        self.note: str | None = None
        self.samples: list[dict[str, float | None]] = []
        self._say = warn
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._warned = False

    def _warn_once(self, why: str) -> None:
        """One line for the whole run, however many scrapes are too slow: the run goes on without them."""
        if not self._warned:
            self._warned = True
            self._say(f"{why}; the run goes on without the server's metrics from that scrape")

    def __enter__(self) -> ServerWatch:
        if not self.enabled:
            self.note = "not scraped (+scrape_metrics=false)"
        elif self.url is None:
            self.note = "not scraped: this backend names no model server (no base_url)"
        else:
            self.before, self.note = scrape(self.url, on_slow=self._warn_once)
        if self.before is not None:
            self.recognition = recognise_scraped(self.before, self.engines)
            self._started = time.monotonic()
            self._add_point(self.before)
            self._thread = threading.Thread(target=self._sample, name="gymbench-metrics", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        assert self.url is not None
        self.after, note = scrape(self.url, on_slow=self._warn_once)
        if self.after is None:
            self.note = f"scraped before the run only: {note}"
        else:
            self._add_point(self.after)

    def _sample(self) -> None:
        assert self.url is not None
        while not self._stop.wait(self.interval_s):
            values, _ = scrape(self.url, on_slow=self._warn_once)
            if values is not None:
                self._add_point(values)

    @property
    def engine(self) -> EngineMetrics | None:
        return self.recognition.engine if self.recognition is not None else None

    def _value(self, values: Mapping[str, float], key: str) -> float | None:
        return averaged(self.engine, key, values) if self.engine is not None else None

    def _add_point(self, values: Mapping[str, float]) -> None:
        point = {key: self._value(values, key) for key in OVER_TIME}
        self.samples.append({"t_s": time.monotonic() - self._started, **point})

    def record(self) -> dict[str, object]:
        """What goes into the summary and the results record (``summary.server_metrics``)."""
        if self.before is None:
            return {"url": self.url, "note": self.note, "engine": None}
        after = self.after or {}
        assert self.recognition is not None
        return {
            "url": self.url,
            "note": self.note,
            **self.recognition.record(),
            "before": self.before,
            "after": after,
            "highlights": self._highlights(after),
            "over_time": self.samples,
        }

    def _highlights(self, after: Mapping[str, float]) -> list[dict[str, object]]:
        shown = []
        for key, (label, kind) in HIGHLIGHTS.items():
            end = self._value(after, key)
            if end is None:
                continue
            start = self._value(self.before or {}, key) or 0.0
            value = end - start if kind == "counter" else end
            peak = max((s[key] for s in self.samples if s.get(key) is not None), default=None)  # type: ignore[type-var]
            shown.append({"key": key, "label": label, "value": value, "peak": peak, "text": _text(key, value, peak)})
        ttft = self._ttft_mean(after)
        if ttft is not None:
            shown.append({"key": "ttft_mean", "label": "server TTFT", "value": ttft, "peak": None,
                          "text": f"{ttft * 1000:,.0f} ms mean during the run"})  # fmt: skip
        return shown

    def _ttft_mean(self, after: Mapping[str, float]) -> float | None:
        """Mean time to first token by the engine's own histogram, over the requests of the run."""
        if self.engine is None:
            return None
        end = self.engine.ttft_totals(_by_name(after))
        start = self.engine.ttft_totals(_by_name(self.before or {})) or (0.0, 0.0)
        if end is None or end[1] <= start[1]:
            return None
        return (end[0] - start[0]) / (end[1] - start[1])


class ReplicaWatch:
    """Several replicas' ``/metrics``, one :class:`ServerWatch` each, as one watch: the record is the
    first replica's (so what reads one server's record reads it) with every replica's under
    ``replicas``, each with its own engine recognised."""

    def __init__(self, watches: Sequence[ServerWatch]) -> None:
        self.watches = list(watches)
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> ReplicaWatch:
        with contextlib.ExitStack() as stack:
            for watch in self.watches:
                stack.enter_context(watch)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._stack.close()

    def record(self) -> dict[str, object]:
        records = [watch.record() for watch in self.watches]
        return {**records[0], "replicas": records}


def _by_name(values: Mapping[str, float]) -> dict[str, float]:
    """Samples keyed ``name{labels}`` → each name's sum over its label sets."""
    sums: dict[str, float] = {}
    for key, value in values.items():
        name = key.split("{", 1)[0]
        sums[name] = sums.get(name, 0.0) + value
    return sums


def _text(key: str, value: float, peak: float | None) -> str:
    if key in ("generated_tokens", "prompt_tokens"):
        return f"{value:,.0f} during the run"
    if key == "kv_cache":
        return f"{value:.0%} at the end" + (f" (peak {peak:.0%})" if peak is not None else "")
    return f"{value:g} at the end" + (f" (peak {peak:g})" if peak is not None else "")
