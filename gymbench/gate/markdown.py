"""The comparison as GitHub-flavoured markdown, and the job summary GitHub Actions shows."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from gymbench.console import printable
from gymbench.gate.compare import SuiteComparison
from gymbench.gate.format import sentence, shift_line
from gymbench.gate.gate import GateResult
from gymbench.gate.view import QUIET_TITLE, ROW_HEADERS, SECTION_TITLES, comparison_view, metric_cells
from gymbench.secrets import redact_output

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def comparison_markdown(result: GateResult) -> str:
    """The verdict first; a table per section of what changed, each benchmark's other metrics in a
    ``<details>`` block under it; everything else in one collapsed block, its reasons said once. With
    nothing changed it stays within :data:`MAX_QUIET_LINES` lines, so a PR comment is a glance."""
    suite = result.suite
    view = comparison_view(suite, result.outcome.value)
    alpha = suite.settings.alpha
    lines = [
        "## gymbench comparison",
        "",
        f"**{view.headline}**",
        "",
        f"Baseline {code(suite.baseline)}, candidate {code(suite.candidate)}. {sentence(shift_line(suite))}.",
    ]
    warnings = [f"> warning: {no_tags(w)}" for w in result.warnings]
    lines += [line + "<br>" for line in warnings[:-1]] + warnings[-1:]  # one quote, a line each
    for status, rows in view.sections.items():
        lines += ["", f"### {SECTION_TITLES[status]} ({len(rows)})", "", _md_row(ROW_HEADERS), _md_rule(ROW_HEADERS)]
        lines += [_md_row(metric_cells(row.shown, alpha, row.benchmark)) for row in rows]
        folded = [(row.benchmark, other) for row in rows for other in row.others]
        if folded:
            lines += ["", f"<details><summary>Their other {len(folded)} metrics</summary>", ""]
            lines += [_md_row(ROW_HEADERS), _md_rule(ROW_HEADERS)]
            lines += [_md_row(metric_cells(other, alpha, bench)) for bench, other in folded]
            lines += ["", "</details>"]
    lines += _unmatched(suite)
    inconclusive_notes = [s for s in view.notes if s.inconclusive]
    if inconclusive_notes:
        lines += ["", "**Not compared**", "", *(f"- {code(s.what)}: {no_tags(s.why)}" for s in inconclusive_notes)]
    quiet_notes = [s for s in view.notes if not s.inconclusive]
    if view.quiet or quiet_notes:
        summary = f"{len(view.quiet)} benchmarks {QUIET_TITLE}" + (f"; {len(quiet_notes)} notes" if quiet_notes else "")
        lines += ["", f"<details><summary>{summary}</summary>", ""]
        lines += [f"- {reason}" for reason in view.quiet_reasons]
        lines += [f"- {code(s.what)}: {no_tags(s.why)}" for s in quiet_notes]
        lines += ["", "</details>"]
    lines += ["", legend(result)]
    return "\n".join(printable(line) for line in lines) + "\n"


MAX_QUIET_LINES = 20
"""The most lines the markdown takes when nothing changed (a PR comment read at a glance)."""


def _unmatched(suite: SuiteComparison) -> list[str]:
    lines = []
    for title, items in (
        ("New benchmarks (not compared)", suite.match.new),
        ("Missing from the candidate", suite.match.missing),
        ("Probably renamed (not compared)", [f"{a} → {b}" for a, b in suite.match.renamed]),
    ):
        if items:
            lines += ["", f"**{title}**", "", *(f"- {code(item)}" for item in items)]
    return lines


def _md_row(cells: tuple[str, ...]) -> str:
    """A table row; a ``|`` in a cell (a benchmark's parameters) would end the cell, so it is escaped."""
    return "| " + " | ".join(no_tags(cell).replace("|", "\\|") for cell in cells) + " |"


_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")


def no_tags(text: str) -> str:
    """``text`` with every ``<`` that could open an HTML tag or comment written ``&lt;``: GitHub
    renders inline HTML in markdown, so a benchmark named ``<img src=...>`` or ``</details>`` would
    load an image or break the summary. ``q < 0.01`` is left as it is."""
    return _TAG_START.sub("&lt;", text)


def code(text: str) -> str:
    """``text`` as an inline code span whose fence is longer than any run of backticks in it, so a
    name holding a backtick cannot close the span early and let the rest render as markdown or HTML."""
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _md_rule(cells: tuple[str, ...]) -> str:
    return _md_row(tuple("---" for _ in cells))


def legend(result: GateResult) -> str:
    s = result.suite.settings
    if result.suite.method == "ab":
        return (
            "Ratio = median over worker pairs of the median candidate / baseline ratio of interleaved "
            f"rounds (ABBA), with its {s.confidence:.0%} interval; q = Benjamini–Hochberg adjusted "
            f"p-value (false-discovery rate {s.alpha:g}). A verdict needs q < {s.alpha:g} and at least "
            "the minimum effect."
        )
    return (
        f"Ratio = candidate / baseline median after taking out the suite-wide shift, with its "
        f"{s.confidence:.0%} bootstrap interval; q = Benjamini–Hochberg adjusted p-value "
        f"(false-discovery rate {s.alpha:g}). A verdict needs q < {s.alpha:g} and at least the "
        "minimum effect."
    )


def write_step_summary(markdown: str) -> Path | None:
    """Append to the file GitHub Actions names in ``GITHUB_STEP_SUMMARY``, when it is set."""
    target = os.environ.get(STEP_SUMMARY_ENV)
    if not target:
        return None
    path = Path(target)
    try:
        with path.open("a", encoding="utf-8") as handle:
            handle.write(redact_output(markdown if markdown.endswith("\n") else markdown + "\n"))
    except OSError as exc:
        print(f"gymbench: warning: cannot write {STEP_SUMMARY_ENV} ({target}): {exc.strerror or exc}", file=sys.stderr)
        return None
    return path
