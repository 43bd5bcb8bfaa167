"""Issue 24: an unchanged rerun on a machine whose load changed is not a regression.

One run against one, with no calibration, cannot tell a load change from a slower commit: the
stored-run gate shows such time metrics but does not gate them (inconclusive at most). With a
calibration, or with 3+ runs a side, time is gated as before; instruction counts always are.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gymbench.gate.compare import TIME_NOT_GATED, compare_runs
from gymbench.gate.gate import Outcome, outcome_of, run_gate
from gymbench.gate.settings import CompareSettings
from gymbench.gate.store import Selection
from gymbench.record import BenchmarkResult, Metric, ResultsRecord
from tests.gate.synthetic import calibration, fingerprint, suite

FAST = CompareSettings(resamples=300)


def loaded(record: ResultsRecord, factors: list[float]) -> ResultsRecord:
    """Every time sample of benchmark ``i`` times ``factors[i]``: what a load change does to a rerun."""
    benches = []
    for bench, factor in zip(record.benchmarks, factors, strict=True):
        metric = bench.metrics["time"]
        benches.append(
            replace(bench, metrics={"time": Metric.from_samples([x * factor for x in metric.samples], "s", "lower")})
        )
    return replace(record, benchmarks=benches)


LOADS = [1.3, 1.6, 2.0, 3.0, 0.7]
SIZES = [1, 3, 12]


@pytest.mark.hostile
@pytest.mark.parametrize("load", LOADS)
@pytest.mark.parametrize("benchmarks", SIZES)
@pytest.mark.parametrize("seed", [0, 1])
def test_an_unchanged_rerun_under_another_load_is_not_a_regression(load: float, benchmarks: int, seed: int) -> None:
    base = suite(seed, benchmarks=benchmarks, sigma=0.01)
    rerun = loaded(suite(seed + 100, benchmarks=benchmarks, sigma=0.01), [load] * benchmarks)
    result = compare_runs([base], [rerun], FAST)
    assert result.counts["regressed"] == 0 and result.counts["improved"] == 0
    assert outcome_of(result) is not Outcome.REGRESSION
    (note,) = [s for s in result.skipped if s.what == f"time ({benchmarks} metrics)"]
    assert note.why == TIME_NOT_GATED and not note.inconclusive


@pytest.mark.hostile
@pytest.mark.parametrize("seed", range(4))
def test_an_uneven_load_change_is_not_a_regression_either(seed: int) -> None:
    """A load change slows memory-bound benchmarks more than others: no shift correction removes it."""
    rng = np.random.default_rng(seed)
    factors = list(1 + rng.uniform(0.0, 0.8, 12))
    result = compare_runs([suite(seed)], [loaded(suite(seed + 50), factors)], FAST)
    assert result.counts["regressed"] == 0
    assert {c.verdict for c in result.comparisons} <= {"ungated", "inconclusive"}


@pytest.mark.hostile
@pytest.mark.parametrize("benchmarks", SIZES)
def test_a_real_regression_with_a_calibration_is_still_flagged(benchmarks: int) -> None:
    base = suite(1, benchmarks=benchmarks, sigma=0.01)
    cand = suite(2, benchmarks=benchmarks, sigma=0.01, slow={0: 0.4})
    result = compare_runs([base], [cand], FAST, calibration(base))
    verdicts = {c.benchmark: c.verdict for c in result.comparisons}
    assert verdicts.pop("bench.py::test_0") == "regressed"
    assert set(verdicts.values()) <= {"pass"}
    assert outcome_of(result) is Outcome.REGRESSION
    assert not any(c.noise_unknown for c in result.comparisons) and not result.skipped


def test_a_calibration_that_lacks_a_metric_leaves_only_that_metric_ungated() -> None:
    base, cand = suite(1, benchmarks=3), suite(2, benchmarks=3, slow={0: 0.4, 2: 0.4})
    partial = calibration(replace(base, benchmarks=base.benchmarks[:1]))
    found = {c.benchmark: c for c in compare_runs([base], [cand], FAST, partial).comparisons}
    assert found["bench.py::test_0"].verdict == "regressed"
    assert found["bench.py::test_2"].verdict == "inconclusive" and found["bench.py::test_2"].noise_unknown


def test_three_runs_a_side_show_their_own_noise_and_are_gated() -> None:
    base = [suite(seed) for seed in range(3)]
    cand = [suite(10 + seed, slow={1: 0.4}) for seed in range(3)]
    result = compare_runs(base, cand, FAST)
    assert {c.benchmark: c.verdict for c in result.comparisons}["bench.py::test_1"] == "regressed"
    assert not result.skipped


def test_instruction_counts_are_gated_without_a_calibration() -> None:
    def counted(value: float) -> ResultsRecord:
        counts = np.random.default_rng(int(value)).normal(value, value * 1e-4, 3)
        bench = BenchmarkResult(
            "b.py::test_c", metrics={"instructions": Metric.from_samples(counts, "instructions", "lower")}
        )
        return ResultsRecord("r", [bench], fingerprint())

    (found,) = compare_runs([counted(1e6)], [counted(1.03e6)], FAST).comparisons
    assert found.verdict == "regressed" and not found.noise_unknown


def test_rates_are_time_metrics_too() -> None:
    def rate(value: float, seed: int) -> ResultsRecord:
        data = np.random.default_rng(seed).normal(value, value * 0.01, 40)
        bench = BenchmarkResult("b.py::test_tp", metrics={"rate": Metric.from_samples(data, "tok/s", "higher")})
        return ResultsRecord("r", [bench], fingerprint())

    (found,) = compare_runs([rate(100, 1)], [rate(60, 2)], FAST).comparisons
    assert found.verdict == "inconclusive" and found.noise_unknown


def test_the_gate_warns_once_why_time_is_not_gated() -> None:
    base, rerun = suite(1, benchmarks=2), loaded(suite(2, benchmarks=2), [1.3, 1.3])
    result = run_gate(Selection([base], "base"), Selection([rerun], "rerun"), FAST, None, "inconclusive")
    assert result.outcome is Outcome.INCONCLUSIVE
    (warning,) = result.warnings
    assert "no calibration for this machine" in warning and "not gated" in warning and "\n" not in warning
