"""Interleaved A/B comparison of two commits in one job (harness level).

Orchestration lives here because it runs git, worker processes and the pytest plugin's worker
mode; the statistics of paired rounds live in :mod:`gymbench.gate.paired` (a room that
never starts processes). The names below are imported on first use, so a worker process
(which imports :mod:`gymbench.gate.ab.worker`) does not load the statistics.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ABRunner": "gymbench.gate.ab.runner",
    "ABSettings": "gymbench.gate.ab.settings",
    "Checkouts": "gymbench.gate.ab.sides",
    "Side": "gymbench.gate.ab.sides",
    "ab_gate": "gymbench.gate.ab.gate",
    "calibrate_ab": "gymbench.gate.ab.gate",
    "measure_ab": "gymbench.gate.ab.gate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gymbench.gate.ab' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
