"""The comparison as GitHub-flavoured markdown, and the job summary GitHub Actions shows."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from gymbench.gate.format import HEADERS, ordered, printable, row, shift_line, summary_line
from gymbench.gate.gate import GateResult
from gymbench.secrets import redact_output

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def comparison_markdown(result: GateResult) -> str:
    suite = result.suite
    lines = [
        "## gymbench comparison",
        "",
        f"**{summary_line(suite, result.outcome.value)}**",
        "",
        f"Baseline `{suite.baseline}`, candidate `{suite.candidate}`. {shift_line(suite)}.",
        "",
    ]
    lines += [f"> warning: {w}" for w in result.warnings]
    lines += ["", _md_row(HEADERS), _md_row(tuple("---" for _ in HEADERS))]
    lines += [_md_row(row(c)) for c in ordered(suite)]
    for title, items in (
        ("New benchmarks (not compared)", suite.match.new),
        ("Missing from the candidate", suite.match.missing),
        ("Probably renamed (not compared)", [f"{a} → {b}" for a, b in suite.match.renamed]),
    ):
        if items:
            lines += ["", f"**{title}**", "", *(f"- `{item}`" for item in items)]
    if suite.skipped:
        lines += ["", "**Not compared**", "", *(f"- `{s.what}`: {s.why}" for s in suite.skipped)]
    lines += ["", _legend(result)]
    return "\n".join(printable(line) for line in lines) + "\n"


def _md_row(cells: tuple[str, ...]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _legend(result: GateResult) -> str:
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
