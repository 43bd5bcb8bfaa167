"""The verdict on instruction counts says what it could not judge (issue 42).

On a user project an asyncio benchmark, which callgrind cannot count, was named in a note while
the verdict said PASS, exit 0, though the gate's own timed runs had it 34 % slower; the note on
benchmarks that ran on a BLAS pool read the candidate's record only and missed a pool that
worked in the baseline's run; and the proof that the base run imported the base's code was in
the saved record alone. The synthetic cases pin each rule; one real gate run on the toy project
(tests/gate/toy_project.py) checks what a user sees.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from gymbench.gate.compare import SuiteComparison, compare_runs
from gymbench.gate.gate import GateResult, Outcome, enforced, outcome_of
from gymbench.gate.instructions import COUNTED_HOW, COUNTS_EXTRA, NOT_COUNTED_ASYNC
from gymbench.gate.settings import CompareSettings
from gymbench.record import BenchmarkResult, Metric, ResultsRecord
from gymbench.threads import THREADS_EXTRA
from tests.gate.test_base_gate import as_installed, gymbench
from tests.gate.test_counts import counted_suite
from tests.gate.toy_project import commit, git, make_project

COUNTS = CompareSettings(metrics=("instructions",))
LOOP = "bench.py::test_loop"


def with_loop(record: ResultsRecord, slower: float = 1.0, samples: int = 40, timed: bool = True) -> ResultsRecord:
    """``record``'s three counted benchmarks and an asyncio one timed ``slower`` times the first's time."""
    counted = [replace(b, extra={COUNTS_EXTRA: COUNTED_HOW}) for b in record.benchmarks]
    times = [x * slower for x in record.benchmarks[0].metrics["time"].samples[:samples]]
    metrics = {"time": Metric.from_samples(times, "s", "lower")} if timed else {"rows": Metric(3.0, "rows", "higher")}
    loop = BenchmarkResult(LOOP, metrics=metrics, extra={COUNTS_EXTRA: NOT_COUNTED_ASYNC})
    return replace(record, benchmarks=[*counted, loop])


def loop_note(suite: SuiteComparison) -> str:
    return next(s.why for s in suite.skipped if s.what == f"benchmark {LOOP}")


def test_an_uncounted_benchmark_shows_its_timed_change_beside_a_passing_verdict() -> None:
    suite = compare_runs([with_loop(counted_suite(1))], [with_loop(counted_suite(2), 1.34)], COUNTS)
    assert outcome_of(suite) is Outcome.PASS  # the counts pass; the slowdown is shown, not gated
    (uncounted,) = suite.uncounted
    assert uncounted.benchmark == LOOP and uncounted.why == NOT_COUNTED_ASYNC
    (timed,) = uncounted.timed
    low, high = timed.comparison.interval
    assert 1.2 < low < timed.comparison.ratio < high < 1.5  # 1.34 x, 40 samples a side with 10 % noise
    note = loop_note(suite)
    assert note.startswith(NOT_COUNTED_ASYNC + "; timed change in these runs (not gated): time +")
    assert re.search(r"time \+\d+\.\d% \[\+\d+\.\d%, \+\d+\.\d%\]$", note), note


def test_two_samples_a_side_give_their_ratios_not_an_interval_and_none_say_so() -> None:
    """A quick run times two samples a side: too few to resample, so the note gives their spread."""
    quick = compare_runs([with_loop(counted_suite(1), samples=2)], [with_loop(counted_suite(2), 1.3, 2)], COUNTS)
    assert "(2 samples a side, too few for an interval; sample ratios +" in loop_note(quick)
    untimed = compare_runs(
        [with_loop(counted_suite(1), timed=False)], [with_loop(counted_suite(2), timed=False)], COUNTS
    )
    assert loop_note(untimed).endswith("; timed change in these runs (not gated): no timed samples")
    timed_only = compare_runs([with_loop(counted_suite(1))], [with_loop(counted_suite(2), 1.34)])
    assert timed_only.uncounted == []  # a comparison of every metric judges the loop's time itself


def test_fail_on_uncounted_turns_a_passing_exit_into_3_and_only_when_asked() -> None:
    from gymbench.gate.command_runs import _uncounted_exit

    suite = compare_runs([with_loop(counted_suite(1))], [with_loop(counted_suite(2), 1.34)], COUNTS)
    result = GateResult(suite, outcome_of(suite), enforced(outcome_of(suite), "inconclusive"))
    assert _uncounted_exit(result, fail_on_uncounted=False) == 0  # the default: the counts decide
    assert _uncounted_exit(result, fail_on_uncounted=True) == 3
    counted_only = compare_runs([counted_suite(1)], [counted_suite(2)], COUNTS)
    clean = GateResult(counted_only, Outcome.PASS, Outcome.PASS)
    assert _uncounted_exit(clean, fail_on_uncounted=True) == 0


def threads_on(record: ResultsRecord, helpers: int) -> ResultsRecord:
    """test_0's timed calls saw ``helpers`` more threads work (a BLAS pool) in this side's session."""
    benches = [
        replace(b, extra={COUNTS_EXTRA: COUNTED_HOW, **({THREADS_EXTRA: helpers} if b.name.endswith("_0") else {})})
        for b in record.benchmarks
    ]
    return replace(record, benchmarks=benches)


@pytest.mark.parametrize(("base", "cand", "said"), [(2, 0, "baseline's"), (0, 1, "candidate's")])
def test_a_pool_that_worked_on_either_side_is_named(base: int, cand: int, said: str) -> None:
    suite = compare_runs([threads_on(counted_suite(1), base)], [threads_on(counted_suite(2), cand)], COUNTS)
    notes = {s.what: s.why for s in suite.skipped}
    named = notes["how counted: bench.py::test_0"]
    other = "candidate's" if said == "baseline's" else "baseline's"
    assert f"{max(base, cand)} more thread" in named and f"in the {said} timed session, none in the {other}" in named
    assert "threads forced to 1" not in notes["how counted (2 benchmarks)"]


def test_a_pool_caught_in_one_of_several_runs_a_side_is_named() -> None:
    runs = [threads_on(counted_suite(seed), 2 if seed == 3 else 0) for seed in (1, 3, 5)]
    suite = compare_runs(runs, [threads_on(counted_suite(2), 0)], COUNTS)
    named = {s.what: s.why for s in suite.skipped}["how counted: bench.py::test_0"]
    assert "2 more threads worked during its calls in the baseline's timed session, none in the candidate's" in named


# The real gate, once: an A/A commit of the toy project, its asyncio benchmark uncounted.


@pytest.fixture(scope="module")
def aa_gate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The project, its results folder, and ``gymbench gate --fail-on-uncounted``'s output (exit 3)."""
    root = tmp_path_factory.mktemp("unjudged")
    project = make_project(root / "flat", "flat")
    commit(project, "flat", "aa", note="docs only")
    results = root / "results"
    # parse_rewards's count moves ~1 % between a worktree and the working tree (test_base_gate.py)
    done = gymbench(project, "gate", "--base", "base", "benches/", "-k", "parse or async", "--fail-on-uncounted",
                    "--instructions-min-effect", "0.03", "--results-dir", str(results),
                    env=as_installed(project, "flat"))  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    return project, results, done.stdout


@pytest.mark.slow
def test_the_gate_names_the_uncounted_benchmark_with_its_timed_change_and_fails_when_asked(
    aa_gate: tuple[Path, Path, str],
) -> None:
    _, _, out = aa_gate
    note = next(line for line in out.splitlines() if "test_score_async: not counted: asyncio" in line)
    assert "; timed change in these runs (not gated): time " in note and "time_cpu " in note
    assert "gate: PASS — 1 gated" in out  # the counts pass: the exit is the setting's
    assert "exit 3: 1 not counted (--fail-on-uncounted): benches/test_toy.py::test_score_async" in out


@pytest.mark.slow
def test_the_gate_prints_which_code_each_side_imported(aa_gate: tuple[Path, Path, str]) -> None:
    project, _, out = aa_gate
    base_commit = git(project, "rev-parse", "base")[:10]
    (base_line,) = [line for line in out.splitlines() if line.startswith("base run imported ")]
    assert re.fullmatch(
        rf"base run imported toyenv from \S+/{base_commit}\w*/toyenv \(commit {base_commit}\)"
        r"; the callgrind child too: checked",
        base_line,
    ), base_line
    own = f"candidate run imported toyenv from {(project / 'toyenv').resolve()} (the working tree)"
    assert f"{own}; the callgrind child too: checked" in out.splitlines()


@pytest.mark.slow
def test_a_compare_of_the_gates_records_keeps_exit_0_and_names_a_pool_seen_on_the_base_only(
    aa_gate: tuple[Path, Path, str], tmp_path: Path
) -> None:
    """The real records, the base's test_parse edited to have seen two BLAS threads (a pool that
    the candidate's run, on a busy machine, did not catch: 3 runs in 14 on a user project)."""
    project, results, _ = aa_gate
    (base_file,) = results.glob("*/*_base.json")
    (pr_file,) = results.glob("*/*_pr.json")
    data = json.loads(base_file.read_text())
    for bench in data["benchmarks"]:
        if bench["name"].endswith("test_parse"):
            bench["extra"][THREADS_EXTRA] = 2
    pooled = tmp_path / "base_pooled.json"
    pooled.write_text(json.dumps(data))
    args = ("compare", str(pooled), str(pr_file), "--metric", "instructions", "--instructions-min-effect", "0.03")
    done = gymbench(project, *args, env=as_installed(project, "flat"))
    assert done.returncode == 0, done.stdout + done.stderr  # the default: an uncounted benchmark fails nothing
    assert "test_score_async: not counted: asyncio" in done.stdout and "timed change in these runs" in done.stdout
    named = next(line for line in done.stdout.splitlines() if "how counted: benches/test_toy.py::test_parse" in line)
    assert "2 more threads worked during its calls in the baseline's timed session, none in the candidate's" in named
