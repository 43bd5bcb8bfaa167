"""Module-level model factories for the tests: the CPU memory pass and OOM trials pickle them."""

from __future__ import annotations

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
