"""Gradient checkpointing of a model's repeated blocks: off, on, or every k-th block.

A checkpointed block keeps only its input during forward and recomputes its activations during
backward: less memory, one more forward's worth of time. ``use_reentrant=False`` always, because
the reentrant variant silently drops gradients when no input requires grad and cannot handle
keyword arguments (torch warns that it will become an error).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from gymbench.errors import GymbenchError
from gymbench.trainstep.config import checkpoint_every

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


def mode_from_ratio(ratio: float) -> str:
    """The seed's ``checkpoint_ratio`` (share of layers checkpointed) as a mode name."""
    if not 0.0 <= ratio <= 1.0:
        raise GymbenchError(f"checkpoint ratio {ratio} must lie between 0 and 1")
    if ratio == 0.0:
        return "off"
    every = round(1.0 / ratio)
    return "on" if every == 1 else f"every-{every}"


def apply_checkpointing(blocks: nn.ModuleList, mode: str) -> int:
    """Wrap every k-th block (the first of each group of k) in place; returns how many were wrapped."""
    every = checkpoint_every(mode)
    if every == 0:
        return 0
    wrapped = 0
    for index in range(0, len(blocks), every):
        if not isinstance(blocks[index], Checkpointed):
            blocks[index] = Checkpointed(blocks[index])
            wrapped += 1
    return wrapped
