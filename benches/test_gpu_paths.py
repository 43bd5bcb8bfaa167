"""The CUDA paths on a real GPU: run where torch sees one, skipped with the reason elsewhere.

tests/train/test_gpu_paths.py checks the same logic on a CPU through fakes of NVML, torch.cuda and
CUDA events; this runs it for real: the monitor finds the device torch uses (by UUID or PCI bus
id), the peak is known for this exact part or said to be unknown, and event timing runs with one
synchronise per step (the step medians of both clocks are printed, not asserted: a figure, not a
test of the machine's speed).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from gymbench.train.config import TrainConfig
from gymbench.train.plugin import build_transformer
from gymbench.train.session import TrainSession

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA GPU visible to torch here: the CUDA paths are checked by fakes"
)
CONFIG = TrainConfig(
    model="transformer",
    model_config={"size": "small"},
    device="cuda",
    precision="bf16",
    batch=8,
    accumulation=4,
    seq_len=256,
    steps=10,
    warmup=2,
)


def test_the_monitor_samples_the_device_torch_uses() -> None:
    from gymbench.train.gpu_monitor import GpuMonitor

    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    with GpuMonitor.for_device(torch.device("cuda", 0), interval_s=0.01) as monitor:
        x = torch.randn(4096, 4096, device="cuda")
        for _ in range(50):
            x = x @ x.T / 4096
        torch.cuda.synchronize()
    assert monitor.report.available, monitor.report.reason
    assert "found by UUID" in monitor.report.reason or "PCI bus id" in monitor.report.reason
    print(f"\n{monitor.report.reason} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')})")


def test_the_peak_is_this_parts_or_unknown() -> None:
    from gymbench.train.flops import device_peak_flops

    session = TrainSession(build_transformer, CONFIG)
    peak, source = device_peak_flops(session, None)
    print(f"\n{torch.cuda.get_device_name(0)}: {peak} ({source})")
    assert (peak is not None and "data sheet" in source) or "pass --peak-tflops" in source


@pytest.mark.parametrize("step", ["lm", "rl"])
def test_event_timing_does_not_inflate_the_step(step: str) -> None:
    from dataclasses import replace

    from gymbench.train.runner import EventClock, run_steps, step_clock

    medians: dict[str, list[float]] = {"sync": [], "events": []}
    for timing in ("sync", "events", "sync", "events"):  # alternated: the GPU warms up over the first
        config = replace(CONFIG, step=step, cuda_timing=timing, lengths="skewed" if step == "rl" else "fixed")
        session = TrainSession(build_transformer, config)
        timings = run_steps(session)
        assert len(timings.step_s) == config.steps and all(min(s) > 0 for s in timings.phases_s.values())
        medians[timing].append(float(np.median(timings.step_s)))
    assert isinstance(step_clock(session), EventClock)
    sync, events = (np.median(medians[name]) * 1e3 for name in ("sync", "events"))
    print(f"\n{torch.cuda.get_device_name(0)} {step}: step median sync {sync:.2f} ms, events {events:.2f} ms")
