"""The comparison views read answer first (issue 42): the verdict with its counts on the first line,
what changed one row per benchmark, everything else collapsed with its reason said once.

Two inputs: the records of two unchanged quick runs of the example suite (``examples/mathenv``,
saved in ``data/mathenv_quick``: 11 benchmarks, 136 metrics), and seeded synthetic suites with a
calibration, one benchmark slowed 20 %, over a store of earlier runs. Counts, never the clock.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gymbench.gate.compare import compare_runs
from gymbench.gate.gate import GateResult, enforced, outcome_of
from gymbench.gate.markdown import MAX_QUIET_LINES, comparison_markdown
from gymbench.gate.settings import CompareSettings
from gymbench.gate.store import BaselineStore, StoredRun
from gymbench.gate.terminal import comparison_lines
from gymbench.gate.view import comparison_view
from gymbench.record import ResultsRecord, load_record
from gymbench.report.html import changed_history, render_report
from tests.gate.synthetic import calibration, save_run, suite

DATA = Path(__file__).parent / "data" / "mathenv_quick"
MAX_VISIBLE_ROWS = 30
SLOWED = "bench.py::test_3"


def gate(base: list[ResultsRecord], cand: list[ResultsRecord], noise: object = None) -> GateResult:
    settings = CompareSettings(resamples=200)
    result = compare_runs(base, cand, settings, noise, labels=("base", "cand"))  # type: ignore[arg-type]
    outcome = outcome_of(result)
    return GateResult(result, outcome, enforced(outcome, "inconclusive"), [], list(base), list(cand))


@pytest.fixture(scope="module")
def quick_pair() -> GateResult:
    """Two unchanged quick runs of the example suite, compared as `gymbench compare base cand` does."""
    return gate([load_record(DATA / "base.json")], [load_record(DATA / "cand.json")])


@pytest.fixture
def slowed_store(tmp_path: Path) -> tuple[GateResult, list[StoredRun]]:
    """Five earlier runs, then a candidate with ``test_3`` 20 % slower; the last earlier run is the baseline."""
    records = [suite(seed, name=f"run{seed}") for seed in range(5)]
    slowed = suite(9, name="slowed", slow={3: 0.2})
    for day, record in enumerate([*records, slowed], start=1):
        save_run(tmp_path, record, f"202601{day:02d}T120000")
    runs = BaselineStore(tmp_path).runs()
    base, cand = runs[-2].record, runs[-1].record
    return gate([base], [cand], calibration(base)), runs


class _Visible(HTMLParser):
    """Table rows (not headers) outside every ``<details>``; the text of the first element after ``<h1>``."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.rows = 0
        self.in_header = False
        self.header = False
        self.images: list[str] = []
        self.sections: list[str] = []
        self._tag = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag = tag
        if tag == "details":
            self.depth += 1
        elif tag == "tr" and not self.depth:
            self.rows += 1
            self.header = True
        elif tag == "td" and not self.depth:
            self.header = False
        elif tag == "img" and not self.depth:
            self.images.append(dict(attrs).get("alt") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "details":
            self.depth -= 1
        elif tag == "tr" and not self.depth and self.header:
            self.rows -= 1  # a header row

    def handle_data(self, data: str) -> None:
        if self._tag == "h2" and not self.depth and data.strip():
            self.sections.append(data.strip())


def visible(html: str) -> _Visible:
    parser = _Visible()
    parser.feed(html)
    return parser


def test_two_unchanged_quick_runs_read_verdict_first_in_few_rows(quick_pair: GateResult) -> None:
    suite_ = quick_pair.suite
    assert len(suite_.comparisons) == 136  # the wall of rows issue 42 found
    lines = comparison_lines(quick_pair)
    assert re.match(r"(PASS|INCONCLUSIVE|REGRESSION) — \d+ regressed, \d+ improved, \d+ inconclusive", lines[0])
    assert "(11 benchmarks, 136 metrics)" in lines[0]
    assert len(lines) <= MAX_VISIBLE_ROWS
    assert lines[-1].startswith("gate: ")  # the gate's own line, last, as scripts read it
    assert not any("stage_backend_other" in line or "phase_" in line for line in lines)  # human labels only
    html = visible(render_report(quick_pair, []))
    assert html.rows <= MAX_VISIBLE_ROWS
    markdown = comparison_markdown(quick_pair)
    assert markdown.splitlines()[2].strip("*") == lines[0]
    assert len(_outside_details(markdown)) <= MAX_VISIBLE_ROWS


def test_the_quiet_reasons_are_said_once_not_per_row(quick_pair: GateResult) -> None:
    view = comparison_view(quick_pair.suite, quick_pair.outcome.value)
    text = "\n".join(comparison_lines(quick_pair))
    assert len(view.quiet_reasons) == len(set(view.quiet_reasons))
    for reason in view.quiet_reasons:
        assert text.count(reason) == 1
    assert text.count("too few samples for an interval (run longer") <= 1


def test_markdown_with_nothing_changed_fits_a_pr_comment() -> None:
    base, cand = suite(1), suite(2)
    result = gate([base], [cand], calibration(base))
    assert result.outcome.value == "pass"
    text = comparison_markdown(result)
    assert len(text.splitlines()) <= MAX_QUIET_LINES
    assert text.splitlines()[2].startswith("**PASS — 0 regressed, 0 improved, 0 inconclusive, 12 unchanged")
    assert "<details><summary>12 benchmarks unchanged or not gated</summary>" in text
    assert text.count("- 12 metrics unchanged (within the minimum effect") == 1


def test_a_benchmark_slowed_20_percent_comes_first_with_its_history(
    slowed_store: tuple[GateResult, list[StoredRun]],
) -> None:
    result, runs = slowed_store
    lines = comparison_lines(result)
    assert lines[0].startswith("REGRESSION — 1 regressed, 0 improved, 0 inconclusive, 11 unchanged")
    first_section = lines.index("Regressions (1):")
    assert lines[first_section + 2].split()[0] == SLOWED and "REGRESSED" in lines[first_section + 2]
    assert "+20" in lines[first_section + 2] or "+19" in lines[first_section + 2]
    assert len(lines) <= MAX_VISIBLE_ROWS

    page = visible(render_report(result, runs))
    assert page.sections[:2] == ["Regressions (1)", "History of what changed"]
    assert page.images[0] == f"history of {SLOWED}"
    (history,) = changed_history(comparison_view(result.suite, "regression"), runs, result)
    assert history.benchmark == SLOWED and history.metric == "time" and len(history.points) == 6
    assert history.roles == ["", "", "", "", "baseline", "candidate"]
    assert history.points[-1][1] == pytest.approx(history.points[-2][1] * 1.2, rel=0.05)

    markdown = comparison_markdown(result)
    regression = markdown.index("### Regressions (1)")
    assert markdown.index(f"| {SLOWED} | time |") > regression
    assert "<summary>11 benchmarks unchanged or not gated</summary>" in markdown


def _outside_details(markdown: str) -> list[str]:
    out, depth = [], 0
    for line in markdown.splitlines():
        depth += line.count("<details") - line.count("</details>")
        if not depth and "</details>" not in line and line.strip():
            out.append(line)
    return out
