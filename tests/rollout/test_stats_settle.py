"""The statistics fold landed rollouts in a batch at a time: the figures are those of one at a time."""

from __future__ import annotations

import random

from gymbench.rollout.latency import Slo, rollout_timings
from gymbench.rollout.rows import count_row
from gymbench.rollout.stats import SETTLE_EVERY, CollectStats
from gymbench.rollout.verification import Judgement
from gymbench.types import Generation, GenerationFailed, TokenUsage, Verdict


def test_batched_figures_are_those_added_one_at_a_time() -> None:
    r = random.Random(3)
    ticks = iter(range(10**6))
    stats = CollectStats(clock=lambda: next(ticks) * 0.001, slo=Slo(e2e_s=0.5))
    e2e, totals, slot_wait, delays, met = [], [], [], [], 0
    for _ in range(2 * SETTLE_EVERY + 5):
        if r.random() < 0.1:
            timings = rollout_timings(r.random(), None, r.random(), 0.0)
            count_row(stats, None, GenerationFailed("timeout", "x"), None, timings)
            slot_wait.append(timings["slot_wait"])
            continue
        delay = {"send_lag_s": r.random(), "read_to_stamp_s": r.random()}
        generation = Generation("4", {}, TokenUsage(4, 8), {"generation": r.random()}, client_delay=delay)
        timings = rollout_timings(r.random(), generation, r.random() + 1.0, r.random())
        count_row(stats, generation, None, Judgement(Verdict(1.0, {})), timings)
        e2e.append(timings["generation"])
        totals.append(timings["total"])
        slot_wait.append(timings["slot_wait"])
        delays.append(0.0 + delay["send_lag_s"] + delay["read_to_stamp_s"])
        met += timings["generation"] <= 0.5
    summary = stats.summary()
    assert stats.latencies["e2e"].values == e2e and stats.latency.values == totals
    assert stats.client.total.values == delays
    expected_slot = 0.0
    for value in slot_wait:
        expected_slot += value
    assert summary["stage_mean_s"]["slot_wait"] == expected_slot / len(slot_wait)
    assert stats.slo_met == met and sum(stats.timeline.rollouts) == len(e2e)
