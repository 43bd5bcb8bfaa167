"""GPU utilisation and memory sampled by nvidia-ml-py in a background thread during a run.

NVML reports what the driver sees (other processes included), which complements the allocator's
own figures. Without a GPU or without NVML the monitor reports itself unavailable with the reason:
a benchmark on a laptop must not crash because there is nothing to sample.

torch's ``cuda:N`` is not NVML's device N: torch counts only the devices ``CUDA_VISIBLE_DEVICES``
shows, in CUDA's order (fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``), while NVML counts
every device in PCI order. So the monitor opens the device by the identity torch reports for
``cuda:N``: its UUID, else its PCI bus id, else the ``CUDA_VISIBLE_DEVICES`` entry (a UUID or an
index), and only as a last resort index N, saying so in its reason.
"""

from __future__ import annotations

import os
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


@dataclass(frozen=True)
class DeviceIdentity:
    """How torch names ``cuda:index``, for finding the same device in NVML."""

    index: int
    uuid: str | None = None
    """NVML's form, ``GPU-xxxxxxxx-...`` (or ``MIG-...``)."""
    pci_bus_id: str | None = None
    """NVML's form, ``00000000:3B:00.0``."""
    visible: str | None = None
    """The ``CUDA_VISIBLE_DEVICES`` entry of this index, when the variable is set."""


def torch_device_identity(index: int, environ: dict[str, str] | None = None) -> DeviceIdentity:
    """``cuda:index`` as torch's device properties describe it (CUDA must be available)."""
    import torch

    properties = torch.cuda.get_device_properties(index)
    uuid = getattr(properties, "uuid", None)
    uuid_text = None if uuid is None else str(uuid)
    if uuid_text and not uuid_text.startswith(("GPU-", "MIG-")):
        uuid_text = f"GPU-{uuid_text}"
    bus = getattr(properties, "pci_bus_id", None)
    device = getattr(properties, "pci_device_id", None)
    domain = getattr(properties, "pci_domain_id", 0) or 0
    pci = f"{domain:08X}:{bus:02X}:{device:02X}.0" if bus is not None and device is not None else None
    return DeviceIdentity(index, uuid_text, pci, visible_entry(index, os.environ if environ is None else environ))


def visible_entry(index: int, environ: Any) -> str | None:
    """The ``CUDA_VISIBLE_DEVICES`` entry torch calls ``cuda:index``; ``None`` when unset or too short."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    entries = [entry.strip() for entry in value.split(",") if entry.strip()]
    return entries[index] if index < len(entries) else None


class GpuMonitor:
    """``with GpuMonitor(index) as monitor: ...``, then read ``monitor.report``. Given a
    :class:`DeviceIdentity` (:meth:`for_device` takes it from torch), it samples that device."""

    def __init__(self, index: int | DeviceIdentity = 0, interval_s: float = 0.1) -> None:
        self.identity = index if isinstance(index, DeviceIdentity) else DeviceIdentity(index)
        self.index = self.identity.index
        self.interval_s = interval_s
        self.report = GpuReport(available=False)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: Any = None

    @classmethod
    def for_device(cls, device: Any, interval_s: float = 0.1) -> GpuMonitor:
        """The monitor of torch's ``device`` (a ``cuda`` one; for a CPU run, NVML's GPU 0 as before)."""
        if getattr(device, "type", None) != "cuda":
            return cls(0, interval_s)
        import torch

        index = device.index if device.index is not None else torch.cuda.current_device()
        return cls(torch_device_identity(index), interval_s)

    def __enter__(self) -> GpuMonitor:
        self._handle, reason = _open_device(self.identity)
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


def _open_device(identity: DeviceIdentity) -> tuple[Any, str]:
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses, or OSError when libnvidia-ml is missing
        return None, f"NVML could not start ({exc or type(exc).__name__}): no NVIDIA GPU or driver here"
    tried = []
    for how, key, opener in _ways_to_open(identity, pynvml):
        try:
            return opener(key), f"sampling cuda:{identity.index} via NVML, found by {how} {key}"
        except Exception as exc:
            tried.append(f"{how} {key}: {exc}")
    _shutdown()
    return None, f"NVML has no device for cuda:{identity.index} ({'; '.join(tried)})"


def _ways_to_open(identity: DeviceIdentity, pynvml: Any) -> list[tuple[str, Any, Any]]:
    """The identities to try, surest first; index N only when torch said nothing else."""
    ways: list[tuple[str, Any, Any]] = []
    if identity.uuid:
        ways.append(("UUID", identity.uuid, pynvml.nvmlDeviceGetHandleByUUID))
    if identity.pci_bus_id:
        ways.append(("PCI bus id", identity.pci_bus_id, pynvml.nvmlDeviceGetHandleByPciBusId))
    visible = identity.visible
    if visible and visible.startswith(("GPU-", "MIG-")):
        ways.append(("CUDA_VISIBLE_DEVICES UUID", visible, pynvml.nvmlDeviceGetHandleByUUID))
    elif visible and visible.isdigit():
        ways.append(("CUDA_VISIBLE_DEVICES index", int(visible), pynvml.nvmlDeviceGetHandleByIndex))
    if not ways:
        ways.append(("index", identity.index, pynvml.nvmlDeviceGetHandleByIndex))
    return ways


def _shutdown() -> None:
    try:
        import pynvml

        pynvml.nvmlShutdown()
    except Exception:
        pass
