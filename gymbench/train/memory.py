"""Peak memory of a training step, and the check that memory does not grow from step to step.

On CUDA the caching allocator counts every byte: reset the peak, step, read
``max_memory_allocated`` (tensors) and ``max_memory_reserved`` (what the allocator holds). On the
CPU nothing counts tensors, so the figure is the process's resident-set high-water mark
(``VmHWM``), labelled "process RSS". glibc's malloc raises its mmap threshold dynamically after
the first large free, after which freed tensors stay in the heap and the high-water mark no
longer tracks live tensors; :data:`SHARP_MALLOC_ENV` fixes the thresholds, and because glibc reads
them at start-up the CPU pass runs in a fresh subprocess (see :mod:`gymbench.train.worker`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gymbench.train.session import TrainSession
from gymbench.types import JSONObject

SHARP_MALLOC_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(64 * 1024),
    "MALLOC_TRIM_THRESHOLD_": str(128 * 1024),
}
CPU_LABEL = "process RSS"
CUDA_LABEL = "cuda allocator"


def proc_status_bytes(field: str) -> int:
    """A ``Vm*`` line of ``/proc/self/status`` (kB there) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def reset_peak_rss() -> bool:
    """Reset ``VmHWM`` (Linux 4.0+); without it the peak includes start-up, so callers report that."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class MemoryReport:
    label: str
    """``process RSS`` or ``cuda allocator``: what the figures count."""
    baseline_bytes: int
    """Held before the step: weights, optimizer state (and on the CPU, the interpreter and torch)."""
    peak_bytes: int
    step_peak_bytes: int
    """Peak minus baseline: activations, gradients and temporaries of one step."""
    activation_bytes: int
    """Growth from the start of the first forward to its end: the tensors saved for backward."""
    reserved_peak_bytes: int | None = None
    note: str = ""

    def to_dict(self) -> JSONObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryReport:
        """The report as :meth:`to_dict` wrote it (the memory job's answer from its subprocess)."""
        return cls(**data)


class MemoryProbe:
    """A phase observer that reads memory around the first forward that keeps activations."""

    def __init__(self, read: Any) -> None:
        self.read = read
        self.at_start: int | None = None
        self.after_forward: int | None = None

    def start(self) -> None:
        self.at_start = self.after_forward = None

    def phase(self, name: str) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    def mark(self, event: str) -> None:
        if event == "forward_start" and self.at_start is None:
            self.at_start = self.read()
        elif event == "forward_end" and self.after_forward is None:
            self.after_forward = self.read()

    @property
    def activation_bytes(self) -> int:
        """What the forward added; never below zero (process RSS can fall during a forward that
        frees pages, which is no negative activation)."""
        if self.at_start is None or self.after_forward is None:
            return 0
        return max(0, self.after_forward - self.at_start)


def measure_step_memory(session: TrainSession, warmup: int = 1) -> MemoryReport:
    """Warm up (optimizer state exists from then on), then measure one step."""
    for _ in range(warmup):
        session.step()
    if session.device.type == "cuda":
        return _measure_cuda(session)
    return _measure_cpu(session)


def _measure_cuda(session: TrainSession) -> MemoryReport:
    device = session.device
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    probe = MemoryProbe(lambda: torch.cuda.memory_allocated(device))
    baseline = torch.cuda.memory_allocated(device)
    session.step(probe)
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    return MemoryReport(
        label=CUDA_LABEL,
        baseline_bytes=baseline,
        peak_bytes=peak,
        step_peak_bytes=peak - baseline,
        activation_bytes=probe.activation_bytes,
        reserved_peak_bytes=torch.cuda.max_memory_reserved(device),
    )


def _measure_cpu(session: TrainSession) -> MemoryReport:
    reset = reset_peak_rss()
    baseline = proc_status_bytes("VmRSS")
    probe = MemoryProbe(lambda: proc_status_bytes("VmRSS"))
    session.step(probe)
    peak = proc_status_bytes("VmHWM")
    return MemoryReport(
        label=CPU_LABEL,
        baseline_bytes=baseline,
        peak_bytes=peak,
        step_peak_bytes=peak - baseline,
        activation_bytes=probe.activation_bytes,
        note="" if reset else "VmHWM could not be reset: the peak may include start-up",
    )


@dataclass(frozen=True)
class LeakCheck:
    """Growth per step against a bound per step, so the verdict does not depend on ``--steps``."""

    growth_per_step_bytes: float
    """Robust (Theil–Sen) slope of memory after each measured step."""
    bound_per_step_bytes: float
    source: str
    steps: int = 0

    @property
    def leaked(self) -> bool:
        return self.growth_per_step_bytes > self.bound_per_step_bytes

    def to_dict(self) -> JSONObject:
        return {**asdict(self), "leaked": self.leaked}


def check_leak(samples: list[int], bound_per_step_bytes: float, source: str) -> LeakCheck:
    """Steady training holds steady memory; a trend across steps means something keeps tensors."""
    if len(samples) < 3:
        return LeakCheck(0.0, bound_per_step_bytes, f"{source} (too few steps to judge: {len(samples)})", len(samples))
    from scipy import stats  # a second of import time that the memory subprocess does not need

    slope, *_ = stats.theilslopes(np.asarray(samples, dtype=float))
    return LeakCheck(float(slope), bound_per_step_bytes, source, len(samples))
