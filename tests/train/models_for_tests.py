"""Module-level model factories for the tests: the CPU memory pass and OOM trials pickle them."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

import torch

from gymbench.train.models import DeepMLP, MLPConfig

KEPT: list[torch.Tensor] = []


class LeakyMLP(DeepMLP):
    """Keeps 4 MiB per forward alive, the way ``total_loss += loss`` keeps graphs alive."""

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        KEPT.append(torch.ones(1 << 20))
        return super().forward(inputs, targets)


class OverflowingMLP(DeepMLP):
    """A loss so large that its fp16-scaled gradients overflow: the scaler must skip steps."""

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return super().forward(inputs, targets) * 1e30


def build_leaky(config: Mapping[str, Any]) -> LeakyMLP:
    return LeakyMLP(MLPConfig(width=32, depth=2, classes=8))


def build_overflowing(config: Mapping[str, Any]) -> OverflowingMLP:
    return OverflowingMLP(MLPConfig(width=16, depth=2, classes=4))


def build_tiny_mlp(config: Mapping[str, Any]) -> DeepMLP:
    return DeepMLP(MLPConfig(**{"width": 32, "depth": 2, "classes": 8, **config}))


class RankFaultMLP(DeepMLP):
    """Fails on rank 1 at its third forward (after warm-up has begun), the way a bug or a stuck
    data loader on one rank does: ``raise`` raises, ``hang`` blocks without ever returning."""

    def __init__(self, fault: str) -> None:
        super().__init__(MLPConfig(width=32, depth=2, classes=8))
        self.fault, self.calls = fault, 0

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if os.environ.get("RANK") == "1" and self.calls >= 3:
            if self.fault == "hang":
                threading.Event().wait()
            raise RuntimeError("rank 1's own failure")
        return super().forward(inputs, targets)


def build_raising_on_rank_1(config: Mapping[str, Any]) -> RankFaultMLP:
    return RankFaultMLP("raise")


def build_hanging_on_rank_1(config: Mapping[str, Any]) -> RankFaultMLP:
    return RankFaultMLP("hang")
