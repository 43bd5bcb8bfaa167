from __future__ import annotations

import asyncio

import pytest

from gymbench import MeasureSettings, Recorder
from gymbench.measure import measure_settings


def test_rounds_respect_min_and_max() -> None:
    calls = []
    recorder = Recorder(MeasureSettings(warmup_rounds=2, min_rounds=4, max_rounds=4, min_time_s=10))
    recorder.measure(calls.append, 1)
    assert len(calls) == 6  # 2 warm-up + 4 measured
    assert len(recorder.metrics["time"].samples) == 4
    assert len(recorder.metrics["time_cpu"].samples) == 4


def test_iterations_divide_the_round_time() -> None:
    recorder = Recorder(MeasureSettings(warmup_rounds=0, min_rounds=3, max_rounds=3))
    count = recorder.measure(lambda: 1, iterations=50)
    assert count == 1
    assert len(recorder.metrics["time"].samples) == 3


async def test_async_measure_awaits_each_call() -> None:
    done = []

    async def work() -> int:
        await asyncio.sleep(0)
        done.append(1)
        return len(done)

    recorder = Recorder(MeasureSettings(warmup_rounds=1, min_rounds=3, max_rounds=3))
    last = await recorder.ameasure(work, iterations=2, metric="step")
    assert last == 7 and len(done) == 7
    assert set(recorder.metrics) == {"step", "step_cpu"}


def test_record_rejects_bad_direction() -> None:
    with pytest.raises(ValueError, match="direction"):
        Recorder().record("x", 1.0, "s", "up")  # type: ignore[arg-type]


def test_settings_validation() -> None:
    with pytest.raises(ValueError):
        MeasureSettings(min_rounds=0)
    assert measure_settings(quick=True, min_rounds=3, max_time_s=None).min_rounds == 3
