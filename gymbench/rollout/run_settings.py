"""Settings of a collection's rows, each declared once: which tasks (:class:`TaskRange`) and how a run
treats the output file and failures (:class:`RunPolicy`).

``gymbench collect`` offers both flat, ``merge-rollouts`` the task range, and the engine's
:class:`~gymbench.rollout.engine.CollectSettings` runs by the policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gymbench.rollout.dataset import ROLLOUT_INDEX_BITS, TaskSlice
from gymbench.settings import Checked, at_least, doc, require

MOST_REPEATS = (1 << ROLLOUT_INDEX_BITS) - 1
"""Rollout indices are packed into 24 bits by the resume bookkeeping."""


@dataclass
class TaskRange(Checked):
    """NeMo Gym's selection of tasks: ``[start_idx, end_idx)``, at most ``limit``, each ``num_repeats`` times."""

    limit: int | None = field(default=None, metadata=doc("take at most this many rows (after start_idx)"))
    start_idx: int = field(default=0, metadata=doc("first row index taken (0-based)"))
    end_idx: int | None = field(default=None, metadata=doc("row index to stop before: the range is [start, end)"))
    num_repeats: int = field(default=1, metadata=doc("rollouts per task"))

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("limit", self.limit, 0)
        at_least("start_idx", self.start_idx, 0)
        if self.end_idx is not None:
            require(self.end_idx >= self.start_idx, "end_idx", self.end_idx, f"at least start_idx ({self.start_idx})")
        at_least("num_repeats", self.num_repeats, 1, MOST_REPEATS)

    def task_slice(self) -> TaskSlice:
        return TaskSlice(self.start_idx, self.end_idx, self.limit, self.num_repeats)


@dataclass
class RunPolicy(Checked):
    """How a run treats an existing output file and failing rollouts (keyword-only when constructing)."""

    resume: bool = field(
        default=False,
        kw_only=True,
        metadata=doc("skip rollouts already in the output file", run_neutral=True, alias="resume_from_cache"),
    )
    overwrite: bool = field(
        default=False, kw_only=True, metadata=doc("replace an existing output file", run_neutral=True)
    )
    max_attempts: int = field(
        default=3, kw_only=True, metadata=doc("attempts per failed rollout across resumes", run_neutral=True)
    )
    stop_after_failures: int = field(
        default=20,
        kw_only=True,
        metadata=doc(
            "stop early after this many rollouts in a row fail to reach the server (0: never)", run_neutral=True
        ),
    )

    stop_after_errors: int = field(
        default=0,
        kw_only=True,
        metadata=doc("end the run cleanly once this many rollouts failed in all (0: never)", run_neutral=True),
    )
    stop_at_error_rate: float | None = field(
        default=None,
        kw_only=True,
        metadata=doc(
            "end the run cleanly once this share of the rollouts so far failed (checked from "
            "error_rate_min_rollouts on; unset: never)",
            run_neutral=True,
        ),
    )
    error_rate_min_rollouts: int = field(
        default=20, kw_only=True, metadata=doc("rollouts landed before stop_at_error_rate is judged", run_neutral=True)
    )
    warmup_rollouts: int = field(
        default=0,
        kw_only=True,
        metadata=doc(
            "the first N rollouts this run dispatches (a resumed run too) are warm-up: written, flagged, left out",
            run_neutral=True,
        ),
    )
    warmup_s: float = field(
        default=0.0,
        kw_only=True,
        metadata=doc(
            "rollouts dispatched in the run's first S seconds are warm-up (written, flagged, left out)",
            run_neutral=True,
        ),
    )
    cooldown_rollouts: int = field(
        default=0,
        kw_only=True,
        metadata=doc(
            "the last N rollouts of the selection are cool-down (resumed or not): written, flagged, left out",
            run_neutral=True,
        ),
    )
    cooldown_s: float = field(
        default=0.0,
        kw_only=True,
        metadata=doc(
            "rollouts dispatched in the last S seconds before the selection ran out are cool-down (flagged, left out)",
            run_neutral=True,
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("max_attempts", self.max_attempts, 1)
        at_least("stop_after_failures", self.stop_after_failures, 0)
        at_least("stop_after_errors", self.stop_after_errors, 0)
        if self.stop_at_error_rate is not None:
            rate = self.stop_at_error_rate
            require(0 < rate <= 1, "stop_at_error_rate", rate, "a share above 0 and at most 1 (0.1: 10%)")
        at_least("error_rate_min_rollouts", self.error_rate_min_rollouts, 1)
        for name in ("warmup_rollouts", "cooldown_rollouts", "warmup_s", "cooldown_s"):
            value = getattr(self, name)
            require(math.isfinite(value) and value >= 0, name, value, "a finite number at least 0 (0: none)")
