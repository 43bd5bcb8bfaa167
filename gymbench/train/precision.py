"""Numeric precision of a training step: fp32, bf16 autocast, or fp16 autocast with loss scaling.

fp16 needs dynamic loss scaling because small gradients underflow to zero in half precision; the
scaler skips a step whenever it finds inf/NaN gradients and halves the scale. Those skips are
training steps that did nothing, so the runner counts them instead of hiding them in the median.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from gymbench.errors import GymbenchError
from gymbench.fingerprint import cpu_flags
from gymbench.train.config import PRECISIONS, TrainConfig

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
NATIVE_FP16_FLAGS = ("avx512_fp16", "amx_fp16")
"""CPU instructions that compute in fp16 natively; without them torch converts, and fp16 crawls."""
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""The same for bf16 (x86; arm64 calls it ``bf16``)."""
NATIVE_FLAGS = {"fp16": NATIVE_FP16_FLAGS, "bf16": (*NATIVE_BF16_FLAGS, "bf16")}
FP16_SLOWDOWN_MEASURED = (
    "on gymbench's development machine (AMD EPYC, avx512_bf16 but no avx512_fp16 or amx_fp16) an fp16 "
    "step of the transformer (d_model 128, batch 8 x 128 tokens, one thread) took about 10x as long as fp32"
)


BF16_SLOWDOWN_MEASURED = (
    "a user's CPU without avx512_bf16 ran a bf16 step about 9x as long as fp32 (gymbench issue #29)"
)
SLOWDOWN_MEASURED = {"fp16": FP16_SLOWDOWN_MEASURED, "bf16": BF16_SLOWDOWN_MEASURED}


def native_fp16(flags: set[str]) -> str | None:
    """The first native fp16 instruction set the CPU has, or ``None``."""
    return native_kernels("fp16", flags)


def native_kernels(precision: str, flags: set[str]) -> str | None:
    """The first instruction set the CPU has that computes in ``precision`` natively, or ``None``."""
    return next((flag for flag in NATIVE_FLAGS.get(precision, ()) if flag in flags), None)


def slow_on_this_cpu(precision: str, flags: set[str] | None = None) -> str:
    """The warning for a reduced precision without native CPU kernels; empty when it has them."""
    if precision not in NATIVE_FLAGS or native_kernels(precision, cpu_flags() if flags is None else flags):
        return ""
    names = NATIVE_FP16_FLAGS if precision == "fp16" else NATIVE_BF16_FLAGS
    return (
        f"{precision} on this CPU (no {' or '.join(names)}) runs through conversion kernels, much slower than "
        f"fp32: {SLOWDOWN_MEASURED[precision]}"
    )


def cpu_precision_note(config: TrainConfig, device: torch.device, flags: set[str] | None = None) -> str:
    """What an fp16 or bf16 figure measured on this CPU means; empty for fp32 or a GPU."""
    precision = config.precision
    if precision not in NATIVE_FLAGS or device.type != "cpu":
        return ""
    native = native_kernels(precision, cpu_flags() if flags is None else flags)
    if native:
        return (
            f"this CPU has {native}, so {precision} runs native kernels here; the speed still says nothing "
            f"about {precision} on a GPU"
        )
    names = NATIVE_FP16_FLAGS if precision == "fp16" else NATIVE_BF16_FLAGS
    return (
        f"this CPU has neither {' nor '.join(names)}: {precision} runs through conversion kernels, "
        f"much slower than fp32 ({SLOWDOWN_MEASURED[precision]}); the speed says nothing about {precision} on a GPU"
    )


def check_precision(name: str) -> str:
    if name not in PRECISIONS:
        raise GymbenchError(f"unknown precision {name!r}; choose one of {', '.join(PRECISIONS)}")
    return name


@dataclass
class LossScaling:
    """What dynamic loss scaling did over the measured steps."""

    enabled: bool
    scales: list[float] = field(default_factory=list)
    skipped_steps: int = 0


class Precision:
    """Autocast context and (for fp16) a ``GradScaler`` wrapped around backward and step."""

    def __init__(self, name: str, device: torch.device) -> None:
        self.name = check_precision(name)
        self.device = device
        self.scaler = torch.amp.GradScaler(device.type) if name == "fp16" else None
        self.scaling = LossScaling(enabled=self.scaler is not None)

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        dtype = AUTOCAST_DTYPES.get(self.name)
        if dtype is None:
            yield
            return
        with torch.autocast(self.device.type, dtype=dtype):
            yield

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def clip_gradients(self, optimizer: torch.optim.Optimizer, max_norm: float) -> torch.Tensor:
        """Clip the total gradient norm (unscaled first under fp16, so the bound means what it says)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)
        parameters = [p for group in optimizer.param_groups for p in group["params"]]
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """Step, and with a scaler record the scale and whether the step was skipped."""
        if self.scaler is None:
            optimizer.step()
            return
        before = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        after = self.scaler.get_scale()
        self.scaling.scales.append(after)
        if after < before:  # the scaler only lowers the scale when it found inf/NaN and skipped
            self.scaling.skipped_steps += 1
