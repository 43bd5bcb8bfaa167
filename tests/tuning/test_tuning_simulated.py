"""Tuning and diagnosis against the in-process simulator in simulated time: exact, load-independent.

The tuner meets the same engine it meets over HTTP, but every duration is simulated, so a starved
CPU cannot inflate a latency and move the knee. The client's own cost is zero here, which is why
the verdicts that need real CPU or real sockets ("client", "connection pool", "verification")
stay in ``test_tune_and_diagnose.py``.
"""

from __future__ import annotations

import asyncio
import tempfile
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from gymbench.builtin import adaptive
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.rollout.engine import CollectSettings
from gymbench.rollout.verification import VerifySettings
from gymbench.sim import SimConfig, describe
from gymbench.sim.inprocess import InProcessBackend
from gymbench.sim.virtual import run_in_simulated_time
from gymbench.testing import make_plugins
from gymbench.tuning.diagnose import Diagnosis, diagnose
from gymbench.tuning.probe import Prober
from gymbench.tuning.sweep import (
    StabilityResult,
    SweepSettings,
    TuneResult,
    adaptive_search,
    doubling_sweep,
    validate_stability,
)

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "gymbench" / "data" / "example_tasks.jsonl"
# Saturates at 16 sequences. 24 output tokens as in the real-time test; in simulated time a closed
# loop's clients return the instant a step ends, so 16 clients already reach the plateau.
KNEE16 = SimConfig(max_num_seqs=16, step_base_s=0.01, step_per_seq_s=0.0005, output_tokens_mean=24)


@pytest.fixture(autouse=True)
def adaptive_on_the_loop_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The adaptive strategy reads ``time.monotonic`` and takes no clock: point it at the loop's."""
    clock = types.SimpleNamespace(monotonic=lambda: asyncio.get_running_loop().time())
    monkeypatch.setattr(adaptive, "time", clock)


def with_simulated_prober(
    config: SimConfig, work: Callable[[Prober], Awaitable[T]], min_rollouts: int = 32, max_retries: int = 0
) -> T:
    """``work(prober)`` in simulated time, the prober's backend an in-process ``config`` engine."""
    backend = InProcessBackend(config, max_retries=max_retries)
    plugins = make_plugins()

    async def main() -> T:
        loop = asyncio.get_running_loop()
        with tempfile.TemporaryDirectory() as scratch:
            settings = CollectSettings(TASKS, Path(scratch) / "unused.jsonl", verify=VerifySettings("exact-match"))
            prober = Prober(
                TASKS,
                backend,
                lambda: plugins.verifier("exact-match", {}),
                settings,
                sample_size=200,
                min_rollouts=min_rollouts,
                server_metrics=lambda: float(len(backend.service.engine.waiting)),
                clock=loop.time,
            )
            return await work(prober)

    return run_in_simulated_time(main())


def tune(config: SimConfig, method: str = "sweep", **settings: Any) -> TuneResult:
    search = adaptive_search if method == "adaptive" else doubling_sweep
    return with_simulated_prober(config, lambda prober: search(prober, SweepSettings(**settings)))


def diagnosis(config: SimConfig, low: int, high: int) -> Diagnosis:
    async def work(prober: Prober) -> Diagnosis:
        low_probe = await prober.probe(low, SemaphoreStrategy(low))
        return diagnose(low_probe, await prober.probe(high, SemaphoreStrategy(high)))

    return with_simulated_prober(config, work)


@pytest.mark.parametrize("method", ["sweep", "adaptive"])
def test_knee_lands_near_the_saturation_point(method: str) -> None:
    assert describe(KNEE16).saturation_concurrency == 16
    result = tune(KNEE16, method, start=2)
    assert result.knee.parallelism == pytest.approx(16, rel=0.15)
    assert result.recommended == int(0.8 * result.knee.parallelism)
    assert result.knee.low <= result.knee.parallelism <= result.knee.high


def test_tuning_repeats_exactly() -> None:
    first, again = (tune(KNEE16, start=4, refine=False) for _ in range(2))
    assert [p.batch_rates for p in first.probes] == [p.batch_rates for p in again.probes]


def test_sweep_stops_on_a_plateau() -> None:
    result = tune(KNEE16, start=4, refine=False)
    assert "plateaued at 32" in result.stop_reason
    assert [p.parallelism for p in result.probes] == [4, 8, 16, 32]
    assert all(p.error_rate == 0 for p in result.probes)


def test_sweep_stops_when_throughput_degrades() -> None:
    degrading = KNEE16.replace(collapse_threshold=4, collapse_slope=4.0)
    result = tune(degrading, start=8, refine=False)
    assert "degraded at 32" in result.stop_reason


def test_sweep_stops_when_errors_appear() -> None:
    erroring = KNEE16.replace(max_waiting=8)  # a 429 beyond 16 running + 8 waiting
    result = tune(erroring, start=8, refine=False)
    assert "errors appeared at 32" in result.stop_reason and "rate_limited" in result.stop_reason
    assert [p.error_rate for p in result.probes[:2]] == [0.0, 0.0]
    assert result.knee.parallelism <= 24


def test_stability_validation_at_the_recommendation() -> None:
    async def work(prober: Prober) -> tuple[TuneResult, StabilityResult]:
        tuned = await doubling_sweep(prober, SweepSettings(start=4, refine=False))
        return tuned, await validate_stability(prober, tuned.recommended, 150, tuned.expected_rollouts_per_s)

    tuned, stability = with_simulated_prober(KNEE16, work)
    assert stability.parallelism == tuned.recommended and stability.rollouts == 150
    assert stability.passed, stability.reasons
    assert stability.rollouts_per_s == pytest.approx(stability.expected_rollouts_per_s, rel=0.1)


def test_stability_validation_catches_a_server_that_degrades() -> None:
    async def work(prober: Prober) -> StabilityResult:
        return await validate_stability(prober, 32, 150, expected=30.0)

    stability = with_simulated_prober(KNEE16.replace(collapse_threshold=4, collapse_slope=4.0), work)
    assert not stability.passed and "below 90% of the expected" in stability.reasons[0]


def test_low_parallelism_against_a_large_server_is_parallelism() -> None:
    found = diagnosis(KNEE16.replace(max_num_seqs=256), low=2, high=8)
    assert found.verdict == "parallelism"
    assert found.gain >= 2.0


def test_a_saturated_server_is_the_model_server() -> None:
    found = diagnosis(KNEE16.replace(max_num_seqs=4), low=8, high=32)
    assert found.verdict == "model server"
    assert found.gain == pytest.approx(1.0, abs=0.1)
    assert found.high.server_waiting_max is not None and found.high.server_waiting_max >= 20
