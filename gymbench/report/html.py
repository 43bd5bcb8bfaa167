"""A self-contained HTML report (one file, figures embedded) built from stored results alone."""

from __future__ import annotations

import html
import statistics
from collections.abc import Sequence
from pathlib import Path

from gymbench.gate.format import HEADERS, ordered, row, shift_line, summary_line
from gymbench.gate.gate import GateResult
from gymbench.gate.store import StoredRun
from gymbench.jsonio import AtomicFile
from gymbench.record import ResultsRecord
from gymbench.report.plots import distribution_plot, history_plot, ratio_plot

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}
tr.regressed td{background:#fbe3e4}tr.inconclusive td{background:#fdf0e0}tr.improved td{background:#e3f4e8}
.warn{color:#8a4b00}img{max-width:100%}code{background:#f3f3f3;padding:0 3px}
"""


RELATIVE = "× baseline median"
RELATIVE_TO_FIRST = "× first run"
HEADLINE = "each benchmark's headline metric: time where it has one, else its first"


def headline_metric(names: Sequence[str]) -> str | None:
    """The metric a benchmark is shown by when none is chosen: ``time``, else its first."""
    return "time" if "time" in names else (names[0] if names else None)


def render_report(result: GateResult, history: Sequence[StoredRun], metric: str | None = None) -> str:
    """``metric=None`` shows every benchmark by its headline metric, relative to the baseline (the
    samples) or to its first run (the history), so benchmarks of other units share one plot."""
    suite = result.suite
    parts = [
        f"<h1>gymbench report</h1><p><b>{_e(summary_line(suite, result.outcome.value))}</b></p>",
        f"<p>Baseline <code>{_e(suite.baseline)}</code>, candidate <code>{_e(suite.candidate)}</code>.</p>",
        f"<p>{_e(shift_line(suite))}.</p>",
        *(f'<p class="warn">warning: {_e(w)}</p>' for w in result.warnings),
        "<h2>Comparison</h2>",
        _table(result),
        _lists(result),
        "<h2>Ratio per benchmark, with its interval</h2>",
        _img(ratio_plot(ordered(suite)), "ratio per benchmark"),
    ]
    samples = sample_pairs(result, metric)
    if samples:
        unit = RELATIVE if metric is None else next(c.unit for c in suite.comparisons if c.metric == metric)
        parts += [
            f"<h2>Sample distributions ({_e(metric or HEADLINE)})</h2>",
            _img(distribution_plot(samples, unit), "samples"),
        ]
    trend = history_of(history, metric)
    if trend:
        unit = _unit_of(history, metric) if metric is not None else RELATIVE_TO_FIRST
        parts += [
            f"<h2>History across stored runs ({_e(metric or HEADLINE)}, median per run)</h2>",
            _img(history_plot(trend, metric or "headline", unit), "history"),
        ]
    return f"<!doctype html><html><head><meta charset='utf-8'><title>gymbench report</title><style>{STYLE}</style></head><body>{''.join(parts)}</body></html>\n"  # noqa: E501


def write_report(text: str, path: Path) -> Path:
    """Written whole (and redacted) through :class:`~gymbench.jsonio.AtomicFile`, as every report."""
    with AtomicFile(path, text=True, then="; choose another report path") as target:
        target.write(text)
    return path


def _table(result: GateResult) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in HEADERS)
    body = "".join(
        f'<tr class="{c.verdict}">' + "".join(f"<td>{_e(cell)}</td>" for cell in row(c)) + "</tr>"
        for c in ordered(result.suite)
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _lists(result: GateResult) -> str:
    match = result.suite.match
    out = []
    for title, items in (
        ("New (not compared)", match.new),
        ("Missing from the candidate", match.missing),
        ("Probably renamed (not compared)", [f"{a} → {b}" for a, b in match.renamed]),
    ):
        if items:
            out.append(f"<h3>{_e(title)}</h3><ul>" + "".join(f"<li><code>{_e(i)}</code></li>" for i in items) + "</ul>")
    return "".join(out)


def sample_pairs(result: GateResult, metric: str | None) -> dict[str, tuple[list[float], list[float]]]:
    """Pooled samples of each compared benchmark on both sides, from the records themselves
    (with ``metric=None``, each benchmark's headline metric over its baseline median)."""
    by_bench: dict[str, list[str]] = {}
    for c in result.suite.comparisons:
        by_bench.setdefault(c.benchmark, []).append(c.metric)
    pairs = {}
    for bench_id, names in by_bench.items():
        chosen = metric if metric is not None else headline_metric(names)
        if chosen is None or chosen not in names:
            continue
        base = _samples(result.baseline_records, bench_id, chosen)
        cand = _samples(result.candidate_records, bench_id, chosen)
        if metric is None:
            middle = statistics.median(base) if base else 0.0
            if not middle:
                continue
            base, cand = [x / middle for x in base], [x / middle for x in cand]
        pairs[bench_id] = (base, cand)
    return pairs


def _samples(records: Sequence[ResultsRecord], bench_id: str, metric: str) -> list[float]:
    return [
        x
        for record in records
        for bench in record.benchmarks
        if bench.id == bench_id and metric in bench.metrics
        for x in bench.metrics[metric].samples
    ]


def history_of(runs: Sequence[StoredRun], metric: str | None) -> dict[str, list[tuple[str, float]]]:
    """Per benchmark, (run label, median) for every stored run that measured it, oldest first
    (with ``metric=None``: its headline metric, over the first run's value, the name in the title)."""
    trend: dict[str, list[tuple[str, float]]] = {}
    for run in runs:
        for bench in run.record.benchmarks:
            chosen = metric if metric is not None else headline_metric(list(bench.metrics))
            if chosen is not None and chosen in bench.metrics:
                key = bench.id if metric is not None else f"{bench.id} ({chosen})"
                trend.setdefault(key, []).append((f"{run.name} {run.stamp[4:13]}", bench.metrics[chosen].value))
    if metric is None:
        trend = {
            key: [(label, v / points[0][1]) for label, v in points] for key, points in trend.items() if points[0][1]
        }
    return trend


def _unit_of(runs: Sequence[StoredRun], metric: str | None) -> str:
    for run in runs:
        for bench in run.record.benchmarks:
            if metric is not None and metric in bench.metrics:
                return bench.metrics[metric].unit
    return ""


def _img(png: str, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{png}">'


def _e(text: str) -> str:
    return html.escape(str(text))
