"""The server's own view of a run: its Prometheus ``/metrics`` before, during and after.

vLLM, SGLang, llama.cpp, TGI and the simulator expose queue length, running requests, KV-cache use
and token counters there, each under its own names; the engine is recognised from the first scrape
(:mod:`gymbench.engine_metrics`, names registered by plugins) and the record says which, or why
none. A report that shows them beside the client's figures tells a slow client from a full server.
Scraping is cheap (one small GET before, one after, and one per ``interval_s`` on a background
thread for the over-time plot); ``+scrape_metrics=false`` turns it off. Nothing exposed: nothing
scraped and one line saying why.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

from gymbench.collect.progress import warn
from gymbench.engine_metrics import (
    EngineMetrics,
    Recognition,
    ScrapeFailed,
    averaged,
    fetch_metrics_text,
    recognise,
)
from gymbench.tune.server_metrics import metrics_url, registered_engines

HIGHLIGHTS = {
    "running": ("requests running", "gauge"),
    "waiting": ("requests waiting", "gauge"),
    "kv_cache": ("KV-cache use", "gauge"),
    "generated_tokens": ("tokens generated", "counter"),
    "prompt_tokens": ("prompt tokens", "counter"),
}
"""What a summary shows first (each key a quantity of :class:`~gymbench.engine_metrics.EngineMetrics`)."""
OVER_TIME = ("running", "waiting", "kv_cache")


def scrape(
    url: str, deadline_s: float | None = None, on_slow: Callable[[str], None] | None = None
) -> tuple[dict[str, float] | None, str | None]:
    """Every sample of ``url`` (histogram buckets left out), or ``None`` and why not; never longer
    than ``deadline_s`` (:func:`~gymbench.engine_metrics.fetch_metrics_text`). ``on_slow`` hears
    why when the server was too slow or said too much (not when it is merely absent)."""
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


def highlight(values: Mapping[str, float], key: str, engine: EngineMetrics | None = None) -> float | None:
    """A highlight's value by ``engine``'s names (recognised from ``values`` when not given), summed
    over label sets (a share such as KV-cache use: averaged)."""
    if engine is None:
        engine = recognise_scraped(values, registered_engines()).engine
    return averaged(engine, key, values) if engine is not None else None


class ServerWatch:
    """``with ServerWatch(base_url) as watch: collect()``, then ``watch.record()``."""

    def __init__(
        self,
        base_url: str | None,
        enabled: bool = True,
        interval_s: float = 1.0,
        engines: Sequence[EngineMetrics] | None = None,
    ) -> None:
        """``engines``: the engines to recognise (default: every one the plugins register)."""
        self.url = metrics_url(base_url) if base_url else None
        self.engines = engines
        self.recognition: Recognition | None = None
        self.enabled = enabled
        self.interval_s = interval_s
        self.before: dict[str, float] | None = None
        self.after: dict[str, float] | None = None
        self.note: str | None = None
        self.samples: list[dict[str, float | None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._warned = False

    def _warn_once(self, why: str) -> None:
        """One line for the whole run, however many scrapes are too slow: the run goes on without them."""
        if not self._warned:
            self._warned = True
            warn(f"{why}; the run goes on without the server's metrics from that scrape")

    def __enter__(self) -> ServerWatch:
        if not self.enabled:
            self.note = "not scraped (+scrape_metrics=false)"
        elif self.url is None:
            self.note = "not scraped: this backend names no model server (no base_url)"
        else:
            self.before, self.note = scrape(self.url, on_slow=self._warn_once)
        if self.before is not None:
            engines = self.engines if self.engines is not None else registered_engines()
            self.recognition = recognise_scraped(self.before, engines)
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
