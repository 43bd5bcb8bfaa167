"""The phases of a training step, and the observer that watches them.

A step (``steps``, ``rl``) runs each phase inside ``observer.phase(name)``; the session picks the
step and the timing loop, memory probe, profiler or FLOP counter picks the observer. Kept apart
from the session so that the steps depend on this small contract, not on the session that
chooses them (which would make the three modules import one another).
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from gymbench.train.session import TrainSession

LM_PHASES: tuple[str, ...] = ("data", "forward", "backward", "optimizer")


class PhaseObserver(Protocol):
    def start(self) -> None: ...

    def phase(self, name: str) -> AbstractContextManager[object]: ...

    def mark(self, event: str) -> None:
        """``forward_start`` / ``forward_end`` around the first forward that keeps activations."""
        ...


class NoObserver:
    def start(self) -> None:
        return None

    def phase(self, name: str) -> AbstractContextManager[object]:
        return contextlib.nullcontext()

    def mark(self, event: str) -> None:
        return None


class StepKind(Protocol):
    """One kind of training step: its phase names, and how it runs on a session."""

    phases: tuple[str, ...]
    lengths: str
    """Where sequence lengths come from, in words; empty for the model's own fixed-shape batch."""

    def run(self, session: TrainSession, observer: PhaseObserver) -> torch.Tensor: ...
