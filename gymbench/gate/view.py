"""What a comparison shows, in the order a reviewer reads it: the verdict with its counts, then the
benchmarks that changed (one row each, on the metric that changed), then everything else collapsed
with its reason said once. The terminal, markdown and HTML views all render this one object, so they
never disagree about what changed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from gymbench.gate.compare import TIME_NOT_GATED, MetricComparison, Skipped, SuiteComparison
from gymbench.gate.format import SHIFT_SHOWN, VERDICT_MARK, percent, value, verdict
from gymbench.labels import label

HEADLINE_METRICS = (
    "time",
    "step_time",
    "rollouts_per_s",
    "samples_per_s",
    "tokens_per_s",
    "requests_per_s",
    "latency",
    "latency_p50",
    "instructions",
)
"""The metric a benchmark is shown by, first found first: what its author would quote."""
CHANGED = ("regressed", "improved", "inconclusive")
DECIDED = ("regressed", "improved")
SECTION_TITLES = {"regressed": "Regressions", "improved": "Improvements", "inconclusive": "Inconclusive"}
ROW_HEADERS = ("benchmark", "metric", "baseline → candidate", "change [interval]", "verdict")
QUIET_TITLE = "unchanged or not gated"
_RANK = {"regressed": 0, "inconclusive": 1, "improved": 2, "pass": 3, "ungated": 3}


def headline_metric(names: Sequence[str]) -> str | None:
    """The metric a benchmark is shown by when none is chosen: the first of :data:`HEADLINE_METRICS`
    it has, else its first."""
    return next((name for name in HEADLINE_METRICS if name in names), names[0] if names else None)


@dataclass(frozen=True)
class BenchmarkRow:
    """One benchmark: the metric it is shown by (the one that changed most, else its headline
    metric) and its other metrics, folded under it."""

    benchmark: str
    status: str
    """``regressed``, ``improved``, ``inconclusive`` or ``quiet`` (unchanged or not gated)."""
    shown: MetricComparison
    others: list[MetricComparison]

    @property
    def decided_others(self) -> list[MetricComparison]:
        """Its other metrics that regressed or improved: shown under it even when folded."""
        return [c for c in self.others if c.verdict in DECIDED]


@dataclass(frozen=True)
class ComparisonView:
    outcome: str
    headline: str
    sections: dict[str, list[BenchmarkRow]]
    """Regressions, improvements, inconclusive results: only the sections that have rows."""
    quiet: list[BenchmarkRow]
    quiet_reasons: list[str]
    """Why the quiet metrics are quiet, each reason once with how many metrics it covers."""
    notes: list[Skipped] = field(default_factory=list)
    """What the comparison could not judge (the gate's own notes), less what a reason already says."""

    @property
    def changed(self) -> list[BenchmarkRow]:
        return [row for rows in self.sections.values() for row in rows]


def comparison_view(suite: SuiteComparison, outcome: str) -> ComparisonView:
    rows = benchmark_rows(suite.comparisons)
    sections = {name: _sorted([r for r in rows if r.status == name], name) for name in CHANGED}
    quiet = [r for r in rows if r.status == "quiet"]
    quiet_metrics = [c for r in quiet for c in (r.shown, *r.others)]
    return ComparisonView(
        outcome=outcome,
        headline=headline(suite, outcome, rows),
        sections={name: found for name, found in sections.items() if found},
        quiet=quiet,
        quiet_reasons=[f"{n} metrics {why}" for why, n in Counter(map(quiet_reason, quiet_metrics)).most_common()],
        notes=_notes(suite, quiet_metrics),
    )


def _notes(suite: SuiteComparison, quiet_metrics: Sequence[MetricComparison]) -> list[Skipped]:
    """The gate's notes, less the one on ungated time when a quiet reason already says it for all of them."""
    quiet = {id(c) for c in quiet_metrics}
    said = all(id(c) in quiet for c in suite.comparisons if c.noise_unknown)
    return [s for s in suite.skipped if not (said and s.why == TIME_NOT_GATED)]


def benchmark_rows(comparisons: Sequence[MetricComparison]) -> list[BenchmarkRow]:
    by_bench: dict[str, list[MetricComparison]] = {}
    for c in comparisons:
        by_bench.setdefault(c.benchmark, []).append(c)
    return [_row(bench_id, metrics) for bench_id, metrics in by_bench.items()]


def _row(bench_id: str, metrics: list[MetricComparison]) -> BenchmarkRow:
    worst = min(metrics, key=lambda c: (_RANK[c.verdict], -_size(c)))
    status = worst.verdict if worst.verdict in CHANGED else "quiet"
    if status == "quiet":
        name = headline_metric([c.metric for c in metrics])
        worst = next(c for c in metrics if c.metric == name)
    elif (head := headline_metric([c.metric for c in metrics])) is not None:
        worst = next((c for c in metrics if c.metric == head and c.verdict == status), worst)
    others = sorted((c for c in metrics if c is not worst), key=lambda c: (_RANK[c.verdict], -_size(c)))
    return BenchmarkRow(bench_id, status, worst, others)


def _size(c: MetricComparison) -> float:
    return abs(c.badness) if math.isfinite(c.badness) else 0.0


def _sorted(rows: list[BenchmarkRow], status: str) -> list[BenchmarkRow]:
    """Largest change first: the worst regression, the biggest improvement."""
    sign = -1.0 if status == "improved" else 1.0
    return sorted(rows, key=lambda r: -sign * r.shown.badness if math.isfinite(r.shown.badness) else 0.0)


def headline(suite: SuiteComparison, outcome: str, rows: Sequence[BenchmarkRow]) -> str:
    """``REGRESSION — 1 regressed, 0 improved, 2 inconclusive, 10 unchanged or not gated (13 benchmarks)``."""
    counts = Counter(r.status for r in rows)
    parts = [f"{counts[name]} {name}" for name in CHANGED] + [f"{counts['quiet']} {QUIET_TITLE}"]
    extra = [f"{len(items)} {what}" for what, items in _unmatched(suite) if items]
    tail = f" ({len(rows)} benchmarks, {len(suite.comparisons)} metrics" + "".join(f"; {e}" for e in extra) + ")"
    return f"{outcome.upper()} — " + ", ".join(parts) + tail


def _unmatched(suite: SuiteComparison) -> list[tuple[str, list[str]]]:
    match = suite.match
    return [("missing", match.missing), ("new", match.new), ("renamed", [f"{a} → {b}" for a, b in match.renamed])]


def quiet_reason(c: MetricComparison) -> str:
    """Why a metric that did not change is quiet, worded so the same reason groups."""
    if c.verdict == "pass":
        return f"unchanged (within the minimum effect, ±{c.min_effect:.0%})"
    if _no_interval(c):
        return "not gated: too few samples for an interval (run longer, or compare 3+ runs a side)"
    if c.noise_unknown:
        return TIME_NOT_GATED
    return "not gated: calibrated run-to-run noise hides the minimum effect (see each metric's MDE with -v)"


def inconclusive_reason(c: MetricComparison, alpha: float) -> str:
    """The one reason an inconclusive result could not be decided."""
    if _no_interval(c):
        return "too few samples for an interval"
    if c.noise_unknown:
        return "run-to-run noise unknown (no calibration, < 3 runs a side)"
    if not c.gated and c.mde is not None:
        return f"too noisy: detects {c.mde:.0%}, the minimum effect is {c.min_effect:.0%}"
    if c.q >= alpha:
        return f"not significant (q = {c.q:.2g}, needs < {alpha:g})"
    return "short of the minimum effect"


def _no_interval(c: MetricComparison) -> bool:
    return not all(math.isfinite(x) for x in c.interval)


def change(c: MetricComparison) -> str:
    """``+20.3% [+15.1%, +25.9%]``: the shift-corrected change and its interval, raw beside it where
    the suite-wide shift moved it."""
    low, high = c.interval
    text = percent(c.ratio - 1)
    text += f" [{percent(low - 1)}, {percent(high - 1)}]" if not _no_interval(c) else " (no interval)"
    raw = c.raw_ratio
    if math.isfinite(raw) and raw and abs(c.ratio / raw - 1) > SHIFT_SHOWN:
        text += f", raw {percent(raw - 1)}"
    return text


def verdict_cell(c: MetricComparison, alpha: float) -> str:
    """The verdict, and for an inconclusive or ungated metric the one reason why."""
    if c.verdict == "inconclusive":
        return f"{VERDICT_MARK['inconclusive']}: {inconclusive_reason(c, alpha)}"
    if c.verdict == "ungated":
        return "not gated: " + inconclusive_reason(c, alpha)
    return verdict(c)


def metric_cells(c: MetricComparison, alpha: float, benchmark: str = "") -> tuple[str, ...]:
    """One metric as the row cells of :data:`ROW_HEADERS` (``benchmark`` empty under its row)."""
    values = f"{value(c.base_value, c.unit)} → {value(c.cand_value, c.unit)}"
    return (benchmark, label(c.metric), values, change(c), verdict_cell(c, alpha))


def folded_line(rows: Sequence[BenchmarkRow], shown: int) -> str | None:
    """How many other metrics the rows fold, and of those how many are inconclusive: said once."""
    folded = [c for r in rows for c in r.others]
    if len(folded) <= shown:
        return None
    inconclusive = sum(c.verdict == "inconclusive" for c in folded)
    of_which = f", {inconclusive} of them inconclusive" if inconclusive else ""
    return f"{len(folded) - shown} more metrics of these benchmarks{of_which}"
