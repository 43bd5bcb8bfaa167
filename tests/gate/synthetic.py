"""Seeded synthetic results records with known answers, shared by the baseline and report tests."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gymbench.gate.noise import MetricNoise, NoiseTable
from gymbench.record import BenchmarkResult, Metric, ResultsRecord, save_record


def fingerprint(key: str = "machine0000a", commit: str | None = None) -> dict[str, dict[str, Any]]:
    return {
        "machine": {
            "key": key,
            "cpu_model": "Test CPU",
            "cpu_count_logical": 2,
            "memory_total_bytes": 1,
            "gpus": [],
            "gpu_note": "none: test",
        },
        "software": {"python": "3", "gymbench": "0", "packages": {}},
        "commit": {"id": commit, "dirty": False, "branch": "main"},
    }


def suite(
    seed: int,
    benchmarks: int = 12,
    factor: float = 1.0,
    slow: Mapping[int, float] | None = None,
    samples: int = 60,
    sigma: float = 0.03,
    name: str = "run",
    key: str = "machine0000a",
    commit: str | None = None,
    options: Mapping[int, Mapping[str, Any]] | None = None,
) -> ResultsRecord:
    """``benchmarks`` timings (lognormal, ``sigma`` spread), all times ``factor``, some slowed further."""
    rng = np.random.default_rng(seed)
    slow, options = slow or {}, options or {}
    results = []
    for index in range(benchmarks):
        centre = 0.001 * (index + 1) * factor * (1 + slow.get(index, 0.0))
        data = rng.lognormal(np.log(centre), sigma, samples)
        results.append(
            BenchmarkResult(
                name=f"bench.py::test_{index}",
                metrics={"time": Metric.from_samples(data, "s", "lower")},
                options=dict(options.get(index, {})),
            )
        )
    return ResultsRecord(name, results, fingerprint(key, commit))


def save_run(root: Path, record: ResultsRecord, stamp: str) -> Path:
    key = record.fingerprint["machine"]["key"]
    return save_record(record, root / key / f"{stamp}_{record.name}.json")


def calibration(*records: ResultsRecord, run_sd: float = 0.005, runs: int = 10) -> NoiseTable:
    """A calibration that knows every metric of ``records``: ``run_sd`` run-to-run noise (log scale).

    Time metrics from single runs are gated only when a calibration knows their noise, so tests
    of what the gate flags on one run against one run pass one of these.
    """
    metrics = {
        b.id: {name: MetricNoise(run_sd, 0.0, runs) for name in b.metrics} for r in records for b in r.benchmarks
    }
    return NoiseTable(records[0].fingerprint["machine"]["key"], metrics, "synthetic calibration")
