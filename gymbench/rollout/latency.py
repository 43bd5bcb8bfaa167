"""What a serving engineer reads first: TTFT, ITL, TPOT and end-to-end latency percentiles with
confidence intervals, and goodput (the share of rollouts within a latency SLO).

Definitions (per rollout, seconds):

- the stages of a rollout (:data:`ROLLOUT_STAGES`) are disjoint and add up to its ``total``
  exactly: ``slot_wait`` (for the strategy's slot), ``connection_wait`` (for a pooled connection,
  every try), ``ttft`` (connection in hand to the first token; absent unless streamed),
  ``generation`` (the rest of the answer), ``backend_other`` (the rest of the backend call: the
  body built, failed tries and their backoff, the answer parsed) and ``verification``.
- ``e2e``: the request, connection wait + time to first token + the rest (no slot wait, no
  retries' backoff, no verification); what the server's client sees.
- ``ttft``: time to the first streamed token (only with ``+stream=true``).
- ``ttst``: time to the second streamed token (the first gap after prefill, where a server that
  prefills in chunks or schedules the decode late shows it; streamed only).
- ``itl``: the mean gap between streamed tokens of the rollout (only when streamed).
- ``tpot``: time per output token after the first, ``generation / (output tokens - 1)``, when
  streamed; without streaming, ``e2e / output tokens``.

Intervals are distribution-free order-statistic intervals (binomial ranks): exact coverage of at
least the confidence for any distribution, no resampling. When the sample is too small for an
interval on both sides (p99 needs 368 rollouts at 95%, p95 72, p90 36, p50 6), the percentile is marked
``small_sample`` and printed with a ``*``, as guidellm does.

numpy and scipy are imported by the functions that compute: the ``collect`` and ``tune`` settings
read :class:`Slo` from here, and their ``--help`` must not pay for numpy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    import numpy as np

    from gymbench.types import Generation

LATENCY_METRICS = ("ttft", "ttst", "itl", "tpot", "e2e")
PERCENTILES = (50, 90, 95, 99)
CONFIDENCE = 0.95
REQUEST_STAGES = ("connection_wait", "ttft", "generation")
"""The backend's timed stages; :func:`rollout_timings` and :func:`rollout_latencies` add them up
by name (a test keeps them in step with this tuple)."""
ROLLOUT_STAGES = ("slot_wait", *REQUEST_STAGES, "backend_other", "verification")
"""Disjoint; their sum is the rollout's ``total``."""


def rollout_timings(
    slot_wait: float, generation: Generation | None, backend_s: float, verification_s: float
) -> dict[str, float]:
    """A rollout's stages and ``total``. ``backend_other`` is what the backend call took beyond
    its timed request stages, so the stages add up to the total by construction; a backend that
    timed more than the call it ran in has a bug, and its remainder is kept (negative) to show it."""
    timings: dict[str, float] = {"slot_wait": slot_wait}
    if generation is not None:
        timings.update(generation.timings)
    get = timings.get  # REQUEST_STAGES, spelled out: this runs for every rollout
    timed = get("connection_wait", 0.0) + get("ttft", 0.0) + get("generation", 0.0)
    timings["backend_other"] = backend_s - timed
    timings["verification"] = verification_s
    timings["total"] = slot_wait + backend_s + verification_s
    return timings


def rollout_latencies(timings: Mapping[str, float], completion_tokens: int) -> dict[str, float]:
    """The four latencies of one completed rollout (those its timings allow)."""
    get = timings.get  # REQUEST_STAGES, spelled out: this runs for every rollout
    e2e = get("connection_wait", 0.0) + get("ttft", 0.0) + get("generation", 0.0)
    found = {"e2e": e2e}
    if "ttft" in timings:
        found["ttft"] = timings["ttft"]
        if completion_tokens > 1:
            found["tpot"] = timings.get("generation", 0.0) / (completion_tokens - 1)
    elif completion_tokens > 0:
        found["tpot"] = e2e / completion_tokens
    if "inter_token" in timings:
        found["itl"] = timings["inter_token"]
    if "second_token" in timings:
        found["ttst"] = timings["second_token"]
    return found


class PercentileEstimate(TypedDict):
    """A percentile and its distribution-free interval (``None`` on a side the sample is too small for)."""

    value: float
    low: float | None
    high: float | None
    small_sample: bool


def percentile_table(values: Sequence[float], confidence: float = CONFIDENCE) -> dict[str, object]:
    """``{"count": n, "p50": {"value", "low", "high", "small_sample"}, ...}`` for ``PERCENTILES``."""
    import numpy as np

    ordered = np.sort(np.asarray(values, dtype=float))
    table: dict[str, object] = {"count": int(ordered.size)}
    for q in PERCENTILES:
        table[f"p{q}"] = _percentile(ordered, q / 100, confidence)
    return table


def _percentile(ordered: np.ndarray, q: float, confidence: float) -> PercentileEstimate | None:
    import numpy as np

    if not ordered.size:
        return None
    low_rank, high_rank = order_statistic_ranks(int(ordered.size), q, confidence)
    small = low_rank < 1 or high_rank > ordered.size
    return {
        "value": float(np.quantile(ordered, q)),
        "low": None if small else float(ordered[low_rank - 1]),
        "high": None if small else float(ordered[high_rank - 1]),
        "small_sample": small,
    }


def order_statistic_ranks(n: int, q: float, confidence: float) -> tuple[int, int]:
    """1-based ranks ``(l, u)`` with ``P(X_(l) <= quantile_q <= X_(u)) >= confidence`` for any
    continuous distribution; ``l < 1`` or ``u > n`` means ``n`` samples cannot give one."""
    from scipy.stats import binom

    tail = (1 - confidence) / 2
    low = int(binom.ppf(tail, n, q))
    high = int(binom.ppf(1 - tail, n, q)) + 1
    return low, high


@dataclass(frozen=True)
class Slo:
    """Latency objectives in seconds; a rollout is "good" when it meets every one that is set."""

    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: float | None = None
    tpot_s: float | None = None

    def limits(self) -> dict[str, float | None]:
        """Each objective by its latency's name (``ttft``, ``e2e``, ``itl``, ``tpot``)."""
        return {"ttft": self.ttft_s, "e2e": self.e2e_s, "itl": self.itl_s, "tpot": self.tpot_s}

    @property
    def active(self) -> bool:
        """Read for every rollout: the four fields, not :meth:`limits`' dict."""
        return not (self.ttft_s is None and self.e2e_s is None and self.itl_s is None and self.tpot_s is None)

    def met(self, latencies: Mapping[str, float]) -> bool:
        """A rollout without a latency (TTFT or ITL unstreamed, ITL of a one-token answer) cannot show
        it met that objective."""
        for name, limit in self.limits().items():
            if limit is not None and not latencies.get(name, math.inf) <= limit:
                return False
        return True

    def describe(self) -> str:
        names = {"ttft": "TTFT", "e2e": "e2e", "itl": "ITL", "tpot": "TPOT"}
        return " and ".join(f"{names[n]} <= {v * 1e3:g} ms" for n, v in self.limits().items() if v is not None)
