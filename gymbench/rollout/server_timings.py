"""The server's own timings beside the client's: where a rollout's time goes before the server works.

A server that reports per-request timings (llama.cpp's ``timings``, kept in the row as
``server_timings``) says how long the prompt took (``prompt_ms``: from the moment a slot started
the prompt to the first token) and how long each generated token took (``predicted_per_token_ms``).
Set against the client's TTFT and ITL (:mod:`gymbench.rollout.latency`), the difference is the time
the server did not see as work:

- ``before_prompt = TTFT - prompt_ms``: the request's way to the server and the first token's way
  back, the time it waited for a free slot (llama.cpp starts ``prompt_ms`` only when a slot takes
  the request, and also not before the batch in flight finishes), and the client's own delays.
- without streaming there is no TTFT; ``outside_server = e2e - (prompt_ms + predicted_ms)`` says the
  same of the whole request.

Only rows with both sides are compared, so the medians are of the same rollouts. When most of TTFT
(or e2e) is spent outside the server and that is more than :data:`LARGE_MIN_S`, the summary says so
in one line (:func:`finding`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from gymbench.rollout.reservoir import Reservoir
from gymbench.units import duration

LARGE_SHARE = 0.5
"""Above half, queueing and the network, not the server's prompt, decide TTFT: tuning the engine's
prefill would not help, more slots or less parallelism would."""
LARGE_MIN_S = 0.02
"""Below 20 ms the gap is loopback HTTP, JSON and the client's event loop on a small local model
(a few ms each on a busy machine), not a queue worth acting on."""
SERIES = ("ttft", "prompt", "before_prompt", "before_prompt_share", "itl", "server_itl", "e2e", "server_total",
          "outside_server", "outside_server_share")  # fmt: skip


class Quantiles(TypedDict):
    p50: float | None
    p90: float | None


class ServerComparison(TypedDict, total=False):
    """The ``server_timings`` section of a collect summary (only present when some row had them)."""

    rows: int
    """Completed rollouts whose server reported timings."""
    ttft_vs_prompt: dict[str, Quantiles]
    """Streamed rows: client ``ttft_s``, server ``prompt_s``, ``before_prompt_s`` and its ``share`` of TTFT."""
    itl_vs_predicted: dict[str, Quantiles]
    """Streamed rows with two or more tokens: client ``itl_s``, server ``predicted_per_token_s``."""
    e2e_vs_server: dict[str, Quantiles]
    """Every row: client ``e2e_s``, server ``server_s`` (prompt + predicted), ``outside_server_s``, ``share``."""
    finding: str | None
    """One line when most of the time is spent outside the server, else ``None``."""


@dataclass
class ServerTimingsStats:
    """Paired client and server samples, one reservoir per series (seconds, or a share)."""

    rows: int = 0
    series: dict[str, Reservoir] = field(default_factory=lambda: {name: Reservoir() for name in SERIES})

    def add(self, server: Mapping[str, float], client: Mapping[str, float]) -> None:
        """One completed rollout: its row's ``server_timings`` (ms) and its latencies (s)."""
        self.rows += 1
        prompt = server.get("prompt_ms")
        ttft = client.get("ttft")
        if prompt is not None and ttft is not None:
            self._pair("ttft", ttft, "prompt", prompt / 1e3, "before_prompt")
        if "predicted_per_token_ms" in server and "itl" in client:
            self.series["itl"].add(client["itl"])
            self.series["server_itl"].add(server["predicted_per_token_ms"] / 1e3)
        if prompt is not None and "predicted_ms" in server and "e2e" in client:
            self._pair("e2e", client["e2e"], "server_total", (prompt + server["predicted_ms"]) / 1e3, "outside_server")

    def _pair(self, client_name: str, client: float, server_name: str, server: float, gap_name: str) -> None:
        self.series[client_name].add(client)
        self.series[server_name].add(server)
        self.series[gap_name].add(client - server)
        if client > 0:
            self.series[f"{gap_name}_share"].add((client - server) / client)

    def absorb(self, other: ServerTimingsStats) -> None:
        self.rows += other.rows
        for name, reservoir in other.series.items():
            self.series[name].absorb(reservoir)

    def summary(self) -> ServerComparison | None:
        if not self.rows:
            return None
        found: ServerComparison = {"rows": self.rows}
        sections = {
            "ttft_vs_prompt": {"ttft_s": "ttft", "prompt_s": "prompt", "before_prompt_s": "before_prompt",
                               "share": "before_prompt_share"},
            "itl_vs_predicted": {"itl_s": "itl", "predicted_per_token_s": "server_itl"},
            "e2e_vs_server": {"e2e_s": "e2e", "server_s": "server_total", "outside_server_s": "outside_server",
                              "share": "outside_server_share"},
        }  # fmt: skip
        for section, names in sections.items():
            if self.series[next(iter(names.values()))].values:
                found[section] = {key: self._quantiles(name) for key, name in names.items()}  # type: ignore[literal-required]
        found["finding"] = finding(found)
        return found

    def _quantiles(self, name: str) -> Quantiles:
        p50, p90 = self.series[name].percentiles((50, 90))
        return {"p50": p50, "p90": p90}


def finding(found: ServerComparison) -> str | None:
    """One line when most of the median TTFT (streamed) or e2e (not streamed) is spent outside the
    server; TTFT when there is one, since prompt time is where queueing for a slot shows."""
    streamed = found.get("ttft_vs_prompt")
    what, figures, gap = (
        ("TTFT", streamed, "before_prompt_s")
        if streamed
        else ("request time", found.get("e2e_vs_server"), "outside_server_s")
    )
    if not figures:
        return None
    share, seconds = figures["share"]["p50"], figures[gap]["p50"]
    if share is None or seconds is None or share <= LARGE_SHARE or seconds < LARGE_MIN_S:
        return None
    where = "before the server starts the prompt" if what == "TTFT" else "outside the server's prompt and generation"
    return (
        f"most of {what} ({share:.0%}, median {seconds * 1e3:.0f} ms) is spent {where}: "
        "waiting for a free slot, in the network or in the client; raise the server's slots "
        "(llama.cpp -np, vLLM --max-num-seqs) or lower parallelism"
    )


COMPARISONS = (
    ("ttft_vs_prompt", "TTFT vs prompt_ms", "ttft_s", "prompt_s", "before_prompt_s"),
    ("itl_vs_predicted", "ITL vs predicted_per_token_ms", "itl_s", "predicted_per_token_s", None),
    ("e2e_vs_server", "e2e vs prompt_ms + predicted_ms", "e2e_s", "server_s", "outside_server_s"),
)
COMPARISON_HEADERS = ("client vs server", "client p50 / p90", "server p50 / p90", "difference p50 / p90",
                      "share of client p50")  # fmt: skip


def comparison_rows(found: Mapping[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """The comparison (a :class:`ServerComparison`, or one read back from a record) as table rows,
    for the terminal summary and the HTML report alike."""
    rows = []
    for section, label, client, server, gap in COMPARISONS:
        figures = found.get(section)
        if not figures:
            continue
        share = figures["share"]["p50"] if "share" in figures else None
        rows.append((
            label,
            _pair(figures[client]),
            _pair(figures[server]),
            _pair(figures[gap]) if gap else "-",
            "-" if share is None else f"{share:.0%}",
        ))  # fmt: skip
    return rows


def _pair(quantiles: Mapping[str, float | None]) -> str:
    return f"{duration(quantiles['p50'])} / {duration(quantiles['p90'])}"
