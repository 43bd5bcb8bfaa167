"""A self-contained HTML report (one file, figures embedded) built from stored results alone."""

from __future__ import annotations

import html
import statistics
from collections.abc import Sequence
from pathlib import Path

from gymbench.console import printable
from gymbench.gate.compare import MetricComparison, Skipped
from gymbench.gate.format import sentence, shift_line
from gymbench.gate.gate import GateResult
from gymbench.gate.markdown import legend
from gymbench.gate.store import StoredRun
from gymbench.gate.view import (
    QUIET_TITLE,
    ROW_HEADERS,
    SECTION_TITLES,
    BenchmarkRow,
    ComparisonView,
    comparison_view,
    headline_metric,
    metric_cells,
)
from gymbench.jsonio import AtomicFile
from gymbench.labels import label
from gymbench.record import ResultsRecord
from gymbench.report.plots import ChangeHistory, change_history_plot, distribution_plot, history_plot, ratio_plot

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.3em}h2{font-size:1.2em;margin-top:1.6em}
.verdict{font-size:1.25em;font-weight:600;padding:.5em .8em;border-radius:4px;border-left:6px solid #888;
background:#f3f3f3}
.verdict.regression{border-color:#c44e52;background:#fbe3e4}.verdict.inconclusive{border-color:#dd8452;background:#fdf0e0}
.verdict.pass{border-color:#55a868;background:#e3f4e8}
table{border-collapse:collapse;font-size:13px;margin:.4em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f5f5f5}
tr.regressed>td{background:#fbe3e4}tr.inconclusive>td{background:#fdf0e0}tr.improved>td{background:#e3f4e8}
tr.fold>td{background:#fff;border-top:none;padding:0 8px 2px 24px}tr.fold details{margin:0}
tr.fold summary{font-size:11px;color:#666}
td.bench{font-family:ui-monospace,monospace;font-size:12px;max-width:380px}td.bench .path{color:#777}
details{margin:.5em 0}summary{cursor:pointer;color:#333}details table{font-size:12px}
.warn{color:#8a4b00}img{max-width:100%}code{background:#f3f3f3;padding:0 3px}
.plots{display:flex;flex-wrap:wrap;gap:12px}.plots img{max-width:49%;border:1px solid #eee}
.legend{color:#555;font-size:12px}
"""


RELATIVE = "× baseline median"
RELATIVE_TO_FIRST = "× first run"
HEADLINE = "each benchmark's headline metric"
MAX_HISTORY_PLOTS = 12


def render_report(result: GateResult, history: Sequence[StoredRun], metric: str | None = None) -> str:
    """The verdict with its counts; the regressions, improvements and inconclusive results (one row
    per benchmark, its other metrics folded under it) each with its history over the stored runs;
    everything unchanged or ungated collapsed, its reasons said once; the overview plots.

    ``metric=None`` shows every benchmark by its headline metric, relative to the baseline (the
    samples) or to its first run (the history), so benchmarks of other units share one plot."""
    suite = result.suite
    view = comparison_view(suite, result.outcome.value)
    alpha = suite.settings.alpha
    title = f"gymbench comparison: {suite.candidate} against {suite.baseline}"
    parts = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="verdict {_e(view.outcome)}">{_e(view.headline)}</p>',
        f"<p>Baseline <code>{_e(suite.baseline)}</code>, candidate <code>{_e(suite.candidate)}</code>. "
        f"{_e(sentence(shift_line(suite)))}.</p>",
        *(f'<p class="warn">warning: {_e(w)}</p>' for w in result.warnings),
    ]
    for status, rows in view.sections.items():
        parts += [f"<h2>{_e(SECTION_TITLES[status])} ({len(rows)})</h2>", _section_table(rows, alpha)]
    changes = changed_history(view, history, result, metric)
    if changes:
        parts += [
            "<h2>History of what changed</h2>",
            '<div class="plots">'
            + "".join(_img(change_history_plot(c), f"history of {c.benchmark}") for c in changes)
            + "</div>",
        ]
    parts += [_lists(result), _notes(view), _quiet(view, alpha)]
    parts += [
        f"<h2>Change per benchmark ({_e(HEADLINE)}), with its interval</h2>",
        _img(ratio_plot([r.shown for r in (*view.changed, *view.quiet)]), "ratio per benchmark"),
    ]
    samples = sample_pairs(result, metric)
    if samples:
        unit = RELATIVE if metric is None else next(c.unit for c in suite.comparisons if c.metric == metric)
        parts.append(
            f"<details><summary>Sample distributions ({_e(label(metric) if metric else HEADLINE)})</summary>"
            + _img(distribution_plot(samples, unit), "samples")
            + "</details>"
        )
    trend = history_of(history, metric)
    if trend:
        unit = _unit_of(history, metric) if metric is not None else RELATIVE_TO_FIRST
        parts.append(
            f"<details><summary>History of every benchmark across the stored runs "
            f"({_e(label(metric) if metric else HEADLINE)}, median per run)</summary>"
            + _img(history_plot(trend, label(metric) if metric else "headline", unit), "history")
            + "</details>"
        )
    parts.append(f'<p class="legend">{_e(legend(result))}</p>')
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title><style>{STYLE}</style></head>"
        f"<body>{''.join(parts)}</body></html>\n"
    )


def write_report(text: str, path: Path) -> Path:
    """Written whole (and redacted) through :class:`~gymbench.jsonio.AtomicFile`, as every report."""
    with AtomicFile(path, text=True, then="; choose another report path") as target:
        target.write(text)
    return path


def _section_table(rows: Sequence[BenchmarkRow], alpha: float) -> str:
    """One row per benchmark; under it, its other metrics in a ``<details>`` (open where one of them
    regressed or improved too, so no decided change is hidden)."""
    body = []
    for row in rows:
        body.append(_metric_row(row.shown, alpha, row.benchmark))
        if row.others:
            opened = " open" if row.decided_others else ""
            inner = "".join(_metric_row(c, alpha) for c in row.others)
            body.append(
                f'<tr class="fold"><td colspan="{len(ROW_HEADERS)}"><details{opened}><summary>'
                f"{len(row.others)} other metrics of this benchmark</summary><table>{_head(ROW_HEADERS[1:])}"
                f"{inner}</table></details></td></tr>"
            )
    return f"<table>{_head(ROW_HEADERS)}{''.join(body)}</table>"


def _head(headers: Sequence[str]) -> str:
    return "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in headers) + "</tr>"


def _metric_row(c: MetricComparison, alpha: float, benchmark: str | None = None) -> str:
    """A benchmark's row (its id first) or, with ``benchmark=None``, one of its folded metrics."""
    cells = metric_cells(c, alpha, benchmark or "")
    first = f'<td class="bench">{breakable(cells[0])}</td>' if benchmark is not None else ""
    return f'<tr class="{c.verdict}">{first}' + "".join(f"<td>{_e(cell)}</td>" for cell in cells[1:]) + "</tr>"


def _quiet(view: ComparisonView, alpha: float) -> str:
    """Everything unchanged or ungated in one collapsed block, each reason said once above its rows."""
    if not view.quiet:
        return ""
    metrics = sum(1 + len(r.others) for r in view.quiet)
    reasons = "".join(f"<li>{_e(reason)}</li>" for reason in view.quiet_reasons)
    return (
        f"<details><summary>{len(view.quiet)} benchmarks {_e(QUIET_TITLE)} ({metrics} metrics)</summary>"
        f"<ul>{reasons}</ul>{_section_table(view.quiet, alpha)}</details>"
    )


def _notes(view: ComparisonView) -> str:
    """What the comparison could not judge: shown where it may hide a regression, else collapsed."""
    shown = [s for s in view.notes if s.inconclusive]
    quiet = [s for s in view.notes if not s.inconclusive]
    out = ""
    if shown:
        out += "<h2>Not compared</h2><ul>" + "".join(_note(s) for s in shown) + "</ul>"
    if quiet:
        out += f"<details><summary>{len(quiet)} notes on how it was measured</summary><ul>"
        out += "".join(_note(s) for s in quiet) + "</ul></details>"
    return out


def _note(skipped: Skipped) -> str:
    return f"<li><code>{_e(skipped.what)}</code>: {_e(skipped.why)}</li>"


def changed_history(
    view: ComparisonView, runs: Sequence[StoredRun], result: GateResult, metric: str | None = None
) -> list[ChangeHistory]:
    """Per changed benchmark (worst first), its shown metric (or ``metric``) across the stored runs,
    with the runs the comparison used marked; runs that never measured it leave no point."""
    roles = {(r.name, r.created_at): "baseline" for r in result.baseline_records}
    roles.update({(r.name, r.created_at): "candidate" for r in result.candidate_records})
    out = []
    for row in view.changed[:MAX_HISTORY_PLOTS]:
        chosen = metric if metric is not None and metric in {c.metric for c in (row.shown, *row.others)} else None
        shown = next(c for c in (row.shown, *row.others) if c.metric == (chosen or row.shown.metric))
        points, marks = [], []
        for run in runs:
            bench = next((b for b in run.record.benchmarks if b.id == row.benchmark), None)
            if bench is not None and shown.metric in bench.metrics:
                points.append((f"{run.name} {run.stamp[4:13]}", bench.metrics[shown.metric].value))
                marks.append(roles.get((run.record.name, run.record.created_at), ""))
        if points:
            out.append(
                ChangeHistory(
                    row.benchmark,
                    shown.metric,
                    shown.unit,
                    shown.verdict,
                    points,
                    marks,
                    shown.base_value,
                    shown.min_effect,
                )  # fmt: skip
            )
    return out


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


def breakable(bench_id: str) -> str:
    """A benchmark id that wraps where a reader would break it (after ``::``, ``[`` and ``,``), its
    path in grey: ``test_train_step[checkpointing=on,precision=fp32]`` never splits mid-word."""
    path, sep, test = bench_id.rpartition("::")
    test_html = _e(test)
    for mark in ("[", ","):
        test_html = test_html.replace(mark, mark + "<wbr>")
    return (f'<span class="path">{_e(path + sep)}</span><wbr>' if sep else "") + test_html


def _img(png: str, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{png}">'


def _e(text: str) -> str:
    return html.escape(printable(str(text)))  # a control character would reach whoever cats the file
