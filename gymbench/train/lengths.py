"""How long the sequences of a training step are: a length distribution, or a rollouts file's counts.

RL post-training trains on what the policy generated: a prompt and a completion of very different
lengths per sample, most short and a few cut off at the generation limit. A step on fixed-length
random tokens hides what padding costs and what the longest batch needs in memory, so the step can
draw its lengths from a distribution or replay the token counts of a rollouts JSONL. gymbench's own
rows carry ``usage.prompt_tokens``/``completion_tokens``; NeMo Gym's carry
``response.usage.input_tokens``/``output_tokens``. No torch here: the settings are checked (and the
file read) before torch is imported, and numpy is imported only when lengths are drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gymbench.errors import GymbenchError
from gymbench.rollouts_file import RolloutsFile

if TYPE_CHECKING:
    import numpy as np

LENGTH_DISTRIBUTIONS = ("fixed", "uniform", "skewed")
SKEWED_MEDIAN_SHARE = 0.25
"""``skewed``: log-normal with its median at this share of the longest length ..."""
SKEWED_SIGMA = 0.8
"""... and this spread, so about 4% of the draws reach the cap, as truncated RL responses do."""
USAGE_FIELDS = (
    (("usage", "prompt_tokens"), ("usage", "completion_tokens")),  # gymbench's rollout rows
    (("response", "usage", "input_tokens"), ("response", "usage", "output_tokens")),  # NeMo Gym's
)


@dataclass(frozen=True)
class Sample:
    """One generated sequence: the prompt, then the completion the loss is taken on."""

    prompt: int
    completion: int
    reward: float | None = None

    @property
    def length(self) -> int:
        return self.prompt + self.completion


@dataclass(frozen=True)
class Distribution:
    """Lengths drawn between ``min_len`` and ``max_len``; the prompt is ``prompt_share`` of each."""

    name: str
    max_len: int
    min_len: int = 8
    prompt_share: float = 0.25

    @property
    def longest(self) -> int:
        return self.max_len

    def describe(self) -> str:
        if self.name == "fixed":
            return f"fixed {self.max_len} tokens"
        return f"{self.name} lengths in [{self.min_len}, {self.max_len}]"

    def lengths(self, count: int, rng: np.random.Generator) -> np.ndarray:
        import numpy as np

        if self.name == "fixed":
            return np.full(count, self.max_len)
        if self.name == "uniform":
            return rng.integers(self.min_len, self.max_len + 1, size=count)
        median = SKEWED_MEDIAN_SHARE * self.max_len
        drawn = rng.lognormal(math.log(median), SKEWED_SIGMA, size=count)
        return np.clip(np.rint(drawn), self.min_len, self.max_len).astype(int)

    def draw(self, count: int, rng: np.random.Generator) -> list[Sample]:
        return [split_prompt(int(length), self.prompt_share) for length in self.lengths(count, rng)]


def split_prompt(length: int, share: float) -> Sample:
    """At least one prompt token to condition on, at least one completion token when there is room."""
    prompt = min(max(1, round(length * share)), max(1, length - 1))
    return Sample(prompt, length - prompt)


@dataclass(frozen=True)
class RolloutLengths:
    """The token counts of a rollouts file, replayed in file order from a random start.

    Consecutive rows stay together, so the generations of one task (written next to each other by
    NeMo Gym and gymbench) mostly land in one GRPO group.
    """

    path: str
    samples: tuple[Sample, ...]
    truncated: int = 0
    """Rows longer than the sequence limit, cut to it (the completion loses its tail)."""
    skipped: int = 0
    """Failed rollouts (``status: failed``): nothing was generated, nothing to train on."""

    @property
    def longest(self) -> int:
        return max(sample.length for sample in self.samples)

    def describe(self) -> str:
        import numpy as np

        lengths = [sample.length for sample in self.samples]
        cut = f", {self.truncated} cut to the limit" if self.truncated else ""
        gone = f", {self.skipped} failed rows skipped" if self.skipped else ""
        return (
            f"{len(lengths)} rollouts from {self.path} (median {np.median(lengths):.0f}, "
            f"longest {max(lengths)} tokens{cut}{gone})"
        )

    def draw(self, count: int, rng: np.random.Generator) -> list[Sample]:
        start = int(rng.integers(len(self.samples)))
        return [self.samples[(start + offset) % len(self.samples)] for offset in range(count)]


LengthSource = Distribution | RolloutLengths


def read_rollout_lengths(path: str | Path, max_len: int) -> RolloutLengths:
    """Every row's prompt and completion token counts (and reward, if any), cut to ``max_len``."""
    target = Path(path)
    samples, truncated, skipped = [], 0, 0
    for number, _raw, row in RolloutsFile(target).lines():
        if row.get("status") == "failed":
            skipped += 1
            continue
        sample = _sample(row, f"{target}:{number}")
        if sample.length > max_len:
            truncated += 1
            sample = _cut(sample, max_len)
        samples.append(sample)
    if not samples:
        raise GymbenchError(
            f"{target}: no rollouts with token counts ({skipped} failed rows skipped); "
            "point --rollouts at the output of `gymbench collect` or NeMo Gym's ng_collect_rollouts"
        )
    return RolloutLengths(str(target), tuple(samples), truncated, skipped)


def _sample(row: dict[str, Any], where: str) -> Sample:
    for prompt_path, completion_path in USAGE_FIELDS:
        prompt, completion = _dig(row, prompt_path), _dig(row, completion_path)
        if prompt is None and completion is None:
            continue
        for name, value in ((".".join(prompt_path), prompt), (".".join(completion_path), completion)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise GymbenchError(f"{where}: {name} is {value!r}; expected a token count (an integer >= 0)")
        if prompt + completion < 2:
            raise GymbenchError(f"{where}: {prompt} + {completion} tokens; a training sequence needs at least 2")
        return Sample(prompt, completion, _reward(row.get("reward"), where))
    raise GymbenchError(
        f"{where}: no token counts; expected usage.prompt_tokens and usage.completion_tokens (gymbench) "
        "or response.usage.input_tokens and output_tokens (NeMo Gym)"
    )


def _dig(row: dict[str, Any], path: tuple[str, ...]) -> Any:
    found: Any = row
    for key in path:
        if not isinstance(found, dict):
            return None
        found = found.get(key)
    return found


def _reward(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise GymbenchError(f"{where}: reward is {value!r}; expected a finite number or null")
    return float(value)


def _cut(sample: Sample, max_len: int) -> Sample:
    prompt = min(sample.prompt, max_len - 1)
    return Sample(prompt, max_len - prompt, sample.reward)
