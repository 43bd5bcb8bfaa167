"""The server's own view of a run: its Prometheus ``/metrics`` before, during and after.

vLLM, SGLang and the simulator expose queue length, running requests, KV-cache use and token
counters there; a report that shows them beside the client's figures tells a slow client from a
full server. Scraping is cheap (one small GET before, one after, and one per ``interval_s`` on a
background thread for the over-time plot); ``+scrape_metrics=false`` turns it off. Nothing
exposed: nothing scraped and one line saying why.
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from types import TracebackType

from gymbench.tune.server_metrics import metrics_url

HIGHLIGHTS = {
    "running": ("requests running", ("vllm:num_requests_running", "sglang:num_running_reqs"), "gauge"),
    "waiting": ("requests waiting", ("vllm:num_requests_waiting", "sglang:num_queue_reqs"), "gauge"),
    "kv_cache": (
        "KV-cache use",
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
        "gauge",
    ),  # fmt: skip
    "generated_tokens": (
        "tokens generated",
        ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
        "counter",
    ),  # fmt: skip
    "prompt_tokens": ("prompt tokens", ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"), "counter"),
}
"""What a summary shows first, by the names vLLM and SGLang use (the simulator uses vLLM's)."""
OVER_TIME = ("running", "waiting", "kv_cache")


def scrape(url: str, timeout_s: float = 2.0) -> tuple[dict[str, float] | None, str | None]:
    """Every sample of ``url`` (histogram buckets left out), or ``None`` and why not."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            text = answer.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return None, f"{url} answered HTTP {exc.code}"
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        return None, f"{url} could not be read ({getattr(exc, 'reason', exc)})"
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


def highlight(values: Mapping[str, float], key: str) -> float | None:
    """A highlight's value: the first of its names the server uses, summed over label sets."""
    for name in HIGHLIGHTS[key][1]:
        found = [v for k, v in values.items() if k == name or k.startswith(name + "{")]
        if found:
            return sum(found)
    return None


class ServerWatch:
    """``with ServerWatch(base_url) as watch: collect()``, then ``watch.record()``."""

    def __init__(self, base_url: str | None, enabled: bool = True, interval_s: float = 1.0) -> None:
        self.url = metrics_url(base_url) if base_url else None
        self.enabled = enabled
        self.interval_s = interval_s
        self.before: dict[str, float] | None = None
        self.after: dict[str, float] | None = None
        self.note: str | None = None
        self.samples: list[dict[str, float | None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0

    def __enter__(self) -> ServerWatch:
        if not self.enabled:
            self.note = "not scraped (+scrape_metrics=false)"
        elif self.url is None:
            self.note = "not scraped: this backend names no model server (no base_url)"
        else:
            self.before, self.note = scrape(self.url)
        if self.before is not None:
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
        self.after, note = scrape(self.url)
        if self.after is None:
            self.note = f"scraped before the run only: {note}"
        else:
            self._add_point(self.after)

    def _sample(self) -> None:
        assert self.url is not None
        while not self._stop.wait(self.interval_s):
            values, _ = scrape(self.url)
            if values is not None:
                self._add_point(values)

    def _add_point(self, values: Mapping[str, float]) -> None:
        point = {key: highlight(values, key) for key in OVER_TIME}
        self.samples.append({"t_s": time.monotonic() - self._started, **point})

    def record(self) -> dict[str, object]:
        """What goes into the summary and the results record (``summary.server_metrics``)."""
        if self.before is None:
            return {"url": self.url, "note": self.note}
        after = self.after or {}
        return {
            "url": self.url,
            "note": self.note,
            "before": self.before,
            "after": after,
            "highlights": self._highlights(after),
            "over_time": self.samples,
        }

    def _highlights(self, after: Mapping[str, float]) -> list[dict[str, object]]:
        shown = []
        for key, (label, _, kind) in HIGHLIGHTS.items():
            end = highlight(after, key)
            if end is None:
                continue
            start = highlight(self.before or {}, key) or 0.0
            value = end - start if kind == "counter" else end
            peak = max((s[key] for s in self.samples if s.get(key) is not None), default=None)  # type: ignore[type-var]
            shown.append({"key": key, "label": label, "value": value, "peak": peak, "text": _text(key, value, peak)})
        return shown


def _text(key: str, value: float, peak: float | None) -> str:
    if key in ("generated_tokens", "prompt_tokens"):
        return f"{value:,.0f} during the run"
    if key == "kv_cache":
        return f"{value:.0%} at the end" + (f" (peak {peak:.0%})" if peak is not None else "")
    return f"{value:g} at the end" + (f" (peak {peak:g})" if peak is not None else "")
