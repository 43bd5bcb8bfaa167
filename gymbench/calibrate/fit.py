"""The simulator's step-time model fitted to a real engine's own timings.

The simulator's engine (:mod:`gymbench.sim.engine`) costs a step ``a + b·n + c·k``: ``n``
sequences running, ``k`` prompt tokens prefilled in the step. llama.cpp's server batches the same
way (one ``llama_decode`` per loop: a token for every generating slot plus the prompt tokens of the
slots being filled), and reports per request ``prompt_ms`` / ``prompt_n`` (the prefill step) and
``predicted_per_token_ms`` (the mean step while it generated). So:

* prefill alone (one client, prompts of a few lengths): ``prompt_ms = a' + c·prompt_n``;
* decode at ``n`` running sequences: ``predicted_per_token_ms = a + b·n + c·P·(n-1)/L``, the last
  term being the other sequences' prefills that land in this one's steps (each of the ``n-1``
  others prefills ``P`` tokens once in its ``L`` steps).

Both are linear in the coefficients; they are fitted by non-negative least squares (a negative
step cost is never meant, and would be refused by the simulator). Times here are milliseconds.

The line ``a + b·n`` is kept as the record's summary, but the profile gives the simulator the
decode step measured at each running count (``curve_ms``, less the other sequences' prefills):
llama.cpp's step on a CPU is concave in the batch (about 0.5, 0.85 and 1.1 ms at 1, 2 and 4
sequences), and the line through such points put the calibrated simulator's knee 110% off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class PrefillPoint:
    prompt_n: float
    prompt_ms: float


@dataclass(frozen=True)
class DecodePoint:
    running: float
    """Sequences running while this request generated: min(concurrency, slots)."""
    per_token_ms: float
    prompt_n: float
    """Prompt tokens the server processed for requests of this load (after its prompt cache)."""
    output_tokens: float


@dataclass(frozen=True)
class StepFit:
    base_ms: float
    per_seq_ms: float
    per_prompt_token_ms: float
    prefill_fixed_ms: float
    """``a'``: the prefill step's fixed part (a request's own prefill, outside the decode steps)."""
    prefill_residuals_ms: list[float]
    decode_residuals_ms: list[float]
    curve_ms: dict[int, float] = field(default_factory=dict)
    """The decode step measured at each running count (the loads' means; others' prefills removed)."""

    def decode_ms(self, running: float, prompt_n: float, output_tokens: float) -> float:
        others = self.per_prompt_token_ms * prompt_n * max(0.0, running - 1) / output_tokens
        return self.base_ms + self.per_seq_ms * running + others


def non_negative_least_squares(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    from scipy.optimize import nnls

    solution, _ = nnls(design, target)
    return solution


def fit_prefill(points: Sequence[PrefillPoint]) -> tuple[float, float]:
    """(fixed ms, ms per prompt token) of a prefill step; (0, mean ms per token) from one length."""
    n = np.array([p.prompt_n for p in points], dtype=float)
    y = np.array([p.prompt_ms for p in points], dtype=float)
    if len(set(n.tolist())) < 2:
        return 0.0, float(y.sum() / max(n.sum(), 1.0))
    fixed, per_token = non_negative_least_squares(np.column_stack([np.ones_like(n), n]), y)
    return float(fixed), float(per_token)


def fit_steps(prefill: Sequence[PrefillPoint], decode: Sequence[DecodePoint]) -> StepFit:
    """``c`` from the prefill points, then ``a`` and ``b`` from the decode points with ``c`` known."""
    if not decode:
        raise ValueError("no decode measurements to fit")
    fixed, per_token = fit_prefill(prefill) if prefill else (0.0, 0.0)
    running = np.array([d.running for d in decode], dtype=float)
    others = np.array([d.prompt_n * max(0.0, d.running - 1) / d.output_tokens for d in decode])
    y = np.array([d.per_token_ms for d in decode], dtype=float) - per_token * others
    if len(set(running.tolist())) < 2:
        base, per_seq = float(max(0.0, y.mean())), 0.0
    else:
        base, per_seq = (
            float(v) for v in non_negative_least_squares(np.column_stack([np.ones_like(running), running]), y)
        )
    fit = StepFit(base, per_seq, per_token, fixed, [], [])
    prefill_residuals = [p.prompt_ms - (fixed + per_token * p.prompt_n) for p in prefill]
    decode_residuals = [d.per_token_ms - fit.decode_ms(d.running, d.prompt_n, d.output_tokens) for d in decode]
    return StepFit(base, per_seq, per_token, fixed, prefill_residuals, decode_residuals, step_curve(running, y))


def step_curve(running: np.ndarray, steps_ms: np.ndarray) -> dict[int, float]:
    """The mean decode step at each (rounded) running count, never negative."""
    curve: dict[int, list[float]] = {}
    for n, ms in zip(running.tolist(), steps_ms.tolist(), strict=True):
        curve.setdefault(max(1, round(n)), []).append(ms)
    return {n: max(0.0, float(np.mean(values))) for n, values in sorted(curve.items())}
