"""Terminal, markdown and HTML reports: produced, well-formed, and saying what the gate decided."""

from __future__ import annotations

import base64
import dataclasses
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gymbench.cli import main
from gymbench.gate.compare import compare_runs
from gymbench.gate.gate import GateResult, Outcome, enforced, outcome_of
from gymbench.gate.markdown import comparison_markdown
from gymbench.gate.noise import noise_to_dict
from gymbench.gate.settings import CompareSettings
from gymbench.gate.store import BaselineStore, save_json
from gymbench.gate.terminal import comparison_lines
from gymbench.gate.view import comparison_view
from gymbench.record import Metric, ResultsRecord
from gymbench.report.html import history_of, render_report, sample_pairs
from tests.gate.synthetic import calibration, save_run, suite

VOID = {"meta", "img", "br", "hr", "link", "input", "wbr"}


def gate_result() -> GateResult:
    base = suite(1, benchmarks=8)
    cand = suite(2, benchmarks=7, factor=1.1, slow={1: 0.4})
    result = compare_runs([base], [cand], CompareSettings(resamples=300), calibration(base), labels=("base", "cand"))
    outcome = outcome_of(result)
    return GateResult(result, outcome, enforced(outcome, "regression"), ["a warning"], [base], [cand])


def test_terminal_lists_what_matters_and_the_outcome() -> None:
    lines = comparison_lines(gate_result())
    text = "\n".join(lines)
    assert lines[0] == (
        "REGRESSION — 1 regressed, 0 improved, 0 inconclusive, 6 unchanged or not gated "
        "(7 benchmarks, 7 metrics; 1 missing)"
    )
    assert "suite-wide shift: the candidate's runner is +10" in text
    assert re.search(r"Regressions \(1\):\n +benchmark .*\n +bench.py::test_1 +time .* REGRESSED", text)
    assert "6 benchmarks unchanged or not gated (list them with --verbose / -v):" in text
    assert "missing from the candidate: 1\n  bench.py::test_7" in text
    assert lines[-1].startswith("gate: REGRESSION — 7 gated, 0 ungated (6 pass, 1 regressed)")
    assert "warning: a warning" in text
    verbose = comparison_lines(gate_result(), verbose=True)
    assert sum(line.lstrip().startswith("bench.py::test_") for line in verbose) == 7 + 1  # every row, and the missing


def test_markdown_table_is_well_formed() -> None:
    text = comparison_markdown(gate_result())
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == 2 + 1  # the regression; the six passes are one line in a collapsed block
    assert {row.count(" | ") for row in rows} == {4}
    assert "- `bench.py::test_7`" in text and "Benjamini–Hochberg" in text
    assert "<details><summary>6 benchmarks unchanged or not gated</summary>" in text


class _Checker(HTMLParser):
    """Fails on a closing tag that does not match the open one; counts images."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.images.append(dict(attrs)["src"] or "")
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack.pop() == tag, f"unbalanced </{tag}>"


def check_html(text: str) -> _Checker:
    checker = _Checker()
    checker.feed(text)
    assert checker.stack == []
    for src in checker.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    return checker


def test_html_report_is_self_contained_with_three_plots(tmp_path: Path) -> None:
    for index, stamp in enumerate(("20260101T000000", "20260102T000000", "20260103T000000")):
        save_run(tmp_path, suite(index, benchmarks=3, name=f"r{index}"), stamp)
    text = render_report(gate_result(), BaselineStore(tmp_path).runs())
    checker = check_html(text)
    assert len(checker.images) == 4  # the regression's history, the ratios, the samples, every history
    assert '<tr class="regressed">' in text and "http" not in text.replace("http-equiv", "")


def test_report_command_writes_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    save_run(tmp_path / "results", suite(1, name="a"), "20260101T000000")
    save_run(tmp_path / "results", suite(2, name="b", slow={0: 0.5}), "20260102T000000")
    save_json(noise_to_dict(calibration(suite(1)), "2026-01-01T00:00:00+00:00"), tmp_path / "quiet.json")
    out = tmp_path / "out" / "report.html"
    noise = ["--calibration", "quiet.json"]  # one run against one gates time only when calibrated
    assert main(["report", "-o", str(out), "--results-dir", "results", "--fail-on", "none", *noise]) == 0
    assert len(check_html(out.read_text()).images) == 4  # the regression's history, and the three overviews
    # the same verdict and exit code as `gymbench compare` on the same inputs
    assert main(["report", "-o", str(out), "--results-dir", "results", *noise]) == 1
    assert main(["compare", "a", "b", "--results-dir", "results", *noise]) == 1
    assert Outcome.REGRESSION.cli_code == 1


def test_raw_columns_agree_with_the_shift_corrected_ratio() -> None:
    from gymbench.gate.view import metric_cells

    result = gate_result()  # the candidate's runner is 10% slower throughout
    passing = next(c for c in result.suite.comparisons if c.verdict == "pass")
    values, change = metric_cells(passing, 0.01)[2:4]
    assert " ms → " in values  # human units
    corrected, raw = change.split(" [")[0], change.split(", raw ")[1]
    assert float(corrected.rstrip("%")) == pytest.approx((passing.ratio - 1) * 100, abs=0.06)
    assert float(raw.rstrip("%")) == pytest.approx((passing.cand_value / passing.base_value - 1) * 100, abs=0.06)


def test_each_side_measured_elsewhere_is_named_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    save_run(tmp_path / "results", suite(1, name="a"), "20260101T000000")
    save_run(tmp_path / "results", suite(2, name="b"), "20260102T000000")
    main(["compare", "a", "b", "--results-dir", "results"])
    out = capsys.readouterr().out
    assert out.count("was measured on machine") == 2
    assert "a (20260101T000000) was measured" in out and "b (20260102T000000) was measured" in out
    assert "reruns the suite, benches/ by default, 5 times" in out


def mixed(seed: int, factor: float = 1.0) -> ResultsRecord:
    """Benchmark 0 measures throughput only (no ``time``), as a collection benchmark does."""
    record = suite(seed, benchmarks=3, factor=factor, name=f"m{seed}")
    first = record.benchmarks[0]
    throughput = {
        "rollouts_per_s": Metric.from_samples([1 / x for x in first.metrics["time"].samples], "rollouts/s", "higher")
    }
    return dataclasses.replace(
        record, benchmarks=[dataclasses.replace(first, metrics=throughput), *record.benchmarks[1:]]
    )


def test_the_default_plots_show_every_benchmark_not_only_timed_ones(tmp_path: Path) -> None:
    base, cand = mixed(1), mixed(2, factor=1.05)
    for index, record in enumerate((base, cand)):
        save_run(tmp_path, record, f"2026010{index + 1}T000000")
    result = compare_runs([base], [cand], CompareSettings(resamples=100), calibration(base), labels=("a", "b"))
    gate = GateResult(result, outcome_of(result), False, [], [base], [cand])
    runs = BaselineStore(tmp_path).runs()
    assert len(sample_pairs(gate, "time")) == 2 and len(history_of(runs, "time")) == 2  # the old default
    assert len(sample_pairs(gate, None)) == 3
    history = history_of(runs, None)
    assert len(history) == 3 and "bench.py::test_0 (rollouts_per_s)" in history
    assert all(points[0][1] == 1.0 for points in history.values())  # relative to the first run
    changed = len(comparison_view(result, gate.outcome.value).changed)  # 5% slower: each its own history
    assert len(check_html(render_report(gate, runs)).images) == 3 + changed


def test_report_on_a_single_record_says_there_is_nothing_to_compare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    save_run(tmp_path / "results", suite(1, name="only"), "20260101T000000")
    out = tmp_path / "report.html"
    assert main(["report", "only", "-o", str(out), "--results-dir", "results"]) == 2
    err = capsys.readouterr().err
    assert "nothing to compare against" in err and "Traceback" not in err
    assert not out.exists()
    assert main(["compare", "only", "latest", "--results-dir", "results"]) == 2
