"""The configuration of a training-step benchmark, checked once so every later piece can trust it.

No torch here: the command line builds and validates a configuration before torch is imported.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gymbench.errors import GymbenchError
from gymbench.train.lengths import LENGTH_DISTRIBUTIONS, Distribution, LengthSource, read_rollout_lengths

PRECISIONS = ("fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda")
STEPS = ("lm", "rl")
TRIAL_ALLOCATORS = ("default", "fixed")


@dataclass(frozen=True)
class TrainConfig:
    model: str = "transformer"
    model_config: Mapping[str, Any] = field(default_factory=dict)
    batch: int = 8
    """The global batch: samples per optimizer step, whatever the accumulation."""
    seq_len: int = 128
    """Tokens per sample; with variable lengths, the longest a sequence may be (and a packed row's size)."""
    precision: str = "fp32"
    checkpointing: str = "off"
    """``off``, ``on`` or ``every-K``."""
    checkpoint_ratio: float | None = None
    """NeMo RL's share of blocks to checkpoint; when set it replaces ``checkpointing``."""
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
    step: str = "lm"
    """``lm``: next-token loss; ``rl``: NeMo RL's GRPO policy step (logprobs, clipped PG + KL, update)."""
    lengths: str = "fixed"
    """Sequence lengths: ``fixed`` (all ``seq_len``), ``uniform`` or ``skewed``; ignored with ``rollouts``."""
    min_len: int = 8
    prompt_share: float = 0.25
    """Share of each drawn sequence that is prompt (no loss in the RL step)."""
    rollouts: str | None = None
    """A rollouts JSONL whose token counts replace the drawn lengths."""
    packing: bool = False
    group_size: int = 4
    """RL: generations per prompt, whose rewards make one GRPO group (NeMo RL's num_generations_per_prompt)."""
    kl_penalty: float = 0.01
    """RL: NeMo RL's reference_policy_kl_penalty."""
    ratio_clip: float = 0.2
    """RL: NeMo RL's ratio_clip_min and ratio_clip_max."""
    max_grad_norm: float = 1.0

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
        self._check_sequences()

    def _check_sequences(self) -> None:
        if self.uses_sequences and self.seq_len < 2:
            raise GymbenchError(f"seq_len must be at least 2 for sequence steps, got {self.seq_len}")
        if self.step not in STEPS:
            raise GymbenchError(f"unknown step {self.step!r}; choose lm (next-token loss) or rl (GRPO policy step)")
        if self.lengths not in LENGTH_DISTRIBUTIONS:
            raise GymbenchError(f"unknown lengths {self.lengths!r}; choose one of {', '.join(LENGTH_DISTRIBUTIONS)}")
        if self.rollouts is not None and self.lengths != "fixed":
            raise GymbenchError(
                f"lengths {self.lengths!r} and a rollouts file both given; the file's token counts are the lengths"
            )
        if self.lengths != "fixed" and not 2 <= self.min_len <= self.seq_len:
            raise GymbenchError(f"min_len must lie in [2, seq_len={self.seq_len}], got {self.min_len}")
        if not 0 <= self.prompt_share < 1:
            raise GymbenchError(f"prompt_share must lie in [0, 1), got {self.prompt_share}")
        if self.step == "rl" and (self.group_size < 1 or self.batch % self.group_size):
            raise GymbenchError(
                f"batch {self.batch} is not a whole number of GRPO groups of {self.group_size}; "
                "make batch a multiple of group_size"
            )
        if self.kl_penalty < 0 or not 0 < self.ratio_clip < 1 or self.max_grad_norm <= 0:
            raise GymbenchError(
                f"need kl_penalty >= 0, 0 < ratio_clip < 1 and max_grad_norm > 0; got {self.kl_penalty}, "
                f"{self.ratio_clip} and {self.max_grad_norm}"
            )
        if self.checkpoint_ratio is not None and not 0 <= self.checkpoint_ratio <= 1:
            raise GymbenchError(f"checkpoint_ratio must lie in [0, 1], got {self.checkpoint_ratio}")

    @property
    def uses_sequences(self) -> bool:
        """Steps on sequences laid out by :mod:`gymbench.train.packing` rather than ``make_batch``."""
        return self.step == "rl" or self.lengths != "fixed" or self.rollouts is not None or self.packing

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


def length_source(config: TrainConfig) -> LengthSource:
    """Where a step's sequence lengths come from (reads the rollouts file, if one is named)."""
    if config.rollouts is not None:
        return read_rollout_lengths(config.rollouts, config.seq_len)
    return Distribution(config.lengths, config.seq_len, config.min_len, config.prompt_share)


def worst_case(config: TrainConfig) -> TrainConfig:
    """Every sequence at the longest length the run may meet: what a batch-size search must fit."""
    if not config.uses_sequences:
        return config
    longest = length_source(config).longest
    return replace(config, lengths="fixed", rollouts=None, seq_len=longest)


def trial_config(config: TrainConfig, batch: int) -> TrainConfig:
    """One OOM trial: ``batch`` samples in one micro-batch; GRPO groups of 1 so any size is allowed
    (the group size changes what the advantages are, not what the step holds in memory)."""
    return replace(config, batch=batch, accumulation=1, group_size=1)


def scale_learning_rate(base_lr: float, batch_size: int, base_batch_size: int) -> float:
    """NeMo RL's square-root rule: the gradient noise scale grows with √batch, so the LR does too."""
    return base_lr * math.sqrt(batch_size / base_batch_size)


EVERY_K = re.compile(r"^every-(\d+)$")


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
