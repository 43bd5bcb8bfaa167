"""Comparisons of synthetic suites whose true effects are known."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import t

from gymbench.gate.compare import compare_runs
from gymbench.gate.gate import Outcome, enforced, outcome_of
from gymbench.gate.noise import MetricNoise, NoiseTable
from gymbench.gate.settings import CompareSettings
from gymbench.record import BenchmarkResult, Metric, ResultsRecord
from tests.gate.synthetic import calibration, fingerprint, suite

FAST = CompareSettings(resamples=500)


def verdicts(result: object) -> dict[str, str]:
    return {c.benchmark: c.verdict for c in result.comparisons}  # type: ignore[attr-defined]


def test_unchanged_suite_passes_everywhere() -> None:
    base = suite(1)
    result = compare_runs([base], [suite(2)], FAST, calibration(base))
    assert set(verdicts(result).values()) == {"pass"}
    assert result.counts == {"pass": 12, "regressed": 0, "improved": 0, "inconclusive": 0, "ungated": 0}


def test_uncalibrated_time_is_ungated_never_pass_and_the_outcome_says_nothing_was_gated() -> None:
    """One run a side, no calibration: no time metric is gated, so none may read as a pass."""
    result = compare_runs([suite(1)], [suite(2)], FAST)
    assert set(verdicts(result).values()) == {"ungated"} and result.gated == 0 and result.nothing_gated
    assert outcome_of(result) is Outcome.INCONCLUSIVE
    assert enforced(outcome_of(result), "inconclusive") is Outcome.INCONCLUSIVE


def test_one_real_regression_among_a_uniformly_slower_runner() -> None:
    """The runner is 15 % slower everywhere; benchmark 3 is 30 % slower on top of that."""
    result = compare_runs([suite(1)], [suite(2, factor=1.15, slow={3: 0.3})], FAST, calibration(suite(1)))
    assert result.shift.applied
    assert result.shift.ratio == pytest.approx(1.15, abs=0.02)
    found = verdicts(result)
    assert found.pop("bench.py::test_3") == "regressed"
    assert set(found.values()) == {"pass"}
    regressed = result.with_verdict("regressed")[0]
    assert regressed.ratio == pytest.approx(1.3, abs=0.03)
    assert regressed.interval[0] < 1.3 < regressed.interval[1]
    assert regressed.raw_ratio == pytest.approx(1.15 * 1.3, abs=0.04)


def test_without_shift_correction_the_slower_runner_fails_everything() -> None:
    settings = replace(FAST, correct_shift=False)
    result = compare_runs([suite(1)], [suite(2, factor=1.15)], settings, calibration(suite(1)))
    assert not result.shift.applied and result.shift.ratio == pytest.approx(1.15, abs=0.02)
    assert set(verdicts(result).values()) == {"regressed"}


def test_improvement_and_the_higher_is_better_direction() -> None:
    def throughput(seed: int, rate: float) -> ResultsRecord:
        data = np.random.default_rng(seed).normal(rate, rate * 0.01, 50)
        bench = BenchmarkResult("b.py::test_tp", metrics={"tok": Metric.from_samples(data, "tok", "higher")})
        return ResultsRecord("r", [bench], fingerprint())

    worse = compare_runs([throughput(1, 100)], [throughput(2, 80)], FAST).comparisons[0]
    better = compare_runs([throughput(1, 100)], [throughput(2, 125)], FAST).comparisons[0]
    assert worse.verdict == "regressed" and worse.ratio == pytest.approx(0.8, abs=0.01)
    assert better.verdict == "improved"


def test_a_change_smaller_than_the_minimum_effect_passes_even_when_significant() -> None:
    base = suite(1, sigma=0.005)
    result = compare_runs([base], [suite(2, sigma=0.005, slow={0: 0.03})], FAST, calibration(base, run_sd=0.002))
    first = result.comparisons[0]
    assert first.q < 0.01 and first.verdict == "pass"


def test_a_large_but_unsupported_change_is_inconclusive() -> None:
    result = compare_runs([suite(1, samples=2)], [suite(2, samples=2, slow={0: 0.5})], FAST)
    assert verdicts(result)["bench.py::test_0"] == "inconclusive"
    assert result.comparisons[0].effect.unit == "none"


def test_minimum_effect_from_the_marker_and_overridden_by_config() -> None:
    marked = {3: {"min_effect": 0.5}}
    base, cand = suite(1, options=marked), suite(2, slow={3: 0.3}, options=marked)
    assert verdicts(compare_runs([base], [cand], FAST, calibration(base)))["bench.py::test_3"] == "pass"
    config = replace(FAST, per_benchmark={"bench.py::test_[0-9]": 0.1})
    assert verdicts(compare_runs([base], [cand], config, calibration(base)))["bench.py::test_3"] == "regressed"


def test_calibrated_noise_widens_intervals_and_marks_noisy_metrics_ungated() -> None:
    """Each run here sees a tight spread, but calibration knows runs differ by about 10 %."""
    base, cand = suite(1, sigma=0.005), suite(2, sigma=0.005, slow={0: 0.12})
    noisy = NoiseTable("machine0000a", {b.id: {"time": MetricNoise(0.10, 0.001, 10)} for b in base.benchmarks})
    plain = compare_runs([base], [cand], FAST).comparisons[0]
    calibrated = compare_runs([base], [cand], FAST, noisy).comparisons[0]
    assert plain.verdict == "inconclusive" and plain.noise_unknown  # one run each: its noise unknown
    df = 9 + 4  # ten calibration runs, plus the prior's weight
    expected = math.expm1(0.1 * math.sqrt(2) * (t.ppf(0.995, df) + t.ppf(0.8, df)))
    assert not calibrated.gated and calibrated.mde == pytest.approx(expected, rel=0.01)
    assert calibrated.effect.df < 20
    assert calibrated.verdict == "ungated"  # its interval reaches below 1: not a measured slowdown, not a pass
    assert calibrated.interval[1] - calibrated.interval[0] > 5 * (plain.interval[1] - plain.interval[0])


def test_an_ungated_slowdown_whose_interval_excludes_one_is_inconclusive() -> None:
    """The issue's case: 1.109 [1.006, 1.222] against an MDE of 15 % was called "pass"."""
    base, cand = suite(1, sigma=0.005), suite(2, sigma=0.005, slow={0: 0.13})
    noisy = NoiseTable("machine0000a", {b.id: {"time": MetricNoise(0.025, 0.001, 10)} for b in base.benchmarks})
    result = compare_runs([base], [cand], FAST, noisy)
    slowed = result.comparisons[0]
    assert not slowed.gated and slowed.ratio < 1 + slowed.mde and slowed.interval[0] > 1
    assert slowed.verdict == "inconclusive"
    assert enforced(outcome_of(result), "inconclusive") is Outcome.INCONCLUSIVE


def test_an_ungated_metric_without_a_slowdown_is_ungated_and_the_headline_counts_it_apart() -> None:
    from gymbench.gate.format import summary_line

    base = suite(1, sigma=0.005)
    noisy = NoiseTable("machine0000a", {b.id: {"time": MetricNoise(0.10, 0.001, 10)} for b in base.benchmarks})
    result = compare_runs([base], [suite(2, sigma=0.005)], FAST, noisy)
    assert {c.verdict for c in result.comparisons} == {"ungated"} and result.nothing_gated
    line = summary_line(result, outcome_of(result).value)
    assert line.startswith("gate: INCONCLUSIVE — 0 gated, 12 ungated: nothing was gated (12 ungated)")


def test_calibration_makes_single_value_metrics_decidable() -> None:
    def sized(size: float) -> ResultsRecord:
        bench = BenchmarkResult("b.py::test_size", metrics={"size": Metric(size, "B", "lower", (size,))})
        return ResultsRecord("r", [bench], fingerprint())

    exact = NoiseTable("m", {"b.py::test_size": {"size": MetricNoise(0.0, 0.0, 5)}})
    assert compare_runs([sized(100)], [sized(120)], FAST).comparisons[0].verdict == "inconclusive"
    assert compare_runs([sized(100)], [sized(120)], FAST, exact).comparisons[0].verdict == "regressed"


def test_repeated_runs_are_the_resampled_unit() -> None:
    base = [suite(seed) for seed in range(4)]
    cand = [suite(10 + seed, slow={1: 0.4}) for seed in range(4)]
    result = compare_runs(base, cand, FAST)
    assert {c.effect.unit for c in result.comparisons} == {"run"}
    assert verdicts(result)["bench.py::test_1"] == "regressed"


def test_new_missing_and_renamed_benchmarks_are_listed_not_compared() -> None:
    base = suite(1, benchmarks=4)
    renamed = replace(base.benchmarks[2], name="moved/bench.py::test_2")
    new = replace(base.benchmarks[0], name="bench.py::test_brand_new_thing")
    cand = replace(suite(2, benchmarks=4), benchmarks=[*suite(2, benchmarks=4).benchmarks[:2], renamed, new])
    result = compare_runs([base], [cand], FAST)
    assert result.match.renamed == [("bench.py::test_2", "moved/bench.py::test_2")]
    assert result.match.missing == ["bench.py::test_3"]
    assert result.match.new == ["bench.py::test_brand_new_thing"]
    assert sorted(verdicts(result)) == ["bench.py::test_0", "bench.py::test_1"]


def test_false_discoveries_are_controlled_across_a_large_unchanged_suite() -> None:
    """200 unchanged metrics with small samples: BH keeps the whole suite quiet."""
    result = compare_runs([suite(1, benchmarks=200, samples=8)], [suite(2, benchmarks=200, samples=8)], FAST)
    assert result.counts["regressed"] + result.counts["improved"] == 0


def with_train_job(record: ResultsRecord, index: int, work: str) -> ResultsRecord:
    """The pytest API keeps a train job's parameters (and its work digest) under ``extra["train"]``."""
    benches = list(record.benchmarks)
    benches[index] = replace(benches[index], extra={"train": [{"params": {"batch": 8, "work": work}}]})
    return replace(record, benchmarks=benches)


def test_a_benchmark_whose_work_changed_under_the_same_id_is_not_compared() -> None:
    baseline = with_train_job(suite(1), 0, "aaaaaaaaaaaa")
    same = with_train_job(suite(2, slow={1: 0.5}), 0, "aaaaaaaaaaaa")
    changed = with_train_job(suite(2, slow={0: 0.5}), 0, "bbbbbbbbbbbb")
    result = compare_runs([baseline], [changed], FAST, noise=calibration(baseline))
    [skipped] = [s for s in result.skipped if s.what == "bench.py::test_0"]
    assert "its work differs" in skipped.why and "aaaaaaaaaaaa" in skipped.why and skipped.inconclusive
    assert "bench.py::test_0" not in verdicts(result)  # the 50% slower run is a change of settings, not judged
    judged = compare_runs([baseline], [same], FAST, noise=calibration(baseline))
    assert verdicts(judged)["bench.py::test_0"] == "pass" and verdicts(judged)["bench.py::test_1"] == "regressed"
