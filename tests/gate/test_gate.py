"""Exit codes of ``gymbench compare`` and of pytest's ``--gymbench-compare``; the step summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymbench.cli import main
from gymbench.errors import GymbenchError
from gymbench.gate.compare import compare_runs
from gymbench.gate.gate import Outcome, enforced, outcome_of
from gymbench.gate.noise import noise_to_dict
from gymbench.gate.store import save_calibration, save_json
from gymbench.record import load_record, save_record
from tests.gate.synthetic import calibration, save_run, suite

pytest_plugins = ["pytester"]


def test_outcome_and_what_fail_on_lets_through() -> None:
    regressed = compare_runs([suite(1)], [suite(2, slow={0: 0.5})], noise=calibration(suite(1)))
    inconclusive = compare_runs([suite(1, samples=2)], [suite(2, samples=2, slow={0: 0.5})])
    assert outcome_of(regressed) is Outcome.REGRESSION
    assert outcome_of(inconclusive) is Outcome.INCONCLUSIVE
    assert enforced(Outcome.REGRESSION, "none") is Outcome.PASS
    assert enforced(Outcome.INCONCLUSIVE, "regression") is Outcome.PASS
    assert enforced(Outcome.INCONCLUSIVE, "inconclusive") is Outcome.INCONCLUSIVE
    assert [o.cli_code for o in Outcome] == [0, 1, 3]
    assert [o.pytest_code for o in Outcome] == [0, 6, 7]
    with pytest.raises(GymbenchError, match="choose one of none, regression, inconclusive"):
        enforced(Outcome.PASS, "sometimes")


def test_a_missing_benchmark_is_inconclusive_not_a_silent_pass() -> None:
    result = compare_runs([suite(1, benchmarks=5)], [suite(2, benchmarks=4)])
    assert result.counts["regressed"] == 0 and outcome_of(result) is Outcome.INCONCLUSIVE


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "results"
    save_run(root, suite(1, name="base"), "20260101T000000")
    save_run(root, suite(2, name="same"), "20260102T000000")
    save_run(root, suite(3, name="slower", slow={2: 0.4}), "20260103T000000")
    save_run(root, suite(4, name="few", samples=2, slow={2: 0.4}), "20260104T000000")
    save_json(noise_to_dict(calibration(suite(1)), "2026-01-01T00:00:00+00:00"), tmp_path / "quiet.json")
    return root


@pytest.mark.parametrize(
    ("candidate", "fail_on", "calibrated", "code", "verdict"),
    [
        ("same", "inconclusive", True, 0, "PASS"),
        ("slower", "inconclusive", True, 1, "REGRESSION"),
        ("slower", "inconclusive", False, 3, "INCONCLUSIVE"),
        ("few", "inconclusive", False, 3, "INCONCLUSIVE"),
        ("few", "regression", False, 0, "INCONCLUSIVE"),
        ("slower", "none", True, 0, "REGRESSION"),
    ],
)
def test_compare_exit_codes(
    store: Path,
    capsys: pytest.CaptureFixture[str],
    candidate: str,
    fail_on: str,
    calibrated: bool,
    code: int,
    verdict: str,
) -> None:
    """One run against one gates time only with a calibration; uncalibrated, a slowdown is inconclusive."""
    noise = ["--calibration", "quiet.json"] if calibrated else []
    assert main(["compare", "base", candidate, "--fail-on", fail_on, *noise]) == code
    assert f"gate: {verdict}" in capsys.readouterr().out


def test_compare_writes_the_github_step_summary(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert main(["compare", "base", "slower", "--calibration", "quiet.json"]) == 1
    text = summary.read_text()
    assert text.startswith("## gymbench comparison") and "| bench.py::test_2 | time |" in text
    assert "REGRESSED" in text


def test_compare_input_errors_exit_2_without_traceback(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "no-such-run", "same"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gymbench: error: no baseline 'no-such-run'") and "Traceback" not in err


def _bench_file(delay_ms: float) -> str:
    return f"""
import time

def test_wait(gymbench):
    gymbench.measure(time.sleep, {delay_ms / 1000})
"""


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    return pytester.runpytest_subprocess("--gymbench-min-rounds", "8", "--gymbench-max-time", "0.5", *args)


def test_pytest_gate_exit_codes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_b=_bench_file(1))
    assert _run(pytester, "--gymbench-save", "base").ret == 0
    baseline = next((pytester.path / "results").glob("*/*_base.json"))
    fast = load_record(baseline)
    scaled = [
        type(b)(b.name, b.params, {k: type(m).from_samples([x / 3 for x in m.samples], m.unit, m.direction)
                                   for k, m in b.metrics.items()})
        for b in fast.benchmarks
    ]  # fmt: skip
    save_record(type(fast)("faster", scaled, fast.fingerprint), baseline.with_name("20000101T000000_faster.json"))
    result = _run(pytester, "--gymbench-compare", "faster", "--gymbench-fail-on", "inconclusive")
    assert result.ret == 7  # not calibrated: one run against one cannot gate time
    result.stdout.fnmatch_lines(["*time (2 metrics): shown but not gated*", "gate: INCONCLUSIVE*"])

    save_calibration(calibration(fast), pytester.path / "results", "quiet", "2000-01-01T00:00:00+00:00")
    result = _run(pytester, "--gymbench-compare", "faster", "--gymbench-fail-on", "regression")
    assert result.ret == 6
    result.stdout.fnmatch_lines(["*gymbench comparison*", "*test_b.py::test_wait*REGRESSED*", "gate: REGRESSION*"])
    assert _run(pytester, "--gymbench-compare", "faster").ret == 0  # report only by default

    result = _run(pytester, "--gymbench-compare", "missing-baseline", "--gymbench-fail-on", "regression")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["*gymbench: error: no baseline 'missing-baseline'*"])
