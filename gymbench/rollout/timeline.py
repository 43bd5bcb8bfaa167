"""Throughput and latency over a run, in time buckets, for the report's over-time plots.

A bucket per second keeps a short run readable; a long one merges neighbours (the width doubles)
whenever it would pass :data:`MAX_BUCKETS`, so memory stays bounded however long the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gymbench.types import JSONObject

MAX_BUCKETS = 600


@dataclass
class Timeline:
    width_s: float = 1.0
    rollouts: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    latency_sum_s: list[float] = field(default_factory=list)

    def add(self, at_s: float, tokens: int, latency_s: float) -> None:
        """A rollout finished ``at_s`` seconds into the run."""
        index = max(0, int(at_s / self.width_s))
        while index >= MAX_BUCKETS:
            self._coarsen()
            index = max(0, int(at_s / self.width_s))
        missing = index + 1 - len(self.rollouts)
        if missing > 0:
            self.rollouts += [0] * missing
            self.tokens += [0] * missing
            self.latency_sum_s += [0.0] * missing
        self.rollouts[index] += 1
        self.tokens[index] += tokens
        self.latency_sum_s[index] += latency_s

    def _coarsen(self) -> None:
        self.width_s *= 2
        for name in ("rollouts", "tokens", "latency_sum_s"):
            values = getattr(self, name)
            setattr(self, name, [sum(values[i : i + 2]) for i in range(0, len(values), 2)])

    def to_dict(self) -> JSONObject:
        """Per bucket: start time, rollouts/s, output tokens/s, mean e2e latency (None when empty)."""
        return {
            "bucket_s": self.width_s,
            "start_s": [i * self.width_s for i in range(len(self.rollouts))],
            "rollouts_per_s": [n / self.width_s for n in self.rollouts],
            "output_tokens_per_s": [n / self.width_s for n in self.tokens],
            "mean_e2e_s": [s / n if n else None for s, n in zip(self.latency_sum_s, self.rollouts, strict=True)],
        }
