"""The sweep and the adaptive search on simulator profiles they have never seen, against the truth.

Each profile (:mod:`tuning_profiles`: saturation 8 to 128, uniform and exponential lengths, a
KV-bound, a collapsing, a rate-limited and a compute-bound one) has a true knee from a dense grid of
closed loops (cached in ``study/tuning_truth.json``). Every tune runs in simulated time, so its
figures do not move with this machine's load. Quick mode: one small profile, one seed.
"""

from __future__ import annotations

import statistics

import pytest
from tuning_profiles import PROFILES, QUICK, score, truth_for, tune_simulated

from gymbench import Recorder

SEEDS = 3


@pytest.mark.parametrize("name", list(PROFILES))
def test_knee_error_and_delivered_share(gymbench: Recorder, name: str) -> None:
    if gymbench.quick and name != QUICK:
        pytest.skip("quick mode tunes one small profile")
    profile = PROFILES[name]
    truth = truth_for(profile)
    seeds = range(1 if gymbench.quick else SEEDS)
    walls = {}
    for method in ("sweep", "adaptive"):
        scored = [score(profile, truth, tune_simulated(profile, method, seed), seed) for seed in seeds]
        worst = max((s.knee_error for s in scored), key=abs)
        gymbench.record(f"{method}_knee_error_worst", worst, "ratio", "lower")
        gymbench.record(f"{method}_delivered_share_lowest", min(s.delivered_share for s in scored), "ratio", "higher")
        walls[method] = statistics.median(s.wall_s for s in scored)
        gymbench.record(f"{method}_wall_simulated", walls[method], "s", "lower")
    gymbench.record("adaptive_over_sweep_wall", walls["adaptive"] / walls["sweep"], "ratio", "lower")
