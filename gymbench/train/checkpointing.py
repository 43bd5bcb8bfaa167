"""Gradient checkpointing of a model's repeated blocks: off, on, or every k-th block.

A checkpointed block keeps only its input during forward and recomputes its activations during
backward: less memory, one more forward's worth of time. ``use_reentrant=False`` always, because
the reentrant variant silently drops gradients when no input requires grad and cannot handle
keyword arguments (torch warns that it will become an error).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from gymbench.errors import GymbenchError
from gymbench.train.config import checkpoint_every

_recompute = ContextVar("gymbench_recompute", default=True)


class Checkpointed(nn.Module):
    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Any signature: Hugging Face decoder layers take masks and positions as keywords."""
        if not torch.is_grad_enabled() or not _recompute.get():
            return self.block(*args, **kwargs)
        return checkpoint(self.block, *args, use_reentrant=False, **kwargs)


@contextlib.contextmanager
def recompute_disabled() -> Iterator[None]:
    """Run checkpointed blocks plainly, to count model FLOPs without the recompute (for MFU)."""
    token = _recompute.set(False)
    try:
        yield
    finally:
        _recompute.reset(token)


@dataclass(frozen=True)
class CheckpointPlan:
    wrapped: int
    total: int
    note: str = ""
    """A warning when the requested ratio cannot be met exactly on this many blocks."""


def blocks_for_ratio(ratio: float, total: int) -> tuple[list[int], str]:
    """A share of the blocks (gymbench's own knob: NeMo RL has no ``checkpoint_ratio``; its
    ``activation_checkpointing`` is on or off): the nearest whole number of blocks, spread evenly.

    ``k = round(ratio · N)`` blocks at indices ``floor(i · N / k)``; 0.5 of 4 is blocks 0 and 2
    (the same as ``every-2``). When ``ratio · N`` is not whole the note says what was done.
    """
    if not 0.0 <= ratio <= 1.0:
        raise GymbenchError(f"checkpoint ratio {ratio} must lie between 0 and 1")
    wanted = ratio * total
    count = math.floor(wanted + 0.5)
    indices = [math.floor(i * total / count) for i in range(count)] if count else []
    if math.isclose(wanted, count, abs_tol=1e-9):
        return indices, ""
    return indices, (
        f"checkpoint ratio {ratio:g} on {total} blocks: {count} of {total} blocks checkpointed "
        f"({count / total:.0%}); {ratio:g} x {total} is not a whole number of blocks"
    )


def apply_checkpointing(blocks: nn.ModuleList, mode: str, ratio: float | None = None) -> CheckpointPlan:
    """Wrap every k-th block (the first of each group of k), or a ``ratio`` of them, in place."""
    note = ""
    if ratio is not None:
        indices, note = blocks_for_ratio(ratio, len(blocks))
    else:
        every = checkpoint_every(mode)
        indices = list(range(0, len(blocks), every)) if every else []
    for index in indices:
        if not isinstance(blocks[index], Checkpointed):
            blocks[index] = Checkpointed(blocks[index])
    return CheckpointPlan(len(indices), len(blocks), note)
