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
from gymbench.settings import doc, with_defaults
from gymbench.train.lengths import LENGTH_DISTRIBUTIONS, Distribution, LengthSource, read_rollout_lengths

PRECISIONS = ("fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda")
STEPS = ("lm", "rl")
CUDA_TIMINGS = ("sync", "events")
GRPO_VARIANTS = ("plain", "nemo-rl")
"""plain: group mean, population std, unclamped KL (gymbench's first step, kept as the default so
existing baselines measure the same step); nemo-rl: NeMo RL's ``grpo_math_1B.yaml`` defaults."""
TRIAL_ALLOCATORS = ("default", "fixed")
DEFAULT_MARGIN = 0.08
"""The share of the memory budget the chosen batch leaves unused in every verification run (and the
share of the largest fit it starts below): a process's footprint varies by a few percent from one
fresh process to the next (glibc's dynamic malloc thresholds, thread arenas), and 5% of the batch
left 0.6-2% of the budget on unseen shapes. Hold rates measured in docs/training.md."""


@dataclass
class StepSettings:
    """What defines a training step and how it is measured: ``gymbench train``'s settings
    (:class:`~gymbench.train.settings.TrainSettings`) and the step's own configuration
    (:class:`TrainConfig`) both are these, declared once here."""

    model: str = field(default="transformer", metadata=doc("a registered model (`gymbench plugins` lists them)"))
    batch: int = field(default=8, metadata=doc("global batch: samples per optimizer step"))
    seq_len: int = field(
        default=128, metadata=doc("tokens per sample (transformer); with variable lengths the longest")
    )
    precision: str = field(default="fp32", metadata=doc("fp32, bf16 or fp16"))
    checkpointing: str = field(default="off", metadata=doc("off, on, or every-K (checkpoint every K-th block)"))
    checkpoint_ratio: float | None = field(
        default=None,
        metadata=doc("share of blocks to checkpoint, 0.5 = every other (NeMo RL's is on/off; this is gymbench's)"),
    )
    accumulation: int = field(default=1, metadata=doc("micro-batches per step; the global batch stays"))
    steps: int = field(default=10, metadata=doc("measured steps", run_neutral=True))
    warmup: int = field(default=2, metadata=doc("unmeasured steps first", run_neutral=True))
    device: str = field(default="auto", metadata=doc("auto, cpu, cuda or cuda:N"))
    cuda_timing: str = field(
        default="sync",
        metadata=doc(
            "CUDA phase timing: sync (synchronise at every phase: wall times that add up to the step) or "
            "events (CUDA events, one synchronise per step, as a trainer runs: the step is not inflated)"
        ),
    )
    lr: float = field(default=1e-4, metadata=doc("AdamW learning rate at base_batch", run_neutral=True))
    base_batch: int | None = field(
        default=None, metadata=doc("the batch lr was tuned for; the √ rule rescales it", run_neutral=True)
    )
    seed: int = field(default=0, metadata=doc("random seed"))
    threads: int | None = field(default=None, metadata=doc("torch CPU threads (default: torch's choice)"))
    step: str = field(
        default="lm",
        metadata=doc("lm: next-token loss; rl: NeMo RL's GRPO policy step (logprobs, clipped PG + KL, update)"),
    )
    lengths: str = field(
        default="fixed",
        metadata=doc("fixed (all seq_len), uniform or skewed (log-normal, median seq_len/4) lengths"),
    )
    min_len: int = field(default=8, metadata=doc("shortest drawn sequence (uniform, skewed)"))
    prompt_share: float = field(default=0.25, metadata=doc("share of a drawn sequence that is prompt (no RL loss)"))
    rollouts: str | None = field(
        default=None,
        metadata=doc("a rollouts JSONL (gymbench collect or NeMo Gym) whose token counts are the lengths", path=True),
    )
    packing: bool = field(
        default=False, metadata=doc("pack sequences into rows (block-diagonal attention) instead of padding")
    )
    group_size: int = field(
        default=4, metadata=doc("RL: generations per prompt (one GRPO group; NeMo RL's num_generations_per_prompt)")
    )
    kl_penalty: float = field(default=0.01, metadata=doc("RL: NeMo RL's reference_policy_kl_penalty"))
    ratio_clip: float = field(default=0.2, metadata=doc("RL: NeMo RL's ratio_clip_min/max"))
    max_grad_norm: float = field(default=1.0, metadata=doc("RL: gradient-norm clip"))
    grpo: str = field(
        default="plain",
        metadata=doc(
            "RL: plain (group mean, population std, unclamped KL) or nemo-rl (NeMo RL's defaults: "
            "leave-one-out baseline, Bessel-corrected std, KL log-ratio clamped to ±20 and KL to ≤ 10)"
        ),
    )
    updates_per_batch: int = field(
        default=1,
        metadata=doc(
            "RL: optimizer updates per batch of rollouts (each on batch samples); above 1 the policy lags "
            "the one that generated, so the ratio leaves 1 and the clip acts"
        ),
    )
    logprob_batch: int | None = field(
        default=None,
        metadata=doc("RL: samples per logprob forward (NeMo RL's logprob_batch_size; unset: the micro-batch)"),
    )


@dataclass
class TrainConfig(StepSettings):
    """A training step's configuration, checked once so every later piece can trust it. ``batch`` is
    the global batch (samples per optimizer step, whatever the accumulation); with variable lengths
    ``seq_len`` is the longest a sequence may be (and a packed row's size); ``checkpoint_ratio``, when
    set, replaces ``checkpointing``; ``lr`` is the rate at ``base_batch`` samples per step (the
    square-root rule rescales it for another batch)."""

    model_config: Mapping[str, Any] = field(default_factory=dict)

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
        if self.cuda_timing not in CUDA_TIMINGS:
            raise GymbenchError(f"unknown cuda_timing {self.cuda_timing!r}; choose one of {', '.join(CUDA_TIMINGS)}")
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
        self._check_grpo()

    def _check_grpo(self) -> None:
        if self.grpo not in GRPO_VARIANTS:
            raise GymbenchError(f"unknown grpo {self.grpo!r}; choose one of {', '.join(GRPO_VARIANTS)}")
        if self.updates_per_batch < 1:
            raise GymbenchError(f"updates_per_batch must be at least 1, got {self.updates_per_batch}")
        if self.logprob_batch is not None and self.logprob_batch < 1:
            raise GymbenchError(f"logprob_batch must be at least 1, got {self.logprob_batch}")

    @property
    def uses_sequences(self) -> bool:
        """Steps on sequences laid out by :mod:`gymbench.train.packing` rather than ``make_batch``."""
        return self.step == "rl" or self.lengths != "fixed" or self.rollouts is not None or self.packing

    @property
    def micro_batch(self) -> int:
        return self.batch // self.accumulation

    @property
    def rollouts_per_step(self) -> int:
        """Samples one step draws: one batch per update (the RL step's batch of rollouts)."""
        return self.batch * (self.updates_per_batch if self.step == "rl" else 1)

    @property
    def effective_lr(self) -> float:
        return scale_learning_rate(self.lr, self.batch, self.base_batch or self.batch)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["model_config"] = dict(self.model_config)
        return data


TrainConfig = with_defaults(TrainConfig, device="cpu")  # type: ignore[misc]
"""Built directly (a test, the pytest API), a step runs on the CPU unless told otherwise; ``gymbench
train``'s default is ``auto``."""


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
    """``off`` → 0, ``on`` → 1 (NeMo RL's ``activation_checkpointing: true``), ``every-k`` → k."""
    if mode == "off":
        return 0
    if mode == "on":
        return 1
    match = EVERY_K.match(mode)
    if match is None or int(match.group(1)) < 1:
        raise GymbenchError(f"checkpointing {mode!r}: use 'off', 'on' or 'every-K' with K >= 1 (e.g. every-2)")
    return int(match.group(1))
