"""The comparison as plain text lines, for a terminal or pytest's summary."""

from __future__ import annotations

from collections.abc import Sequence

from gymbench.gate.format import HEADERS, ordered, printable, row, shift_line, summary_line
from gymbench.gate.gate import GateResult


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def comparison_lines(result: GateResult, verbose: bool = False) -> list[str]:
    """Header, the table (every metric when verbose, else only what is not a plain pass), lists."""
    suite = result.suite
    lines = [f"baseline: {suite.baseline}", f"candidate: {suite.candidate}", shift_line(suite)]
    lines += [f"warning: {w}" for w in result.warnings]
    shown = [c for c in ordered(suite) if verbose or c.verdict != "pass" or not c.gated]
    if shown:
        lines += table([HEADERS, *(row(c) for c in shown)])
    passed = len(suite.comparisons) - len(shown)
    if passed:
        lines.append(f"{passed} more metrics pass (show them with --verbose / -v)")
    lines += _listing("new (not compared)", suite.match.new)
    lines += _listing("missing from the candidate", suite.match.missing)
    lines += _listing("renamed? (not compared)", [f"{a} -> {b}" for a, b in suite.match.renamed])
    lines += _listing("not compared", [f"{s.what}: {s.why}" for s in suite.skipped])
    lines.append(summary_line(suite, result.outcome.value))
    return [printable(line) for line in lines]


def _listing(title: str, items: list[str]) -> list[str]:
    return [f"{title}: {len(items)}", *(f"  {item}" for item in items)] if items else []
