"""Reading a model server's own counters from its Prometheus ``/metrics``, by its engine's names.

Two figures: requests waiting in the server's queue (how much of the latency is queueing) and the
cumulative count of generated tokens, whose increase over a window is the server's own measure of
its throughput (:mod:`gymbench.tune.rates` prefers it to the client's estimate when both agree). Which
names to read comes from the engine recognised at the start (:mod:`gymbench.engine_metrics`,
registered by plugins); the simulator serves vLLM's names, so it is read as a real vLLM is.

An engine whose token counter advances only when a request finishes (llama.cpp, SGLang, TGI) gives
no throughput here: over a poll window it counts whole requests, which the client already counts
exactly, so its rate is read from the client and the record says so.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from gymbench.engine_metrics import (
    EngineMetrics,
    Recognition,
    ScrapeFailed,
    fetch_metrics_text,
    recognise,
    sample_sums,
)


@dataclass(frozen=True)
class Reading:
    waiting: float | None
    generation_tokens: float | None


def metrics_url(base_url: str) -> str:
    """``http://host:port/v1`` → ``http://host:port/metrics``."""
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}/metrics"


def parse(text: str, engine: EngineMetrics) -> Reading | None:
    """The waiting requests and generated tokens by ``engine``'s names; None when neither can be read."""
    sums = sample_sums(text, engine.wanted())
    waiting = engine.value(sums, "waiting")
    generated = None if engine.tokens_counted_at_finish else engine.value(sums, "generated_tokens")
    if waiting is None and generated is None:
        return None
    return Reading(waiting, generated)


def registered_engines() -> list[EngineMetrics]:
    """Every engine the installed plugins register (asks the plugin manager: once per run)."""
    from gymbench.plugins import Plugins

    return Plugins().engine_metrics()


class Counters:
    """A server's counters, read by ``fetch`` (its ``/metrics`` text, or None when unreadable)
    through ``engine``'s names (when not given, recognised once, from the first text it reads:
    the poll itself only looks names up)."""

    def __init__(self, fetch: Callable[[], str | None], where: str = "", engine: EngineMetrics | None = None) -> None:
        self.fetch = fetch
        self.where = where
        self.engine = engine
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
            self.engine = recognise(registered_engines(), sample_sums(text)).engine
            self._recognised = True
        return text, self.engine


def http_fetch(url: str) -> Callable[[], str | None]:
    """Reads ``url`` within a deadline (:func:`~gymbench.engine_metrics.fetch_metrics_text`); a
    server too slow or too wordy is said once, on stderr, and the probe goes on without it."""
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


def find_server_counters(base_url: str | None, engines: Sequence[EngineMetrics]) -> ServerCounters:
    """Fetch ``base_url``'s ``/metrics`` once and recognise its engine among ``engines``."""
    if not base_url:
        return ServerCounters(None, {"url": None, "engine": None, "engine_note": "this backend names no server"})
    url = metrics_url(base_url)
    fetch = http_fetch(url)
    text = fetch()
    if text is None:
        return ServerCounters(None, {"url": url, "engine": None, "engine_note": f"{url} could not be read"})
    recognition = recognise(engines, sample_sums(text))
    record: dict[str, object] = {"url": url, **recognition.record()}
    if recognition.engine is None:
        return ServerCounters(None, record)
    engine = recognition.engine
    record["reads"] = _what_is_read(engine, recognition)
    counters = Counters(fetch, url, engine)
    return ServerCounters(counters if counters.read() is not None else None, record)


def _what_is_read(engine: EngineMetrics, recognition: Recognition) -> dict[str, str]:
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


def server_counters(base_url: str | None, engines: Sequence[EngineMetrics] | None = None) -> Counters | None:
    """The counters at ``base_url``'s ``/metrics``, or None when it serves none we know."""
    return find_server_counters(base_url, engines if engines is not None else registered_engines()).counters
