"""The configuration of a training-step benchmark, checked once so every later piece can trust it.

No torch here: the command line builds and validates a configuration before torch is imported.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from gymbench.errors import GymbenchError

PRECISIONS = ("fp32", "bf16", "fp16")
EVERY_K = re.compile(r"^every-(\d+)$")
DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class TrainConfig:
    model: str = "transformer"
    model_config: Mapping[str, Any] = field(default_factory=dict)
    batch: int = 8
    """The global batch: samples per optimizer step, whatever the accumulation."""
    seq_len: int = 128
    precision: str = "fp32"
    checkpointing: str = "off"
    """``off``, ``on`` or ``every-K``."""
    accumulation: int = 1
    steps: int = 10
    warmup: int = 2
    device: str = "cpu"
    lr: float = 1e-4
    """The learning rate at ``base_batch`` samples per step."""
    base_batch: int | None = None
    """The batch the learning rate was tuned for; when it differs, the square-root rule rescales it."""
    seed: int = 0
    threads: int | None = None
    """torch intra-op threads; ``None`` keeps torch's default. One is steadier on a busy machine."""

    def __post_init__(self) -> None:
        for name in ("batch", "seq_len", "accumulation", "steps"):
            if getattr(self, name) < 1:
                raise GymbenchError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise GymbenchError(f"warmup must be 0 or more, got {self.warmup}")
        if self.batch % self.accumulation:
            raise GymbenchError(
                f"batch {self.batch} is not divisible by accumulation {self.accumulation}: the global "
                "batch stays fixed and is split into equal micro-batches; pick a divisor"
            )
        checkpoint_every(self.checkpointing)
        if self.precision not in PRECISIONS:
            raise GymbenchError(f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")
        if self.device not in DEVICES and not self.device.startswith("cuda:"):
            raise GymbenchError(f"unknown device {self.device!r}; choose auto, cpu, cuda or cuda:N")
        if self.threads is not None and self.threads < 1:
            raise GymbenchError(f"threads must be at least 1, got {self.threads}")
        if self.base_batch is not None and self.base_batch < 1:
            raise GymbenchError(f"base_batch must be at least 1, got {self.base_batch}")

    @property
    def micro_batch(self) -> int:
        return self.batch // self.accumulation

    @property
    def effective_lr(self) -> float:
        return scale_learning_rate(self.lr, self.batch, self.base_batch or self.batch)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["model_config"] = dict(self.model_config)
        return data


def checkpoint_every(mode: str) -> int:
    """``off`` → 0, ``on`` → 1, ``every-k`` → k. NeMo RL's ``checkpoint_ratio: 0.5`` is ``every-2``."""
    if mode == "off":
        return 0
    if mode == "on":
        return 1
    match = EVERY_K.match(mode)
    if match is None or int(match.group(1)) < 1:
        raise GymbenchError(f"checkpointing {mode!r}: use 'off', 'on' or 'every-K' with K >= 1 (e.g. every-2)")
    return int(match.group(1))


def scale_learning_rate(base_lr: float, batch_size: int, base_batch_size: int) -> float:
    """NeMo RL's square-root rule: the gradient noise scale grows with √batch, so the LR does too."""
    return base_lr * math.sqrt(batch_size / base_batch_size)
