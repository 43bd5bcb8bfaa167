"""Settings of an interleaved A/B run (``gymbench compare --ab``, ``calibrate --ab``, ``pytest --gymbench-ab``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gymbench.settings import Checked, at_least, positive_finite


@dataclass
class ABSettings(Checked):
    repeats: int = field(default=3, metadata={"help": "fresh worker pairs; the effect is the median over them"})
    rounds: int = field(default=20, metadata={"help": "measured rounds per side and benchmark in each pair (ABBA)"})
    round_time_s: float = field(
        default=0.02, metadata={"help": "calls per round are chosen so that a round lasts about this long"}
    )
    cpu: int | None = field(default=None, metadata={"help": "the CPU both workers are pinned to (default: the last)"})
    gate_wall_time: bool = field(
        default=False, metadata={"help": "gate wall time too, not only CPU time (for a dedicated, quiet runner)"}
    )
    timeout_s: float = field(
        default=900.0, metadata={"help": "longest wait for a worker's next message (a test's set-up included)"}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("repeats", self.repeats, 1, 99)
        at_least("rounds", self.rounds, 2, 10_000)
        positive_finite("round_time_s", self.round_time_s)
        at_least("cpu", self.cpu, 0)
        positive_finite("timeout_s", self.timeout_s)
