from __future__ import annotations

import math

import numpy as np
import pytest

from gymbench.sim import config_from_preset, describe
from gymbench.tune.curves import KNEE_FRACTION, Knee, find_knee, knee_of, plateau_of, recommend, throughput_at
from gymbench.tune.rates import Rate


def saturating(ps: list[int], saturation: int, peak: float) -> dict[int, float]:
    return {p: peak * min(p, saturation) / saturation for p in ps}


def exact(points: dict[int, float]) -> dict[int, Rate]:
    return {p: Rate(x, 0.0) for p, x in points.items()}


def test_the_knee_is_the_first_crossing_of_97_percent() -> None:
    """Defined on whole numbers (the truth's dense grid): 97 of a 100-wide ramp is 97."""
    points = saturating(list(range(1, 201)), saturation=100, peak=100.0)
    assert knee_of(points) == pytest.approx(97.0)
    falls = {**points, **{p: 100.0 - (p - 100) for p in range(101, 201)}}  # a peak: still the rising side
    assert knee_of(falls) == pytest.approx(97.0)


def test_knee_lies_between_the_bracketing_points_and_refinement_closes_in() -> None:
    coarse = saturating([8, 16, 32, 64, 128], saturation=48, peak=100.0)
    knee = knee_of(coarse)
    assert 32 < knee <= 64
    refined = knee_of(saturating([8, 16, 32, 45, 64, 128], saturation=48, peak=100.0))
    assert abs(refined - 47) < abs(knee - 47) and 45 < refined <= 64


@pytest.mark.parametrize("preset", ["vllm-like", "sglang-like", "small-slow"])
def test_knee_lands_near_each_presets_saturation(preset: str) -> None:
    config = config_from_preset(preset)
    capacity = describe(config)
    points = {n: capacity.throughput_at(config, n) for n in range(1, 4 * capacity.saturation_concurrency)}
    assert knee_of(points) == pytest.approx(capacity.saturation_concurrency, rel=0.10)


def test_interval_covers_the_truth_and_shrinks_with_less_noise() -> None:
    rng = np.random.default_rng(1)
    truth = saturating([8, 16, 32, 40, 48, 64, 128], saturation=40, peak=50.0)

    def noisy(scale: float) -> dict[int, Rate]:
        return {p: Rate(x * (1 + rng.normal(0, scale)), 1.96 * scale * x) for p, x in truth.items()}

    wide, narrow = find_knee(noisy(0.03)), find_knee(noisy(0.003))
    assert wide.low <= knee_of(truth) <= wide.high
    assert narrow.high - narrow.low < wide.high - wide.low


def test_plateau_pools_a_flat_top_but_not_a_peak() -> None:
    flat = {32: Rate(99.0, 2.0), 64: Rate(101.0, 2.0), 128: Rate(100.0, 2.0)}
    assert plateau_of(flat)[0].value == pytest.approx(100.0)
    peaked = {16: Rate(90.0, 1.0), 24: Rate(100.0, 1.0), 32: Rate(99.0, 1.0), 64: Rate(60.0, 1.0)}
    assert plateau_of(peaked) == (peaked[24], 24)


def test_recommendation_keeps_the_share_of_the_plateau() -> None:
    curve = exact(saturating([8, 16, 32, 64, 128], saturation=48, peak=100.0))
    knee = find_knee(curve)
    advice = recommend(curve, knee)
    assert advice.parallelism == int(np.ceil(knee.parallelism))
    assert advice.share >= KNEE_FRACTION - 1e-9
    lower = recommend(curve, knee, share=0.8)
    assert lower.parallelism < advice.parallelism and lower.share == pytest.approx(0.8, abs=0.05)


def test_interpolation_in_log_space() -> None:
    assert throughput_at({8: 10.0, 32: 30.0}, 16) == pytest.approx(20.0)
    with pytest.raises(ValueError):
        find_knee({})
    assert isinstance(find_knee(exact({4: 1.0})), Knee)


def test_a_level_below_the_knee_whose_whole_interval_is_above_95_percent_is_recommended() -> None:
    """Issue 39: a level measured below the knee is enough when its throughput is not below 95% of the
    plateau anywhere in its interval; one that only reaches 95% with its noise, or was measured short
    of its precision target, is not (taken on less, advice delivered 92% of a true peak)."""
    plateau = {8: Rate(100.0, 0.5), 16: Rate(100.0, 0.5), 32: Rate(100.0, 0.5)}
    curve = {2: Rate(50.0, 0.5), 4: Rate(96.5, 0.5), **plateau}
    knee = find_knee(curve)
    assert math.ceil(knee.parallelism) > 4
    advice = recommend(curve, knee)
    assert advice.parallelism == 4 and advice.expected == 96.5
    for doubtful in (Rate(96.5, 2.5), Rate(96.5, 0.5, under_measured=True), Rate(94.0, 0.5)):
        other = {**curve, 4: doubtful}
        assert recommend(other, find_knee(other)).parallelism == math.ceil(find_knee(other).parallelism)
