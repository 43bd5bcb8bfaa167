"""Instruction counts in the gate: a tight minimum effect, and never compared across Python/valgrind versions."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gymbench.gate.compare import compare_runs
from gymbench.gate.gate import Outcome, outcome_of
from gymbench.gate.settings import CompareSettings
from gymbench.record import BenchmarkResult, Metric, ResultsRecord
from tests.gate.synthetic import fingerprint


def counted_suite(seed: int, slow: float = 0.0, python: str = "3.11.7", valgrind: str = "3.19.0") -> ResultsRecord:
    """Three benchmarks with timings (10 % noise) and instruction counts (0.01 % noise)."""
    rng = np.random.default_rng(seed)
    benchmarks = []
    for index in range(3):
        extra = slow if index == 0 else 0.0
        times = rng.lognormal(np.log(0.001 * (1 + extra)), 0.1, 40)
        counts = rng.normal(5e6 * (index + 1) * (1 + extra), 5e2, 3)
        benchmarks.append(
            BenchmarkResult(
                name=f"bench.py::test_{index}",
                metrics={
                    "time": Metric.from_samples(times, "s", "lower"),
                    "instructions": Metric.from_samples(counts, "instructions", "lower"),
                },
            )
        )
    measured_on = fingerprint()
    measured_on["software"] = {**measured_on["software"], "python": python, "valgrind": valgrind}
    return ResultsRecord("run", benchmarks, measured_on)


def verdicts(suite: object) -> dict[tuple[str, str], str]:
    return {(c.benchmark, c.metric): c.verdict for c in suite.comparisons}  # type: ignore[attr-defined]


def test_a_two_percent_count_regression_is_caught_where_timings_cannot_see_it() -> None:
    result = compare_runs([counted_suite(1)], [counted_suite(2, slow=0.02)], CompareSettings())
    found = verdicts(result)
    assert found[("bench.py::test_0", "instructions")] == "regressed"
    assert found[("bench.py::test_0", "time")] == "ungated"  # uncalibrated time: never a pass
    assert {v for (_, metric), v in found.items() if metric == "instructions"} == {"regressed", "pass"}
    counted = next(c for c in result.comparisons if c.metric == "instructions")
    assert counted.min_effect == 0.01


def test_counts_below_the_minimum_effect_pass() -> None:
    result = compare_runs([counted_suite(1)], [counted_suite(2, slow=0.005)], CompareSettings())
    assert outcome_of(result) is Outcome.PASS


def test_the_instruction_threshold_comes_from_config_and_marker_not_the_time_one() -> None:
    settings = CompareSettings(min_effect=0.5, instructions_min_effect=0.03)
    result = compare_runs([counted_suite(1)], [counted_suite(2, slow=0.02)], settings)
    assert verdicts(result)[("bench.py::test_0", "instructions")] == "pass"
    assert settings.min_effect_for("x", {"instructions_min_effect": 0.001}, "instructions") == 0.001
    assert settings.min_effect_for("x", {"min_effect": 0.2}, "s") == 0.2


def test_counts_from_another_python_or_valgrind_are_flagged_not_compared() -> None:
    for other in ({"python": "3.12.1"}, {"valgrind": "3.22.0"}):
        base = counted_suite(1)
        cand = counted_suite(2, slow=0.02, **other)
        result = compare_runs([base], [cand], CompareSettings())
        assert {c.metric for c in result.comparisons} == {"time"}
        (skipped,) = [s for s in result.skipped if s.what.startswith("instruction counts")]
        assert "instruction counts not compared" in skipped.why and "3." in skipped.why
        assert outcome_of(result) is Outcome.INCONCLUSIVE


def test_runs_without_counts_compare_as_before() -> None:
    def timed_only(record: ResultsRecord) -> ResultsRecord:
        benches = [replace(b, metrics={"time": b.metrics["time"]}) for b in record.benchmarks]
        return replace(record, benchmarks=benches)

    result = compare_runs([timed_only(counted_suite(1))], [timed_only(counted_suite(2, python="3.12"))])
    assert [s.what for s in result.skipped] == ["time (3 metrics)"]
    assert outcome_of(result) is Outcome.INCONCLUSIVE and result.nothing_gated


def test_every_benchmark_appears_in_a_verdict_on_counts_with_how_it_was_counted() -> None:
    """An ameasure benchmark has no count: it is listed "not counted: asyncio", never just absent."""
    from gymbench.gate.instructions import COUNTED_HOW, COUNTS_EXTRA, NOT_COUNTED_ASYNC

    def with_async(record: ResultsRecord) -> ResultsRecord:
        counted = [replace(b, extra={COUNTS_EXTRA: COUNTED_HOW}) for b in record.benchmarks]
        loop = BenchmarkResult("bench.py::test_loop", metrics={"time": record.benchmarks[0].metrics["time"]})
        return replace(record, benchmarks=[*counted, replace(loop, extra={COUNTS_EXTRA: NOT_COUNTED_ASYNC})])

    settings = CompareSettings(metrics=("instructions",))
    result = compare_runs([with_async(counted_suite(1))], [with_async(counted_suite(2))], settings)
    notes = {s.what: s.why for s in result.skipped}
    assert notes["benchmark bench.py::test_loop"].startswith(NOT_COUNTED_ASYNC + "; timed change in these runs")
    assert "OPENBLAS_NUM_THREADS=1" in notes["how counted (3 benchmarks)"]
    assert "threads forced to 1 (" not in notes["how counted (3 benchmarks)"]  # none ran on a pool
    from gymbench.gate.format import summary_line

    assert summary_line(result, "pass").endswith("1 not measured")


def test_counts_missing_on_one_side_make_the_outcome_inconclusive_not_a_pass() -> None:
    """The callgrind child of one side failed: nothing was compared, which must not read as a pass."""
    from gymbench.gate.instructions import COUNTS_EXTRA, NOT_COUNTED_CHILD

    def uncounted(record: ResultsRecord) -> ResultsRecord:
        benches = [
            replace(b, metrics={"time": b.metrics["time"]}, extra={COUNTS_EXTRA: NOT_COUNTED_CHILD})
            for b in record.benchmarks
        ]
        return replace(record, benchmarks=benches)

    settings = CompareSettings(metrics=("instructions",))
    result = compare_runs([counted_suite(1)], [uncounted(counted_suite(2))], settings)
    assert result.comparisons == []
    (first, *_) = [s for s in result.skipped if s.what.startswith("benchmark ")]
    assert first.inconclusive and "instructions on one side only: not counted: it failed" in first.why
    assert outcome_of(result) is Outcome.INCONCLUSIVE


def test_only_a_benchmark_that_ran_on_a_blas_pool_says_threads_were_forced() -> None:
    """The timed session saw two threads work in test_0's calls; the others ran on the caller alone."""
    from gymbench.gate.instructions import CountedBenchmarks
    from gymbench.threads import THREADS_EXTRA

    def counted(record: ResultsRecord) -> ResultsRecord:
        timed = [
            replace(b, metrics={"time": b.metrics["time"]}, extra={THREADS_EXTRA: 2} if b.name.endswith("_0") else {})
            for b in record.benchmarks
        ]
        child = CountedBenchmarks(
            metrics={b.id: {"instructions": b.metrics["instructions"]} for b in record.benchmarks}
        )
        return replace(record, benchmarks=child.merge_into(timed))

    settings = CompareSettings(metrics=("instructions",))
    result = compare_runs([counted(counted_suite(1))], [counted(counted_suite(2))], settings)
    notes = {s.what: s.why for s in result.skipped}
    assert "threads forced to 1 (this benchmark uses BLAS" in notes["how counted: bench.py::test_0"]
    assert "2 more threads worked" in notes["how counted: bench.py::test_0"]
    assert "threads forced to 1" not in notes["how counted (2 benchmarks)"]
    assert not any(what.startswith("how counted: ") and "test_0" not in what for what in notes)


def test_counts_under_pymalloc_against_counts_under_the_c_allocator_are_inconclusive() -> None:
    """A record counted before the child ran with PYTHONMALLOC=malloc: allocation-heavy code counts
    ~30 % apart between the allocators, so the verdict names each such count and cannot pass."""
    from gymbench.gate.instructions import COUNTED_HOW, COUNTS_EXTRA

    older_how = COUNTED_HOW.replace(" with the C library's allocator (PYTHONMALLOC=malloc)", "")
    assert older_how != COUNTED_HOW

    def how(record: ResultsRecord, text: str) -> ResultsRecord:
        return replace(record, benchmarks=[replace(b, extra={COUNTS_EXTRA: text}) for b in record.benchmarks])

    settings = CompareSettings(metrics=("instructions",))
    result = compare_runs([how(counted_suite(1), older_how)], [how(counted_suite(2), COUNTED_HOW)], settings)
    assert result.comparisons == []  # none compared, every one named
    (said,) = [s for s in result.skipped if s.what.startswith("instruction counts")]
    assert said.inconclusive and "the baseline was counted under Python's own allocator" in said.why
    assert outcome_of(result) is Outcome.INCONCLUSIVE
    same = compare_runs([how(counted_suite(1), COUNTED_HOW)], [how(counted_suite(2), COUNTED_HOW)], settings)
    assert len(same.comparisons) == 3 and outcome_of(same) is Outcome.PASS
