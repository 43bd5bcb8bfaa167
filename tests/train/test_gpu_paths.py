"""The CUDA paths' logic on a CPU, through fakes of the device APIs (NVML, torch.cuda, CUDA events).

A machine with a GPU runs the real paths in benches/test_gpu_paths.py.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch

from gymbench.train import gpu_monitor
from gymbench.train.gpu_monitor import DeviceIdentity, GpuMonitor, torch_device_identity, visible_entry

PHYSICAL = [  # NVML's view, in PCI order
    {"uuid": "GPU-aaaa", "pci": "00000000:17:00.0"},
    {"uuid": "GPU-bbbb", "pci": "00000000:65:00.0"},
    {"uuid": "GPU-cccc", "pci": "00000000:B3:00.0"},
]


class FakeNVMLError(Exception):
    pass


def fake_pynvml() -> types.ModuleType:
    module = types.ModuleType("pynvml")
    opened: list[int] = []

    def find(key: str, value: Any) -> int:
        for index, device in enumerate(PHYSICAL):
            if device[key] == value:
                opened.append(index)
                return index
        raise FakeNVMLError(f"no device with {key} {value}")

    def by_index(index: int) -> int:
        if index >= len(PHYSICAL):
            raise FakeNVMLError("invalid argument")
        opened.append(index)
        return index

    module.NVMLError = FakeNVMLError  # type: ignore[attr-defined]
    module.nvmlInit = lambda: None  # type: ignore[attr-defined]
    module.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByUUID = lambda uuid: find("uuid", uuid)  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByPciBusId = lambda pci: find("pci", pci)  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = by_index  # type: ignore[attr-defined]
    module.nvmlDeviceGetUtilizationRates = lambda handle: types.SimpleNamespace(gpu=50)  # type: ignore[attr-defined]
    module.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(used=1 << 30)  # type: ignore[attr-defined]
    module.opened = opened  # type: ignore[attr-defined]
    return module


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Any:
    module = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


def properties(uuid: str | None, bus: int | None, device: int = 0) -> types.SimpleNamespace:
    return types.SimpleNamespace(uuid=uuid, pci_bus_id=bus, pci_device_id=device, pci_domain_id=0)


def test_cuda_0_under_cuda_visible_devices_2_is_nvml_device_2(nvml: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's cuda:0 is the third physical GPU here; index 0 would sample the wrong one."""
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: properties("cccc", 0xB3))
    identity = torch_device_identity(0, {"CUDA_VISIBLE_DEVICES": "2"})
    assert identity == DeviceIdentity(0, "GPU-cccc", "00000000:B3:00.0", "2")
    with GpuMonitor(identity, interval_s=1e-3) as monitor:
        pass
    assert nvml.opened == [2]
    assert monitor.report.available and "found by UUID GPU-cccc" in monitor.report.reason


def test_the_pci_bus_id_finds_it_when_torch_gives_no_uuid(nvml: Any) -> None:
    with GpuMonitor(DeviceIdentity(1, None, "00000000:17:00.0", None)) as monitor:
        pass
    assert nvml.opened == [0] and "PCI bus id 00000000:17:00.0" in monitor.report.reason


@pytest.mark.parametrize(("visible", "expected"), [("GPU-bbbb", 1), ("2", 2)])
def test_the_visible_devices_entry_is_the_fallback(nvml: Any, visible: str, expected: int) -> None:
    with GpuMonitor(DeviceIdentity(0, None, None, visible)) as monitor:
        pass
    assert nvml.opened == [expected] and "CUDA_VISIBLE_DEVICES" in monitor.report.reason


def test_a_device_nvml_does_not_know_is_not_replaced_by_index_n(nvml: Any) -> None:
    with GpuMonitor(DeviceIdentity(0, "GPU-zzzz", None, None)) as monitor:
        pass
    assert nvml.opened == [] and not monitor.report.available
    assert "NVML has no device for cuda:0" in monitor.report.reason


def test_visible_entries() -> None:
    assert visible_entry(1, {"CUDA_VISIBLE_DEVICES": "3, 1"}) == "1"
    assert visible_entry(0, {}) is None
    assert visible_entry(2, {"CUDA_VISIBLE_DEVICES": "0"}) is None


def test_the_monitor_of_a_cuda_device_asks_torch_for_its_identity(nvml: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: properties("bbbb", 0x65))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monitor = GpuMonitor.for_device(types.SimpleNamespace(type="cuda", index=3))
    assert monitor.identity.uuid == "GPU-bbbb" and monitor.index == 3
    assert GpuMonitor.for_device(torch.device("cpu")).identity == DeviceIdentity(0)
    assert gpu_monitor.DeviceIdentity is DeviceIdentity


@pytest.mark.parametrize(
    ("name", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", 989),
        ("NVIDIA H100 PCIe", 756),
        ("NVIDIA H100 NVL", 835),
        ("NVIDIA H200", 989),
        ("NVIDIA L40S", 362),
        ("NVIDIA L40", 181),
        ("NVIDIA L4", 121),
        ("NVIDIA A10", 125),
        ("NVIDIA A100-SXM4-80GB", 312),
    ],
)
def test_peaks_match_the_exact_part(name: str, tflops: int) -> None:
    from gymbench.train.flops import known_peak

    peak, source = known_peak(name, "bf16")
    assert peak == tflops * 1e12 and "data sheet" in source


@pytest.mark.parametrize("name", ["NVIDIA A10G", "NVIDIA L4X", "NVIDIA H100 something new", "NVIDIA GeForce RTX 4090"])
def test_a_part_that_only_contains_a_known_name_has_no_peak(name: str) -> None:
    """Substrings used to give an A10G the A10's peak, and every "H100" the SXM's."""
    from gymbench.train.flops import known_peak

    peak, source = known_peak(name, "bf16")
    assert peak is None and "pass --peak-tflops" in source and repr(name) in source


def test_the_session_device_name_comes_from_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    from gymbench.train.flops import device_peak_flops

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H100 PCIe")
    session: Any = types.SimpleNamespace(device=torch.device("cuda", 0), config=types.SimpleNamespace(precision="bf16"))
    assert device_peak_flops(session, None) == (756e12, "data sheet of H100 PCIe (bf16)")
    session.config.precision = "fp32"
    assert device_peak_flops(session, None)[0] is None


class FakeEvent:
    """``torch.cuda.Event`` on a fake GPU clock that advances 2 ms at every record."""

    now = 0.0

    def record(self) -> None:
        FakeEvent.now += 2.0
        self.at = FakeEvent.now

    def elapsed_time(self, end: FakeEvent) -> float:
        return end.at - self.at


def test_event_timing_synchronises_once_per_step_not_per_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    from gymbench.train.config import TrainConfig
    from gymbench.train.plugin import build_mlp
    from gymbench.train.runner import EventClock, PhaseClock, run_steps
    from gymbench.train.session import TrainSession

    config = TrainConfig(model="mlp", model_config={"size": "tiny"}, batch=8, accumulation=2, steps=3, warmup=1)
    counts = {}
    for name, make in (("sync", PhaseClock), ("events", lambda s: EventClock(s, FakeEvent))):
        session = TrainSession(build_mlp, config)
        syncs = []
        monkeypatch.setattr(session, "synchronize", lambda syncs=syncs: syncs.append(1))
        timings = run_steps(session, clock=make(session))
        counts[name] = len(syncs) / (config.warmup + config.steps)
    assert counts["events"] == 2  # before the step, and once to read the events
    assert counts["sync"] == 1 + 2 * 7  # before the step and around each of 7 phases (3 per micro-batch, optimizer)
    assert timings.phases_s["forward"] == [2 * 0.002] * 3  # two micro-batches, each 2 ms between its events
    assert timings.phases_s["optimizer"] == [0.002] * 3


def test_events_are_used_only_on_a_cuda_device() -> None:
    from gymbench.train.config import TrainConfig
    from gymbench.train.plugin import build_mlp
    from gymbench.train.runner import EventClock, PhaseClock, step_clock
    from gymbench.train.session import TrainSession

    session = TrainSession(build_mlp, TrainConfig(model="mlp", model_config={"size": "tiny"}, cuda_timing="events"))
    assert type(step_clock(session)) is PhaseClock
    session.device = torch.device("cuda", 0)  # the choice only: nothing runs
    assert type(step_clock(session)) is EventClock
