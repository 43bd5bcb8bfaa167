"""What the gate costs: comparing a whole suite of stored runs, or of interleaved A/B rounds (synthetic data)."""

from __future__ import annotations

import numpy as np
import pytest

from gymbench import BenchmarkResult, Metric, Recorder, ResultsRecord
from gymbench.fingerprint import collect_fingerprint
from gymbench.gate.compare import compare_runs
from gymbench.gate.paired import ABMeasurements, PairedRounds, compare_paired
from gymbench.gate.settings import CompareSettings


def make_suite(seed: int, benchmarks: int, samples: int) -> ResultsRecord:
    rng = np.random.default_rng(seed)
    return ResultsRecord(
        name="suite",
        fingerprint=collect_fingerprint(),
        benchmarks=[
            BenchmarkResult(
                name=f"bench_{index}",
                metrics={
                    name: Metric.from_samples(rng.lognormal(-7, 0.05, samples), "s", "lower")
                    for name in ("time", "time_cpu")
                },
            )
            for index in range(benchmarks)
        ],
    )


@pytest.mark.parametrize("samples", [50, 2000])
def test_compare_fifty_benchmarks(gymbench: Recorder, samples: int) -> None:
    """One ``gymbench compare`` of a 50-benchmark suite (100 metrics) with 2000 bootstrap resamples."""
    base, cand = make_suite(1, 50, samples), make_suite(2, 50, samples)
    result = gymbench.measure(compare_runs, [base], [cand], CompareSettings())
    assert len(result.comparisons) == 100


def test_compare_paired_fifty_benchmarks(gymbench: Recorder) -> None:
    """One ``gymbench compare --ab`` verdict: 50 benchmarks x 2 metrics, 3 worker pairs of 20 rounds."""
    rng = np.random.default_rng(3)
    data = ABMeasurements()
    for index in range(50):
        for metric in ("time", "time_cpu"):
            for _ in range(3):
                base = rng.lognormal(-7, 0.1, 20)
                cand = base * rng.lognormal(0, 0.02, 20)
                data.add((f"bench_{index}", metric), PairedRounds(tuple(base), tuple(cand)))
    result = gymbench.measure(compare_paired, data, CompareSettings(), None)
    assert {c.metric for c in result.comparisons} == {"time_cpu"}  # wall time is listed, not gated
    assert len(result.comparisons) == 50
