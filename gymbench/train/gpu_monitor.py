"""GPU utilisation and memory sampled by nvidia-ml-py in a background thread during a run.

NVML reports what the driver sees (other processes included), which complements the allocator's
own figures. Without a GPU or without NVML the monitor reports itself unavailable with the reason:
a benchmark on a laptop must not crash because there is nothing to sample.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import numpy as np

from gymbench.types import JSONObject


@dataclass
class GpuReport:
    available: bool
    reason: str = ""
    utilisation_pct: list[float] = field(default_factory=list)
    memory_used_bytes: list[int] = field(default_factory=list)

    def to_dict(self) -> JSONObject:
        summary: dict[str, Any] = {"available": self.available, "reason": self.reason}
        if self.utilisation_pct:
            summary["utilisation_median_pct"] = float(np.median(self.utilisation_pct))
            summary["memory_used_max_bytes"] = int(max(self.memory_used_bytes))
            summary["samples"] = len(self.utilisation_pct)
        return summary

    def text(self) -> str:
        """One line for the summary: what was sampled, or why nothing was."""
        if not self.utilisation_pct:
            return f"not sampled: {self.reason or 'no samples during the run'}"
        used = max(self.memory_used_bytes) / (1 << 20)
        return (
            f"utilisation median {np.median(self.utilisation_pct):.0f}%, memory used max {used:.0f} MiB "
            f"(NVML, all processes; {len(self.utilisation_pct)} samples)"
        )


class GpuMonitor:
    """``with GpuMonitor(index) as monitor: ...``, then read ``monitor.report``."""

    def __init__(self, index: int = 0, interval_s: float = 0.1) -> None:
        self.index = index
        self.interval_s = interval_s
        self.report = GpuReport(available=False)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: Any = None

    def __enter__(self) -> GpuMonitor:
        self._handle, reason = _open_device(self.index)
        self.report = GpuReport(available=self._handle is not None, reason=reason)
        if self._handle is not None:
            self._thread = threading.Thread(target=self._sample, name="gymbench-gpu-monitor", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            _shutdown()

    def _sample(self) -> None:
        import pynvml

        while not self._stop.wait(self.interval_s):
            try:
                rates = pynvml.nvmlDeviceGetUtilizationRates(self._handle)
                memory = pynvml.nvmlDeviceGetMemoryInfo(self._handle)
            except pynvml.NVMLError as exc:
                self.report.reason = f"sampling stopped: {exc}"
                return
            self.report.utilisation_pct.append(float(rates.gpu))
            self.report.memory_used_bytes.append(int(memory.used))


def _open_device(index: int) -> tuple[Any, str]:
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses, or OSError when libnvidia-ml is missing
        return None, f"NVML could not start ({exc or type(exc).__name__}): no NVIDIA GPU or driver here"
    try:
        return pynvml.nvmlDeviceGetHandleByIndex(index), f"sampling GPU {index} via NVML"
    except Exception as exc:
        _shutdown()
        return None, f"NVML has no GPU {index} ({exc})"


def _shutdown() -> None:
    try:
        import pynvml

        pynvml.nvmlShutdown()
    except Exception:
        pass
