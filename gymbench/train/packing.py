"""Variable-length sequences laid out for a step: padded to the longest, or packed into rows.

Padding gives every sequence its own row, as long as the micro-batch's longest: right padding
under a causal mask never lets a real token see a pad, so no mask is needed, but the pad slots
cost full compute. Packing fills rows of ``capacity`` tokens first-fit-decreasing with whole
sequences; positions restart at 0 for each sequence and a block-diagonal causal mask keeps a
sequence from attending to its neighbours, so each sequence computes exactly what it would alone.
Pad slots share one segment (-1) so that no attention row is empty (an all-masked row is NaN).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import torch

from gymbench.train.lengths import Sample


@dataclass(frozen=True)
class StepCount:
    """What a step processed: real tokens, slots (real + pad), and attention pairs.

    ``real_pairs`` is Σ n² over sequences (attention counted in full, as PaLM's MFU does);
    ``computed_pairs`` is Σ L² over rows, what the attention kernel is handed.
    """

    sequences: int = 0
    tokens: int = 0
    slots: int = 0
    real_pairs: int = 0
    computed_pairs: int = 0

    def __add__(self, other: StepCount) -> StepCount:
        return StepCount(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @property
    def padding_share(self) -> float:
        return 1 - self.tokens / self.slots if self.slots else 0.0


@dataclass(frozen=True)
class SequenceBatch:
    tokens: torch.Tensor
    """``[rows, L]`` input token ids."""
    targets: torch.Tensor
    """``[rows, L]`` the next token at each position (0 where there is none)."""
    positions: torch.Tensor
    segments: torch.Tensor
    """``[rows, L]`` which sequence of the micro-batch a slot belongs to; -1 for pad slots."""
    loss_mask: torch.Tensor
    """``[rows, L]`` bool: the loss is taken on this position's prediction."""
    attn_mask: torch.Tensor | None
    """``[rows, 1, L, L]`` bool block-diagonal causal mask when packed; ``None``: plain causal."""
    count: StepCount

    def to(self, device: torch.device) -> SequenceBatch:
        moved = {
            f.name: getattr(self, f.name).to(device, non_blocking=True)
            for f in fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }
        return replace(self, **moved)


def random_tokens(samples: Sequence[Sample], vocab: int, generator: torch.Generator) -> list[torch.Tensor]:
    return [torch.randint(0, vocab, (sample.length,), generator=generator) for sample in samples]


def pad(samples: Sequence[Sample], tokens: Sequence[torch.Tensor], *, completion_only: bool) -> SequenceBatch:
    rows = [[index] for index in range(len(samples))]
    return _lay_out(samples, tokens, rows, packed=False, completion_only=completion_only)


def pack(
    samples: Sequence[Sample], tokens: Sequence[torch.Tensor], capacity: int, *, completion_only: bool
) -> SequenceBatch:
    rows = first_fit_decreasing(samples, capacity)
    return _lay_out(samples, tokens, rows, packed=True, completion_only=completion_only)


def first_fit_decreasing(samples: Sequence[Sample], capacity: int) -> list[list[int]]:
    """Sample indices per row, longest first into the first row with room (within 22% of optimal)."""
    rows: list[list[int]] = []
    free: list[int] = []
    for index in sorted(range(len(samples)), key=lambda i: -samples[i].length):
        length = samples[index].length
        if length > capacity:
            raise ValueError(f"a sequence of {length} tokens cannot be packed into rows of {capacity}")
        row = next((r for r, room in enumerate(free) if room >= length), None)
        if row is None:
            rows.append([])
            free.append(capacity)
            row = len(rows) - 1
        rows[row].append(index)
        free[row] -= length
    return [sorted(row) for row in rows]


def _lay_out(
    samples: Sequence[Sample],
    tokens: Sequence[torch.Tensor],
    rows: list[list[int]],
    *,
    packed: bool,
    completion_only: bool,
) -> SequenceBatch:
    width = max(sum(samples[i].length for i in row) for row in rows)
    shape = (len(rows), width)
    batch = {name: torch.zeros(shape, dtype=torch.long) for name in ("tokens", "targets", "positions")}
    segments = torch.full(shape, -1, dtype=torch.long)
    loss_mask = torch.zeros(shape, dtype=torch.bool)
    for r, row in enumerate(rows):
        start = 0
        for index in row:
            sample, ids = samples[index], tokens[index]
            end = start + sample.length
            batch["tokens"][r, start:end] = ids
            batch["targets"][r, start : end - 1] = ids[1:]
            batch["positions"][r, start:end] = torch.arange(sample.length)
            segments[r, start:end] = index
            first = start + sample.prompt - 1 if completion_only else start
            loss_mask[r, max(first, start) : end - 1] = True
            start = end
    count = StepCount(
        sequences=len(samples),
        tokens=sum(s.length for s in samples),
        slots=shape[0] * shape[1],
        real_pairs=sum(s.length**2 for s in samples),
        computed_pairs=shape[0] * shape[1] ** 2,
    )
    mask = block_causal_mask(segments) if packed else None
    return SequenceBatch(batch["tokens"], batch["targets"], batch["positions"], segments, loss_mask, mask, count)


def block_causal_mask(segments: torch.Tensor) -> torch.Tensor:
    """``[rows, 1, L, L]``: a slot sees the earlier slots of its own sequence (pads see pads)."""
    width = segments.shape[1]
    same = segments[:, :, None] == segments[:, None, :]
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    return (same & causal)[:, None]
