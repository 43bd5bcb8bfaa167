"""The steady-state probe against closed loops whose rate is known: within 2%, for every length law.

The old estimator (occupancy ÷ mean hold over a fixed ``3p + 32`` rollouts) read 1.09-1.29× the
true rate with exponential lengths on exactly these closed loops.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.sim import InProcessBackend, SimConfig
from gymbench.tune.probe import Prober, ProbeResult
from gymbench.tune.rates import (
    CLIENT,
    SERVER,
    Completion,
    Meter,
    Precision,
    Rate,
    correlation_factor,
    drift_between_windows,
    pooled,
    ratio,
    remeasured,
)
from tests.tune.simulated import HoldingBackend, long_run_tokens_per_s, sim_counters, with_prober

DISTRIBUTIONS = ("fixed", "uniform", "exponential")


def probe_once(backend: object, parallelism: int, counters: object = None) -> ProbeResult:
    async def work(prober: Prober) -> ProbeResult:
        return await prober.probe(parallelism, SemaphoreStrategy(parallelism))

    return with_prober(backend, work, counters=counters)  # type: ignore[arg-type]


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("parallelism", [5, 80])
def test_idealised_closed_loop_within_two_percent(dist: str, parallelism: int) -> None:
    """No engine: each request held one step plus one per token. Its rate is known in closed form."""
    backend = HoldingBackend(dist, 32, seed=parallelism)
    result = probe_once(backend, parallelism)
    assert result.work_unit == "tokens" and result.rate.source == CLIENT
    assert result.work_rate.value == pytest.approx(backend.rate(parallelism) * backend.mean_length, rel=0.02)
    assert result.work_rate.relative <= 0.02


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_without_token_counts_rollouts_are_counted(dist: str) -> None:
    backend = HoldingBackend(dist, 32, seed=3, report_tokens=False)
    result = probe_once(backend, 20)
    assert result.work_unit == "rollouts" and result.per_rollout == 1.0
    assert result.rate.value == pytest.approx(backend.rate(20), rel=0.02)


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("parallelism", [12, 48])
def test_simulated_engine_within_two_percent_of_its_long_run_rate(dist: str, parallelism: int) -> None:
    """Below (12) and above (48) the engine's saturation at 24 sequences, client side and server side."""
    config = SimConfig(max_num_seqs=24, step_base_s=0.02, step_per_seq_s=0.0008, output_tokens_dist=dist)
    truth = long_run_tokens_per_s(config, parallelism)
    for use_counters in (False, True):
        backend = InProcessBackend(config.replace(seed=7))
        result = probe_once(backend, parallelism, sim_counters(backend) if use_counters else None)
        assert result.work_rate.value == pytest.approx(truth, rel=0.02), (dist, parallelism, use_counters)


def test_server_counters_are_used_when_they_span_enough_polls() -> None:
    config = SimConfig(max_num_seqs=24, step_base_s=0.02, step_per_seq_s=0.0008, output_tokens_dist="uniform")
    backend = InProcessBackend(config)
    result = probe_once(backend, 40, sim_counters(backend))
    assert result.rate.source == SERVER
    assert result.output_tokens_per_s == pytest.approx(result.work_rate.value)


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_rollouts_per_second_from_a_fair_sample_of_lengths(dist: str) -> None:
    """Rollouts/s = tokens/s ÷ tokens per rollout, the latter pooled over a tune's probes from the
    first rollouts dispatched, all landed. The rollouts that land first are the short ones and
    those cut off at a stop the long ones: either sample alone would read 10-30% off here."""
    backend = HoldingBackend(dist, 32, seed=11)

    async def work(prober: Prober) -> list[ProbeResult]:
        results = [await prober.probe(p, SemaphoreStrategy(p)) for p in (10, 40, 160, 320, 320)]
        prober.normalise(results)
        return results

    results = with_prober(backend, work)
    for result in results:
        assert result.rate.value == pytest.approx(backend.rate(result.parallelism), rel=0.02)


def test_once_the_allowance_is_spent_a_probe_measures_the_sustained_rate() -> None:
    """600 requests/minute in a bucket that starts full. A probe that meets 429s measures from the
    first one on: the rate limit's 10/s, not what the bucket's allowance allowed before."""
    config = SimConfig(max_num_seqs=512, step_base_s=0.02, step_per_seq_s=0.0, output_tokens_mean=16, rpm_limit=600)
    backend = InProcessBackend(config, max_retries=5)

    async def work(prober: Prober) -> list[ProbeResult]:
        results = [await prober.probe(64, SemaphoreStrategy(64)) for _ in range(3)]
        prober.normalise(results)
        return results

    results = with_prober(backend, work)
    assert results[-1].rate_limited
    assert results[-1].rate.value == pytest.approx(10.0, rel=0.05)


def meter_of(values: list[tuple[float, float]], parallelism: int = 4, precision: Precision | None = None) -> Meter:
    """A meter fed completions of the given (hold, work), back to back on ``parallelism`` slots."""
    meter = Meter(parallelism, precision or Precision(0.02, 3, 40))
    clock, area = 0.0, 0.0
    for hold, work in values:
        clock += hold / parallelism
        area += parallelism * hold / parallelism
        meter.add(Completion(clock - hold, clock, work, True, area))
    return meter


def test_lockstep_bursts_give_the_exact_rate() -> None:
    """Eight slots that all finish at once every second: 8 rollouts/s with a zero-width interval."""
    meter = Meter(8, Precision(0.02, 3, 40))
    for wave in range(1, 30):
        for _ in range(8):
            meter.add(Completion(wave - 1.0, float(wave), 1.0, True, 8.0 * wave))
    rate = meter.estimate()
    assert rate is not None and rate.value == pytest.approx(8.0) and rate.half_width == pytest.approx(0.0, abs=1e-9)
    assert meter.done()


def test_a_drifting_window_restarts_from_its_second_half() -> None:
    fast = [(0.5, 1.0)] * 40
    slow = [(1.0, 1.0)] * 40
    meter = meter_of(fast + slow)
    assert meter.restarts == 0
    meter.done()
    assert meter.restarts == 1


def test_the_first_refusal_restarts_the_window() -> None:
    meter = Meter(4, Precision(0.02, 3, 40))
    for k in range(20):
        meter.add(Completion(k, k + 1.0, 1.0, True, 4.0 * (k + 1), throttled=k == 12))
    assert meter.throttled == 1 and meter.restarts == 1 and meter.window_start is not None
    assert meter.window_start.end == 13.0


def test_rate_arithmetic() -> None:
    a, b = Rate(100.0, 2.0, 10), Rate(110.0, 2.2, 10)
    value, low, high = ratio(b, a)
    assert value == pytest.approx(1.1) and low < 1.1 < high
    both = pooled([a, Rate(102.0, 2.0, 10)])
    assert both.value == pytest.approx(101.0) and both.half_width < 2.0
    assert a.scaled(0.5).value == 50.0 and a.capped(90.0).value == 90.0
    assert correlation_factor([1.0, 2.0, 1.0, 2.0, 1.0, 2.0]) == 1.0  # alternating: no positive correlation
    assert correlation_factor([1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7]) > 2.0  # a trend
    assert math.isinf(Rate(0.0, 1.0).relative)


def test_readings_apart_in_time_are_merged_allowing_for_drift() -> None:
    agree = [Rate(100.0, 2.0, 10), Rate(100.5, 2.0, 10)]
    assert remeasured(agree) == pooled(agree)  # within their noise: inverse variance
    drifted = [Rate(100.0, 1.0, 10), Rate(110.0, 1.0, 10)]
    assert pooled(drifted).high < 110.0  # inverse variance: an interval that excludes the later reading
    both = remeasured(drifted)
    assert both.value == pytest.approx(105.0) and both.low < 100.0 and both.high > 110.0
    uneven = remeasured([Rate(100.0, 0.5, 10), Rate(110.0, 3.0, 10)])
    assert 104.0 < uneven.value < 106.0  # the narrower window is not trusted over the drift between them
    unmeasured = [Rate(0.0, math.inf, 1, samples=0, under_measured=True), Rate(50.0, 1.0, 10)]
    assert remeasured(unmeasured) == pooled(unmeasured)


def test_the_machines_drift_is_read_from_every_levels_two_passes() -> None:
    """Levels whose two passes agree within their noise: no drift to speak of. A second pass 10% faster at every
    level: a shift no knee feels, no drift. Passes scattered by a known drift between windows
    (σ = 5% per window, each window's own interval ±1%): its estimate, within a factor 1.5 over 200
    levels (seeded). Two levels: too few to tell, nothing said."""
    rng = np.random.default_rng(3)
    noise = Rate(100.0, 1.0, 20).se / 100.0  # each reading's own (0.48%)
    steady = [(Rate(100.0, 1.0, 20), Rate(100.0 * (1 + rng.normal(0, noise)), 1.0, 20)) for _ in range(12)]
    assert drift_between_windows(steady) < (noise / 2) ** 2  # nothing, or a trace well inside the noise
    shifted = [(Rate(v, 1.0, 20), Rate(1.1 * v, 1.1, 20)) for v in (50.0, 80.0, 100.0, 100.0, 101.0)]
    assert drift_between_windows(shifted) == pytest.approx(0.0, abs=1e-12)
    sigma = 0.05

    def window(true: float) -> Rate:
        return Rate(true * math.exp(rng.normal(0, sigma)), 0.01 * true, 20)

    drifting = [(window(v), window(v)) for v in rng.uniform(20, 200, size=200)]
    assert sigma**2 / 1.5 < drift_between_windows(drifting) < sigma**2 * 1.5
    assert drift_between_windows(drifting[:2]) == 0.0


def test_a_level_read_once_or_agreeing_by_chance_gets_the_machines_drift_in_its_interval() -> None:
    """A level whose own window said ±1% on a machine drifting 5% between windows: its interval holds
    the drift (±1.96·√(0.01² /1.96² + 0.05²) ≈ ±10%), read once or twice."""
    once = remeasured([Rate(100.0, 1.0, 30)], drift=0.05**2)
    assert once.value == 100.0 and 9.5 < once.half_width < 10.6
    twice = remeasured([Rate(100.0, 1.0, 30), Rate(100.5, 1.0, 30)], drift=0.05**2)
    assert twice.value == pytest.approx(100.25, abs=0.01) and 6.5 < twice.half_width < 7.5  # two windows: ÷√2
    assert remeasured([Rate(100.0, 1.0, 30)]) == Rate(100.0, 1.0, 30)  # no drift said: the reading as it is


def test_pooling_rates_that_measured_nothing_is_unmeasured_not_a_division_by_zero() -> None:
    # A re-probe of a level where nothing completed (every rollout failed) has two infinite intervals.
    nothing = Rate(0.0, math.inf, 1, samples=0, under_measured=True)
    both = pooled([nothing, nothing])
    assert both.value == 0.0 and math.isinf(both.half_width) and both.under_measured and both.samples == 0


def test_a_level_that_meets_its_target_in_its_last_batch_is_not_under_measured() -> None:
    """Out of batches is not short of the target: ``±1.6% after 40 batches`` was called under-measured
    where ±2% was asked (issue 39). Steady holds meet any target; 3 batches at most are all there is."""
    steady = meter_of([(1.0, 1.0)] * 4 * 6, precision=Precision(0.02, 3, 3))
    assert steady.batches() >= 3 and steady.done()
    rate = steady.final()
    assert rate.relative <= 0.02 and not rate.under_measured


def test_a_level_short_of_its_target_when_its_batches_run_out_is_under_measured() -> None:
    noisy = [(0.5 if k % 8 < 4 else 2.0, 1.0) for k in range(4 * 8)]
    meter = meter_of(noisy, precision=Precision(0.02, 3, 3))
    assert meter.done()
    rate = meter.final()
    assert rate.relative > 0.02 and rate.under_measured
