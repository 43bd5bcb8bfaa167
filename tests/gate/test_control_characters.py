"""Benchmark names come from records anyone can write: their control characters never reach a terminal or markdown."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from tests.gate.synthetic import save_run, suite

HOSTILE = "bench.py::test_\x1b[2J\x1b]0;owned\x07\x9b31m"


def test_compare_shows_a_name_with_terminal_escapes_escaped(tmp_path: Path) -> None:
    def named(seed: int, factor: float) -> object:
        record = suite(seed, benchmarks=2, factor=factor)
        benches = [replace(record.benchmarks[0], name=HOSTILE), record.benchmarks[1]]
        return replace(record, benchmarks=benches)

    base = save_run(tmp_path, named(1, 1.0), "20260101T000000")  # type: ignore[arg-type]
    slow = save_run(tmp_path, named(2, 1.5), "20260102T000000")  # type: ignore[arg-type]
    markdown = tmp_path / "summary.md"
    done = subprocess.run([sys.executable, "-m", "gymbench.cli", "compare", str(base), str(slow), "-v",
                           "--markdown", str(markdown)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stderr  # 3: inconclusive (one run a side, no calibration)
    for text in (done.stdout, markdown.read_text()):
        assert "test_\\x1b[2J\\x1b]0;owned\\x07\\x9b31m" in text, text
        assert not any(ch in text for ch in "\x1b\x07\x9b")


# Issue 41, second pass: bidi controls, metric names and units, markdown's own syntax, HTML, listings.

BIDI = "bench.py::test_\u202eevil\u2066x\u2069\u200f"
ESCAPED_BIDI = "bench.py::test_\\u202eevil\\u2066x\\u2069\\u200f"
UNSHOWABLE = "\x00\x07\x1b\x7f\x85\x9b\u061c\u200e\u200f\u202a\u202e\u2066\u2069\u2028\u2029\ud800"


def test_printable_escapes_every_control_bidi_and_separator_character_and_nothing_else() -> None:
    from gymbench.console import printable

    assert printable("plain ascii, ±5% → ü 测试 😀") == "plain ascii, ±5% → ü 测试 😀"
    shown = printable(f"a{UNSHOWABLE}b\n\t\r")
    assert shown.isascii() and shown.isprintable(), shown
    assert shown == (
        "a\\x00\\x07\\x1b\\x7f\\x85\\x9b\\u061c\\u200e\\u200f\\u202a\\u202e\\u2066\\u2069\\u2028\\u2029\\ud800b\\n\\t\\r"
    )


def hostile_pair(tmp_path: Path, name: str, metric: str, unit: str) -> tuple[Path, Path]:
    """Two records whose first benchmark is called ``name`` with a metric ``metric`` in ``unit``, the
    candidate 50 % slower, so the benchmark shows in a table row (terminal and markdown)."""

    def named(seed: int, factor: float) -> object:
        record = suite(seed, benchmarks=6, factor=factor)
        first = record.benchmarks[0]
        odd = replace(first, name=name, metrics={metric: replace(first.metrics["time"], unit=unit)})
        return replace(record, benchmarks=[odd, *record.benchmarks[1:]])

    base = save_run(tmp_path, named(1, 1.0), "20260101T000000")  # type: ignore[arg-type]
    slow = save_run(tmp_path, named(2, 1.5), "20260102T000000")  # type: ignore[arg-type]
    return base, slow


def test_bidi_overrides_in_names_metrics_and_units_never_reach_the_terminal_or_markdown(tmp_path: Path) -> None:
    """A right-to-left override made one benchmark's row read as another's; control characters in a
    metric name or a unit are data too (main escaped C0 and C1 in names, and passed bidi raw)."""
    base, slow = hostile_pair(tmp_path, BIDI, "ti\u202eme\x1b[31m", "s\u2066")
    markdown = tmp_path / "summary.md"
    done = subprocess.run([sys.executable, "-m", "gymbench.cli", "compare", str(base), str(slow), "-v",
                           "--markdown", str(markdown)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stderr
    for text in (done.stdout, markdown.read_text()):
        assert ESCAPED_BIDI in text, text
    for text in (done.stdout, done.stderr, markdown.read_text()):
        assert not any(ch in text for ch in UNSHOWABLE), [ch for ch in UNSHOWABLE if ch in text]
    assert "ti\\u202eme\\x1b[31m" in done.stdout  # the metric's own name, escaped, in its row


def comparison_of(name: str) -> object:
    from gymbench.gate.compare import compare_runs
    from gymbench.gate.gate import GateResult, outcome_of

    def named(seed: int, factor: float) -> object:
        record = suite(seed, benchmarks=6, factor=factor)
        return replace(record, benchmarks=[replace(record.benchmarks[0], name=name), *record.benchmarks[1:]])

    missing = replace(suite(3, benchmarks=6), benchmarks=suite(3, benchmarks=6).benchmarks[1:])
    compared = compare_runs([named(1, 1.0), named(3, 1.0)], [named(2, 1.5), missing])  # type: ignore[list-item]
    return GateResult(compared, outcome_of(compared), outcome_of(compared))


def test_markdown_code_spans_and_cells_hold_backticks_pipes_and_tags_as_text() -> None:
    """A name with a backtick closed its code span, and one with ``<img ...>`` or ``</details>``
    rendered as HTML in a GitHub comment; a ``|`` would split a table cell, a newline end the row."""
    from gymbench.gate.markdown import code, comparison_markdown

    name = "bench.py::test_`x`<img src=https://e.example/p.png>|</details>\nnext"
    text = comparison_markdown(comparison_of(name))  # type: ignore[arg-type]
    assert "<img" not in text and "</details>\\n" not in text, text
    assert text.count("</details>") == text.count("<details>"), text
    row = next(line for line in text.splitlines() if line.startswith("| bench.py::test_`x`"))
    assert "&lt;img src=https://e.example/p.png>\\|&lt;/details>\\nnext |" in row, row
    assert code("a`b") == "``a`b``" and code("`a") == "`` `a ``" and code("plain") == "`plain`"
    assert code("x``y") == "```x``y```"


def test_the_html_report_escapes_control_characters_too() -> None:
    from gymbench.report.html import render_report

    page = render_report(comparison_of(HOSTILE + "\u202e"), [])  # type: ignore[arg-type]
    assert not any(ch in page for ch in UNSHOWABLE)
    assert "\\x1b]0;owned\\x07\\x9b31m\\u202e" in page  # (the id breaks after its [ for wrapping)


def test_listings_and_gate_lines_escape_names_from_records(tmp_path: Path) -> None:
    """``gymbench baselines`` shows each record's commit id as the record says it; the gate's
    ``--fail-on-uncounted`` line names benchmarks; both passed their text raw."""
    from gymbench.gate.command_runs import _uncounted_exit
    from gymbench.gate.compare import Uncounted
    from gymbench.gate.gate import GateResult, Outcome
    from tests.gate.synthetic import fingerprint

    record = replace(suite(1, benchmarks=2), fingerprint=fingerprint(commit="\x1b]0;x\x07\u202e"))
    save_run(tmp_path, record, "20260101T000000")  # type: ignore[arg-type]
    done = subprocess.run([sys.executable, "-m", "gymbench.cli", "baselines", "--all-machines",
                           "--results-dir", str(tmp_path)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "\\x1b]0;x\\x07\\u202e" in done.stdout and not any(ch in done.stdout for ch in UNSHOWABLE)

    result = comparison_of("plain")
    suite_with_uncounted = replace(result.suite, uncounted=[Uncounted(HOSTILE, "asyncio")])  # type: ignore[attr-defined]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert _uncounted_exit(GateResult(suite_with_uncounted, Outcome.PASS, Outcome.PASS), True) == 3
    assert "test_\\x1b[2J" in out.getvalue() and not any(ch in out.getvalue() for ch in UNSHOWABLE)


def test_a_name_that_reads_as_mathtext_is_drawn_as_text_not_a_traceback() -> None:
    """Matplotlib parses text between two ``$`` as TeX: ``test_$\\frac{$`` raised ParseSyntaxException
    while ``gymbench report`` drew its figures."""
    from gymbench.report.html import render_report

    page = render_report(comparison_of("bench.py::test_$\\frac{$x\x1b"), [])  # type: ignore[arg-type]
    assert "test_$\\frac{$x\\x1b" in page
