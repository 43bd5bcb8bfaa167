"""The comparison as plain text lines, for a terminal or pytest's summary: the verdict first, then
what changed, one row per benchmark, then one line per reason for everything else."""

from __future__ import annotations

from collections.abc import Sequence

from gymbench.console import printable
from gymbench.gate.format import shift_line, summary_line
from gymbench.gate.gate import GateResult
from gymbench.gate.view import (
    QUIET_TITLE,
    ROW_HEADERS,
    SECTION_TITLES,
    BenchmarkRow,
    comparison_view,
    folded_line,
    metric_cells,
)

INDENT = "  "


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def comparison_lines(result: GateResult, verbose: bool = False) -> list[str]:
    """The verdict with its counts; the regressions, improvements and inconclusive results (a
    benchmark's other metrics under it when they changed too, or all of them with ``verbose``); one
    line per reason for the rest (each benchmark listed with ``verbose``); notes; the gate's line."""
    suite = result.suite
    view = comparison_view(suite, result.outcome.value)
    alpha = suite.settings.alpha
    lines = [view.headline, f"baseline: {suite.baseline}", f"candidate: {suite.candidate}", shift_line(suite)]
    lines += [f"warning: {w}" for w in result.warnings]
    for status, rows in view.sections.items():
        lines += ["", f"{SECTION_TITLES[status]} ({len(rows)}):"]
        cells = _rows(rows, alpha, verbose)
        lines += _indented(table([ROW_HEADERS, *cells]))
        folded = None if verbose else folded_line(rows, len(cells) - len(rows))
        lines += [f"{INDENT}{folded} (list them with --verbose / -v)"] if folded else []
    if view.quiet:
        hint = "" if verbose else " (list them with --verbose / -v)"
        lines += ["", f"{len(view.quiet)} benchmarks {QUIET_TITLE}{hint}:"]
        lines += [f"{INDENT}{reason}" for reason in view.quiet_reasons]
        if verbose:
            lines += _indented(table([ROW_HEADERS, *_rows(view.quiet, alpha, verbose)]))
    lines += [""] if view.sections or view.quiet else []
    lines += _listing("new (not compared)", suite.match.new)
    lines += _listing("missing from the candidate", suite.match.missing)
    lines += _listing("renamed? (not compared)", [f"{a} -> {b}" for a, b in suite.match.renamed])
    lines += _listing("not compared", [f"{s.what}: {s.why}" for s in view.notes])
    lines.append(summary_line(suite, result.outcome.value))
    return [printable(line) for line in lines]


def _rows(rows: Sequence[BenchmarkRow], alpha: float, verbose: bool) -> list[tuple[str, ...]]:
    """Each benchmark's row, and under it (indented) its other metrics that regressed or improved, or all."""
    out = []
    for row in rows:
        out.append(metric_cells(row.shown, alpha, row.benchmark))
        for other in row.others if verbose else row.decided_others:
            cells = metric_cells(other, alpha)
            out.append((cells[0], INDENT + cells[1], *cells[2:]))
    return out


def _indented(lines: list[str]) -> list[str]:
    return [INDENT + line for line in lines]


def _listing(title: str, items: list[str]) -> list[str]:
    return [f"{title}: {len(items)}", *(f"  {item}" for item in items)] if items else []
