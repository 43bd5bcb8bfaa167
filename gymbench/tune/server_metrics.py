"""Reading a model server's own counters from its Prometheus ``/metrics`` (vLLM's and SGLang's names).

Two figures: requests waiting in the server's queue (how much of the latency is queueing) and the
cumulative count of generated tokens, whose increase over a window is the server's own measure of
its throughput (:mod:`gymbench.rates` prefers it to the client's estimate when both agree). The
simulator serves vLLM's names, so it is read the same way as a real vLLM.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
GENERATED = ("vllm:generation_tokens_total", "sglang:generation_tokens_total")


@dataclass(frozen=True)
class Reading:
    waiting: float
    generation_tokens: float | None


def metrics_url(base_url: str) -> str:
    """``http://host:port/v1`` → ``http://host:port/metrics``."""
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}/metrics"


def parse(text: str) -> Reading | None:
    """The waiting requests and generated tokens, each summed over its labels; None without a queue."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in WAITING or name in GENERATED:
            try:
                sums[name] = sums.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
    waiting = [sums[n] for n in WAITING if n in sums]
    generated = [sums[n] for n in GENERATED if n in sums]
    if not waiting:
        return None
    return Reading(sum(waiting), sum(generated) if generated else None)


class Counters:
    """A server's counters, read by ``fetch`` (its ``/metrics`` text, or None when unreadable)."""

    def __init__(self, fetch: Callable[[], str | None], where: str = "") -> None:
        self.fetch = fetch
        self.where = where

    def read(self) -> Reading | None:
        text = self.fetch()
        return parse(text) if text is not None else None


def http_fetch(url: str) -> Callable[[], str | None]:
    def fetch() -> str | None:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return answer.read().decode(errors="replace")
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):
            return None

    return fetch


def server_counters(base_url: str | None) -> Counters | None:
    """The counters at ``base_url``'s ``/metrics``, or None when it serves none we know."""
    if not base_url:
        return None
    url = metrics_url(base_url)
    counters = Counters(http_fetch(url), url)
    return counters if counters.read() is not None else None
