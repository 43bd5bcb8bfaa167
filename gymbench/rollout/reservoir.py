"""A fixed-size reservoir sample, so a million-row run keeps the same memory as a thousand-row one
while its percentiles stay accurate."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

RESERVOIR = 20_000


@dataclass(slots=True)
class Reservoir:  # slotted: several adds per rollout
    size: int = RESERVOIR
    seen: int = 0
    values: list[float] = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    def absorb(self, other: Reservoir) -> None:
        """Another reservoir's samples (a shard's), weighted by how many each side saw."""
        total = self.seen + other.seen
        if len(self.values) + len(other.values) <= self.size:
            self.values.extend(other.values)
        elif total:
            mine = round(self.size * self.seen / total)
            self.values = self.rng.sample(self.values, min(mine, len(self.values))) + self.rng.sample(
                other.values, min(self.size - mine, len(other.values))
            )
        self.seen = total

    def add(self, value: float) -> None:
        self.seen = seen = self.seen + 1
        values = self.values
        if len(values) < self.size:
            values.append(value)
            return
        slot = self.rng.randrange(seen)
        if slot < self.size:
            values[slot] = value

    def add_many(self, values: list[float]) -> None:
        """:meth:`add` each value in order (the same sample); those that fit are one list extend."""
        room = self.size - len(self.values)
        if room > 0:
            taken = values[:room]
            self.values.extend(taken)
            self.seen += len(taken)
            values = values[room:]
        for value in values:
            self.add(value)

    def percentiles(self, qs: tuple[float, ...]) -> list[float | None]:
        if not self.values:
            return [None] * len(qs)
        return [float(x) for x in np.percentile(self.values, qs)]
