"""A shift-corrected comparison shows raw and corrected side by side and says when it reverses a change."""

from __future__ import annotations

import math

from gymbench.gate.compare import MetricComparison
from gymbench.gate.stats import Effect
from gymbench.gate.view import metric_cells


def latency(base: float, cand: float, corrected_ratio: float, verdict: str) -> MetricComparison:
    log = math.log(corrected_ratio)
    effect = Effect(log, log - 0.05, log + 0.05, 0.02, "sample")
    return MetricComparison(
        "bench.py::test_p4", "latency_p50", "s", "lower", base, cand, effect, 0.05, None, 1e-13, 1.5e-13,
        verdict,  # type: ignore[arg-type]
    )  # fmt: skip


def cells(c: MetricComparison) -> tuple[str, ...]:
    return metric_cells(c, 0.01)


def test_a_change_the_correction_reverses_is_said_with_both_ratios() -> None:
    change, verdict = cells(latency(0.106, 0.126, 0.49, "improved"))[3:]
    assert change == "-51.0% [-53.4%, -48.5%], raw +18.9%"
    assert verdict.startswith("improved (raw went up +18.9%") and "suite-wide shift" in verdict


def test_an_uncorrected_change_reads_as_before() -> None:
    change, verdict = cells(latency(0.100, 0.110, 0.110 / 0.100, "regressed"))[3:]
    assert change == "+10.0% [+4.6%, +15.6%]" and verdict == "REGRESSED"


def test_a_pass_names_no_direction_so_it_is_not_annotated_as_reversed() -> None:
    change, verdict = cells(latency(0.100, 0.168, 0.99, "pass"))[3:]  # raw +68%, corrected -1%: within the noise
    assert change.endswith(", raw +68.0%") and change.startswith("-1.0%") and verdict == "pass"
