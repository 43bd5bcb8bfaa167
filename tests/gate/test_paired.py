"""The A/B gate's statistics: paired per-round ratios, the median over worker pairs, A/A calibration."""

from __future__ import annotations

import numpy as np
import pytest

from gymbench.gate.gate import Outcome
from gymbench.gate.paired import (
    ABMeasurements,
    PairedRounds,
    compare_paired,
    learn_paired_noise,
    median_variance_factor,
    paired_gate,
)
from gymbench.gate.settings import CompareSettings


def pair(rng: np.random.Generator, slow: float, process_sd: float = 0.02, rounds: int = 20) -> PairedRounds:
    """One worker pair: a shared drift that pairing cancels, a per-process offset it cannot."""
    drift = rng.normal(0, 0.3, rounds)  # the busy machine, shared by neighbouring rounds
    offset = rng.normal(0, process_sd)
    base = 0.001 * np.exp(drift + rng.normal(0, 0.01, rounds))
    cand = 0.001 * (1 + slow) * np.exp(drift + offset + rng.normal(0, 0.01, rounds))
    return PairedRounds(tuple(base), tuple(cand))


def measurements(seed: int, slow: dict[int, float], repeats: int = 3, benches: int = 6) -> ABMeasurements:
    rng = np.random.default_rng(seed)
    data = ABMeasurements()
    for _ in range(repeats):
        for index in range(benches):
            data.add((f"bench.py::test_{index}", "time_cpu"), pair(rng, slow.get(index, 0.0)))
    return data


def test_pairing_cancels_drift_that_swamps_the_raw_times() -> None:
    rounds = pair(np.random.default_rng(0), slow=0.10)
    raw_spread = np.std(np.log(rounds.base))
    assert raw_spread > 0.2  # the machine moved by ~30 % round to round
    assert abs(rounds.effect - np.log(1.10)) < 0.05  # the paired median still sees the 10 %


def test_calibrated_gate_finds_a_ten_percent_slowdown_and_passes_the_rest() -> None:
    noise = learn_paired_noise(measurements(1, {}, repeats=10), "m")
    result = paired_gate(measurements(2, {3: 0.10}), CompareSettings(), noise, "inconclusive", ("a", "b"))
    verdicts = {c.benchmark: c.verdict for c in result.suite.comparisons}
    assert verdicts.pop("bench.py::test_3") == "regressed"
    assert set(verdicts.values()) <= {"pass", "ungated"}  # ungated: A/A noise a hair above 5 %
    assert result.outcome is Outcome.REGRESSION and result.warnings == []
    mde = result.suite.comparisons[0].mde
    assert mde is not None and 0.01 < mde < 0.10


def test_aa_false_alarms_stay_rare_across_many_suites() -> None:
    noise = learn_paired_noise(measurements(1, {}, repeats=12), "m")
    alarms = sum(
        paired_gate(measurements(seed, {}), CompareSettings(), noise, "inconclusive", ("a", "b")).outcome
        is not Outcome.PASS
        for seed in range(100, 160)
    )
    assert alarms <= 2


def test_without_calibration_few_pairs_only_support_large_changes() -> None:
    data = measurements(3, {0: 0.10, 1: 1.0})
    result = paired_gate(data, CompareSettings(), None, "inconclusive", ("a", "b"))
    found = {c.benchmark: c for c in result.suite.comparisons}
    assert found["bench.py::test_1"].verdict == "regressed"
    assert found["bench.py::test_0"].effect.df == 2  # three pairs: Student's t with 2 degrees of freedom
    assert found["bench.py::test_0"].mde is None
    assert "no A/B calibration" in result.warnings[0]


def test_a_noisy_benchmark_is_reported_with_its_mde_not_gated_at_the_minimum_effect() -> None:
    rng = np.random.default_rng(4)
    spread = {"quiet_0": 0.01, "quiet_1": 0.01, "quiet_2": 0.01, "latency_bound": 0.30}
    aa, data = ABMeasurements(), ABMeasurements()
    for _ in range(10):
        for name, process_sd in spread.items():
            aa.add((name, "time_cpu"), pair(rng, 0.0, process_sd))
    for _ in range(3):
        for name, process_sd in spread.items():
            data.add((name, "time_cpu"), pair(rng, 0.10 if name == "latency_bound" else 0.0, process_sd))
    found = {c.benchmark: c for c in compare_paired(data, CompareSettings(), learn_paired_noise(aa, "m")).comparisons}
    assert found["quiet_0"].gated
    noisy = found["latency_bound"]
    assert not noisy.gated and noisy.mde is not None and noisy.mde > 0.10 and noisy.verdict != "regressed"


def test_repeats_that_disagree_widen_a_quiet_calibration_and_repeats_that_agree_do_not() -> None:
    """CI: two A/A worker pairs, one in a process's slow state (+80 %), against a quiet calibration."""
    noise = learn_paired_noise(measurements(1, {}, repeats=10), "m")
    rng = np.random.default_rng(7)
    split, agree = ABMeasurements(), ABMeasurements()
    for slow in (0.0, 0.8):
        split.add(("bench.py::test_0", "time_cpu"), pair(rng, slow))
        agree.add(("bench.py::test_0", "time_cpu"), pair(rng, 0.4))
    found = compare_paired(split, CompareSettings(), noise).comparisons[0]
    assert found.verdict == "inconclusive" and found.effect.high > np.log(1.5) and found.effect.df == 10 - 1 + 4 + 1
    assert found.mde is not None and found.mde > 0.3  # too noisy now to be gated at the 5 % minimum
    still = compare_paired(agree, CompareSettings(), noise).comparisons[0]
    assert still.verdict == "regressed" and still.effect.high - still.effect.low < 0.2


def test_wall_time_is_listed_not_gated_unless_asked() -> None:
    data = measurements(5, {0: 1.0})
    for key in list(data.rounds):
        data.rounds[(key[0], "time")] = data.rounds[key]  # the same rounds as wall time
    suite = compare_paired(data, CompareSettings(), None)
    assert {c.metric for c in suite.comparisons} == {"time_cpu"}
    skipped, how = suite.skipped
    assert skipped.what == "wall time (6 metrics)" and not skipped.inconclusive
    assert how.what == "how measured (6 benchmarks)" and "OPENBLAS_NUM_THREADS=1" in how.why  # said, not hidden
    assert {c.metric for c in compare_paired(data, CompareSettings(), None, gate_wall_time=True).comparisons} == {
        "time",
        "time_cpu",
    }


def test_only_a_benchmark_whose_probe_saw_a_pool_says_threads_were_forced() -> None:
    data = measurements(5, {})
    data.threads = {"bench.py::test_2": 1}  # the workers' probe, limit lifted: one more thread worked
    notes = {s.what: s.why for s in compare_paired(data, CompareSettings(), None).skipped}
    assert "threads forced to 1 (this benchmark uses BLAS" in notes["how measured: bench.py::test_2"]
    assert "threads forced to 1 (" not in notes["how measured (5 benchmarks)"]
    assert [what for what in notes if what.startswith("how measured: ")] == ["how measured: bench.py::test_2"]


def test_calibration_keeps_a_bias_between_worker_slots_as_noise() -> None:
    aa = ABMeasurements()
    for _ in range(5):
        aa.add(("b", "time"), PairedRounds((1.0, 1.0, 1.0), (1.03, 1.03, 1.03)))
    noise = learn_paired_noise(aa, "m").get("b", "time")
    assert noise is not None and noise.run_sd == pytest.approx(np.log(1.03))


def test_median_variance_factor() -> None:
    assert median_variance_factor(1) == 1.0 and median_variance_factor(2) == 0.5
    assert median_variance_factor(3) == pytest.approx(0.449, abs=0.01)
