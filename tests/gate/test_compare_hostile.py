"""Records a comparison must not take at their word: a metric whose unit changed between the sides."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gymbench.gate.compare import compare_runs
from gymbench.gate.gate import Outcome, outcome_of
from gymbench.record import Metric, ResultsRecord
from tests.gate.synthetic import suite


def in_furlongs(record: ResultsRecord) -> ResultsRecord:
    def changed(metric: Metric) -> Metric:
        return replace(metric, unit="furlongs")

    benches = [replace(b, metrics={k: changed(m) for k, m in b.metrics.items()}) for b in record.benchmarks]
    return replace(record, benchmarks=benches)


@pytest.mark.parametrize("furlongs_on", ["baseline", "candidate"])
def test_a_metric_whose_unit_changed_is_not_compared_in_either_direction(furlongs_on: str) -> None:
    """It compared as PASS one way and gated 10 regressions the other."""
    base, cand = suite(1, benchmarks=10), suite(2, benchmarks=10, factor=3.0)
    if furlongs_on == "baseline":
        base = in_furlongs(base)
    else:
        cand = in_furlongs(cand)
    result = compare_runs([base], [cand])
    assert result.comparisons == []
    said = [s for s in result.skipped if "its unit changed" in s.why]
    assert len(said) == 10 and all(s.inconclusive for s in said)
    assert ("s -> furlongs" if furlongs_on == "candidate" else "furlongs -> s") in said[0].why
    assert outcome_of(result) is Outcome.INCONCLUSIVE


def test_a_comparison_that_compared_nothing_is_no_pass() -> None:
    """An A/B run whose benchmarks had nothing to interleave said "gate: PASS — 0 gated, 0 ungated"."""
    from gymbench.gate.format import summary_line

    empty = replace(suite(1, benchmarks=1), benchmarks=[])
    result = compare_runs([empty], [replace(suite(2, benchmarks=1), benchmarks=[])])
    assert result.comparisons == [] and outcome_of(result) is Outcome.INCONCLUSIVE
    assert "0 gated, 0 ungated: nothing was compared" in summary_line(result, outcome_of(result).value)
