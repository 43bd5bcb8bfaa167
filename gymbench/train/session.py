"""A model, its optimizer and precision policy on one device, and the step that trains it.

The step is written once and driven by an observer: each phase runs inside ``observer.phase(name)``
and points of interest are announced with ``observer.mark(event)``. The timing loop passes a clock,
the memory pass a memory probe, the profiler one that opens a ``record_function`` range per phase,
the FLOP counter nothing. So what is timed, measured for memory, profiled and counted for FLOPs is
the same code. Which step runs (the plain LM step, the LM step on variable-length sequences, or
NeMo RL's GRPO policy step) is chosen once, here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from gymbench.errors import GymbenchError
from gymbench.train.checkpointing import apply_checkpointing
from gymbench.train.config import TrainConfig
from gymbench.train.models import Batch, BenchModel, SequenceModel
from gymbench.train.packing import StepCount
from gymbench.train.phases import NoObserver, PhaseObserver, StepKind
from gymbench.train.precision import Precision

ModelFactory = Callable[[Mapping[str, object]], nn.Module]


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when present; asking for CUDA without one is an input error, not a crash."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise GymbenchError(f"device {name!r} asked for, but torch sees no CUDA GPU; use --device cpu or auto")
    return torch.device(name)


class TrainSession:
    """A model, its AdamW optimizer and precision policy on one device, ready to step."""

    def __init__(self, factory: ModelFactory, config: TrainConfig) -> None:
        self.config = config
        self.device = resolve_device(config.device)
        if config.threads is not None:
            torch.set_num_threads(config.threads)
        torch.manual_seed(config.seed)
        model = checked_model(factory, config)
        self.checkpointing = apply_checkpointing(model.blocks, config.checkpointing, config.checkpoint_ratio)
        self.model = model.to(self.device).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.effective_lr)
        self.precision = Precision(config.precision, self.device)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.last_count = StepCount()
        """What the latest step processed (tokens, slots, attention pairs)."""
        self.kind = step_kind(self)
        self.phases = self.kind.phases

    @property
    def checkpointed_blocks(self) -> int:
        return self.checkpointing.wrapped

    @property
    def samples_per_step(self) -> int:
        return self.config.rollouts_per_step

    def data(self) -> Batch:
        inputs, targets = self.model.make_batch(self.config.micro_batch, self.config.seq_len, self.generator)
        return inputs.to(self.device, non_blocking=True), targets.to(self.device, non_blocking=True)

    def forward(self, batch: Batch) -> torch.Tensor:
        with self.precision.autocast():
            return self.model(*batch) / self.config.accumulation

    def step(self, observer: PhaseObserver | None = None) -> torch.Tensor:
        """One optimizer step (accumulating over the micro-batches); returns the loss."""
        observer = observer or NoObserver()
        observer.start()
        return self.kind.run(self, observer)

    def finish_step(self, observer: PhaseObserver) -> None:
        """The optimizer phase every kind of step ends with."""
        with observer.phase("optimizer"):
            self.precision.step(self.optimizer)
            self.optimizer.zero_grad(set_to_none=True)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def checked_model(factory: ModelFactory, config: TrainConfig) -> Any:
    model = factory(dict(config.model_config))
    if not isinstance(model, nn.Module) or not isinstance(model, BenchModel):
        raise GymbenchError(
            f"model {config.model!r} is not a benchmark model: its factory must return an nn.Module "
            "with `blocks`, `make_batch` and `tokens_per_sample` (gymbench.train.models.BenchModel)"
        )
    if config.uses_sequences and not isinstance(model, SequenceModel):
        what = "the RL step" if config.step == "rl" else "variable-length or packed sequences"
        raise GymbenchError(
            f"model {config.model!r} has no `token_logprobs`, which {what} needs: use a language model "
            "(transformer) or add token_logprobs (gymbench.train.models.SequenceModel)"
        )
    return model


def step_kind(session: TrainSession) -> StepKind:
    from gymbench.train import steps

    if session.config.step == "rl":
        from gymbench.train.rl import RLStep

        return RLStep(session)
    if session.config.uses_sequences:
        return steps.SequenceLMStep(session)
    return steps.FixedLMStep()
