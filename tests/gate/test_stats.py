"""The statistical primitives on seeded data with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gymbench.gate.stats import (
    benjamini_hochberg,
    bootstrap_log_ratio,
    minimum_detectable_effect,
    suite_shift,
    two_sided_p,
    widen,
)


def test_interval_contains_the_true_ratio_and_the_point_is_close() -> None:
    rng = np.random.default_rng(1)
    base = rng.lognormal(np.log(1.0), 0.05, 200)
    cand = rng.lognormal(np.log(1.2), 0.05, 200)
    effect = bootstrap_log_ratio(base, cand, confidence=0.99, seed=0)
    assert effect.low < math.log(1.2) < effect.high
    assert effect.log_ratio == pytest.approx(math.log(1.2), abs=0.02)
    assert 0 < effect.se < 0.01
    assert effect.unit == "sample"


def test_interval_coverage_is_near_nominal() -> None:
    """Over 60 seeded replications a 90 % interval should miss the truth about 6 times."""
    rng = np.random.default_rng(2)
    misses = 0
    for seed in range(60):
        base, cand = rng.lognormal(0, 0.1, 40), rng.lognormal(0, 0.1, 40)
        effect = bootstrap_log_ratio(base, cand, confidence=0.9, seed=seed)
        misses += not (effect.low <= 0 <= effect.high)
    assert 1 <= misses <= 14


def test_too_few_samples_give_no_interval() -> None:
    effect = bootstrap_log_ratio([1.0, 1.1], [2.0, 2.1], confidence=0.95, seed=0)
    assert effect.unit == "none" and not effect.measured
    assert effect.log_ratio == pytest.approx(math.log(2.05 / 1.05))
    assert two_sided_p(effect.log_ratio, effect.se) == 1.0


def test_identical_samples_still_get_a_finite_interval() -> None:
    effect = bootstrap_log_ratio([1.0] * 10, [1.0] * 10, confidence=0.95, seed=0)
    assert effect.log_ratio == 0 and math.isfinite(effect.se) and effect.low <= 0 <= effect.high


def test_widen_adds_noise_in_quadrature_and_keeps_the_point() -> None:
    effect = bootstrap_log_ratio(np.linspace(1, 1.1, 50), np.linspace(1.05, 1.15, 50), 0.95, 0)
    wider = widen(effect, 0.1, 0.95)
    assert wider.log_ratio == effect.log_ratio
    assert wider.se == pytest.approx(math.hypot(effect.se, 0.1))
    assert wider.low < effect.low and wider.high > effect.high
    assert effect.high - effect.log_ratio < wider.high - wider.log_ratio < effect.high - effect.log_ratio + 0.2


def test_two_sided_p_matches_the_normal_table() -> None:
    assert two_sided_p(1.96, 1.0) == pytest.approx(0.05, abs=1e-3)
    assert two_sided_p(0.0, 1.0) == pytest.approx(1.0)


def test_benjamini_hochberg_known_answer() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005, 0.01, 0.03, 0.04 -> p * m / rank = 0.02, 0.02, 0.04, 0.04 (monotone)
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert benjamini_hochberg([]) == []


def test_minimum_detectable_effect_known_answer() -> None:
    assert minimum_detectable_effect(0.1, alpha=0.05, power=0.8) == pytest.approx((1.959964 + 0.841621) * 0.1)


def test_suite_shift_is_the_median_and_ignores_a_few_outliers() -> None:
    values = [0.10] * 9 + [0.5, -0.4]
    shift, se = suite_shift(values, seed=0)
    assert shift == pytest.approx(0.10)
    assert 0 <= se < 0.05


def test_direct_bootstrap_medians_match_resampling() -> None:
    """The closed-form sampler and brute-force resampling give the same distribution."""
    from scipy import stats

    from gymbench.gate.stats import bootstrap_medians

    rng = np.random.default_rng(3)
    data = rng.lognormal(0, 0.3, 301)
    direct = bootstrap_medians(data, 4000, rng)
    brute = np.median(data[rng.integers(0, data.size, (4000, data.size))], axis=1)
    assert stats.ks_2samp(direct, brute).pvalue > 0.01
    assert np.std(direct) == pytest.approx(np.std(brute), rel=0.1)


def test_welch_satterthwaite_known_answers() -> None:
    from gymbench.gate.stats import welch_satterthwaite

    assert welch_satterthwaite((1.0, math.inf), (1.0, 9.0)) == pytest.approx(36.0)  # (1 + 1)^2 / (1 / 9)
    assert welch_satterthwaite((1.0, math.inf)) == math.inf


def test_few_degrees_of_freedom_make_the_test_less_sure() -> None:
    assert two_sided_p(3.0, 1.0, df=5) > 5 * two_sided_p(3.0, 1.0)
