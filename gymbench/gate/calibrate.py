"""A/A calibration: learn each metric's run-to-run noise from reruns of unchanged code.

Samples within one run share the machine's state of the moment (frequency, neighbours, caches),
so resampling them understates how much a second run will differ. Calibration measures that
difference directly from several runs of the same code and stores it per machine; the gate then
widens its intervals by it and states, per metric, the smallest effect it can detect.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy import stats

from gymbench.errors import GymbenchError
from gymbench.gate.compare import MIN_SHIFT_METRICS
from gymbench.gate.noise import MetricNoise, NoiseTable
from gymbench.gate.settings import is_speed_unit
from gymbench.record import Metric, ResultsRecord

MIN_CALIBRATION_RUNS = 3
MAX_CALIBRATION_RUNS = 999
"""Reruns are saved as ``NAME-000`` to ``NAME-999``."""


def learn_noise(runs: Sequence[ResultsRecord], machine_key: str, source: str = "") -> NoiseTable:
    """Noise of every metric present in at least :data:`MIN_CALIBRATION_RUNS` of ``runs``."""
    if len(runs) < MIN_CALIBRATION_RUNS:
        raise GymbenchError(
            f"calibration needs at least {MIN_CALIBRATION_RUNS} runs of the same code, got {len(runs)}; "
            "rerun the suite more times (gymbench calibrate --runs N)"
        )
    found: dict[tuple[str, str], dict[int, Metric]] = {}
    for index, record in enumerate(runs):
        for bench in record.benchmarks:
            for name, metric in bench.metrics.items():
                found.setdefault((bench.id, name), {})[index] = metric
    found = {key: by_run for key, by_run in found.items() if len(by_run) >= MIN_CALIBRATION_RUNS}
    shifts = run_shifts(found, len(runs))
    table: dict[str, dict[str, MetricNoise]] = {}
    for (bench_id, name), by_run in found.items():
        applied = shifts if is_speed_unit(next(iter(by_run.values())).unit) else np.zeros(len(runs))
        table.setdefault(bench_id, {})[name] = metric_noise(by_run, applied)
    return NoiseTable(machine_key, table, source)


def _log_values(by_run: dict[int, Metric]) -> dict[int, float]:
    return {i: math.log(max(m.value, 1e-300)) for i, m in by_run.items()}


def run_shifts(found: dict[tuple[str, str], dict[int, Metric]], runs: int) -> np.ndarray:
    """Each run's suite-wide shift: the median over speed metrics of its deviation from typical.

    The gate takes the shift between two runs out before judging a benchmark, so the noise it
    must allow for is what is left after the shift; measuring the raw spread would count a busy
    runner twice.
    """
    deviations: list[list[float]] = [[] for _ in range(runs)]
    for by_run in found.values():
        if not is_speed_unit(next(iter(by_run.values())).unit):
            continue
        logs = _log_values(by_run)
        centre = float(np.median(list(logs.values())))
        for i, x in logs.items():
            deviations[i].append(x - centre)
    return np.asarray([float(np.median(d)) if len(d) >= MIN_SHIFT_METRICS else 0.0 for d in deviations])


def metric_noise(by_run: dict[int, Metric], shifts: np.ndarray) -> MetricNoise:
    """Spread of the runs' log medians once each run's shift is out, and one run's own view."""
    logs = np.asarray([x - shifts[i] for i, x in _log_values(by_run).items()])
    within = [_bootstrap_se_of_log_median(m.samples) for m in by_run.values()]
    finite = [w for w in within if math.isfinite(w)]
    return MetricNoise(
        run_sd=float(np.std(logs, ddof=1)),
        within_se=float(np.median(finite)) if finite else 0.0,
        runs=len(by_run),
    )


def _bootstrap_se_of_log_median(samples: Sequence[float]) -> float:
    data = np.asarray([x for x in samples if math.isfinite(x) and x > 0], dtype=float)
    if data.size < 3:
        return math.nan
    result = stats.bootstrap(
        (data,),
        lambda x, axis=-1: np.log(np.median(x, axis=axis)),
        n_resamples=500,
        vectorized=True,
        method="percentile",
        rng=np.random.default_rng(0),
    )
    return float(result.standard_error)


def rerun_suite(
    pytest_args: Sequence[str], runs: int, name: str, results_dir: Path, cwd: Path | None = None
) -> list[str]:
    """Run ``pytest <args> --gymbench-save <name>-<i>`` ``runs`` times; return the save names.

    Each run is a fresh process, as a CI job would be: in-process reruns would share warm
    caches and hide part of the noise.
    """
    from tqdm import tqdm

    from gymbench.gate.store import check_save_name

    if not MIN_CALIBRATION_RUNS <= runs <= MAX_CALIBRATION_RUNS:
        raise GymbenchError(
            f"--runs {runs}: calibration reruns the suite {MIN_CALIBRATION_RUNS} to {MAX_CALIBRATION_RUNS} "
            "times (5 by default)"
        )
    check_save_name(name)
    names = [f"{name}-{index:03d}" for index in range(runs)]
    for save_name in tqdm(names, desc="calibration runs", unit="run"):
        command = [sys.executable, "-m", "pytest", *pytest_args, "-q", "-p", "no:cacheprovider"]
        command += ["--gymbench-save", save_name, "--gymbench-results-dir", str(results_dir)]
        done = subprocess.run(command, cwd=cwd, env=dict(os.environ), capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise GymbenchError(
                f"calibration run {save_name} failed (pytest exit {done.returncode}); "
                f"fix the suite before calibrating:\n{tail}"
            )
    return names
