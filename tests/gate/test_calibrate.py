"""A/A calibration on synthetic reruns whose run-to-run noise is known."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gymbench.errors import GymbenchError
from gymbench.gate.calibrate import learn_noise
from gymbench.record import Metric, ResultsRecord
from tests.gate.synthetic import suite


def reruns(count: int, run_sd: float, runner_sd: float) -> list[ResultsRecord]:
    """Runs whose benchmarks move independently by ``run_sd`` and all together by ``runner_sd``."""
    rng = np.random.default_rng(5)
    out = []
    for index in range(count):
        runner = rng.normal(0, runner_sd)
        record = suite(100 + index, benchmarks=10, sigma=0.01)
        moved = []
        for bench in record.benchmarks:
            factor = float(np.exp(runner + rng.normal(0, run_sd)))
            time = bench.metrics["time"]
            moved.append(
                replace(
                    bench,
                    metrics={"time": Metric.from_samples([x * factor for x in time.samples], "s", "lower")},
                )
            )
        out.append(replace(record, benchmarks=moved))
    return out


def test_learns_the_run_to_run_noise_without_the_runner_shift() -> None:
    table = learn_noise(reruns(30, run_sd=0.04, runner_sd=0.3), "machine0000a")
    sds = [n.run_sd for by in table.metrics.values() for n in by.values()]
    assert len(sds) == 10
    assert np.median(sds) == pytest.approx(0.04, rel=0.25)
    noise = table.get("bench.py::test_0", "time")
    assert noise is not None and noise.runs == 30
    assert 0 < noise.within_se < noise.run_sd
    assert noise.between_sd == pytest.approx(np.sqrt(noise.run_sd**2 - noise.within_se**2))


def test_needs_at_least_three_runs() -> None:
    with pytest.raises(GymbenchError, match="at least 3 runs"):
        learn_noise(reruns(2, 0.01, 0.0), "m")


def test_a_metric_quiet_by_chance_is_pulled_toward_the_suites_noise() -> None:
    from gymbench.gate.noise import PRIOR_DF, MetricNoise, NoiseTable

    table = NoiseTable("m", {f"b{i}": {"time": MetricNoise(0.01 if i == 0 else 0.10, 0.0, 5)} for i in range(9)})
    sd, df = table.moderated("b0", "time") or (0.0, 0.0)
    assert df == 4 + PRIOR_DF
    assert sd == pytest.approx(np.sqrt((4 * 0.01**2 + PRIOR_DF * 0.10**2) / (4 + PRIOR_DF)))
    assert table.moderated("b1", "time") == pytest.approx((0.10, 4 + PRIOR_DF))
    assert table.moderated("nope", "time") is None


def test_calibrate_ab_takes_a_path_after_it_as_the_suite_not_as_a_ref(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gymbench calibrate --ab benches/`` failed with "'benches/' is not a commit"."""
    import subprocess

    from gymbench.gate.command_runs import ab_ref_and_suite

    (tmp_path / "benches").mkdir()
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "x"], check=True)  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert ab_ref_and_suite("benches/", []) == ("", ["benches/"])
    assert ab_ref_and_suite("benches/", ["-x"]) == ("", ["benches/", "-x"])
    assert ab_ref_and_suite("HEAD", []) == ("HEAD", ["benches/"])
    assert ab_ref_and_suite(None, []) == (None, ["benches/"])
