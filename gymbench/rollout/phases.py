"""Warm-up and cool-down: rollouts written and flagged but left out of the statistics.

A run's first rollouts meet cold caches, an empty batch and connections still opening; its last
ones meet a draining batch. Steady-state figures leave both out.

Warm-up belongs to each run: every start (a resumed run's too) opens new connections and fills an
empty batch, so it is the first ``warmup_rollouts`` this run dispatches, or those it dispatches in
its first ``warmup_s`` seconds.

Cool-down belongs to the end of the whole selection, so a run that is stopped and resumed flags
the same rows as one that is not. By count, it is the rollouts at the last ``cooldown_rollouts``
positions of the selection (positions count every rollout the selection yields, those a resume
skips included; the count is known before the run for a task file). By time, it is the rollouts
dispatched in the last ``cooldown_s`` seconds before dispatching ended, when it ended because the
selection (or the strategy's schedule) was done; a run cut short (killed, a stop condition, a
failure breaker) has no cool-down by time, as its rollouts stand measured in the run that goes on
to finish the selection. A rollout that lands while it may still fall in the cool-down window is
held (its row and its statistics) until that is known: when dispatching passes its dispatch time
plus the window, or ends. At most the rollouts of one window are held, and every one is written
when the run ends, whichever way it ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gymbench.errors import GymbenchError

WARMUP, COOLDOWN = "warmup", "cooldown"
UNDECIDED = "undecided"


@dataclass(frozen=True)
class Dispatched:
    """Where a rollout stands: its position in the selection, its dispatch time, and whether it is
    warm-up (decided when it is dispatched)."""

    position: int
    at: float
    warmup: bool


class Phases:
    def __init__(
        self,
        clock: Callable[[], float],
        warmup_rollouts: int = 0,
        warmup_s: float = 0.0,
        cooldown_rollouts: int = 0,
        cooldown_s: float = 0.0,
        planned: int | None = None,
    ) -> None:
        if cooldown_rollouts and planned is None:
            raise GymbenchError(
                "cooldown_rollouts counts back from the last rollout, and an input read from a pipe cannot be "
                "counted ahead: give a task file, or use cooldown_s (seconds) instead"
            )
        self.clock = clock
        self.started = clock()
        self.warmup = (warmup_rollouts, warmup_s)
        self.cooldown_from = planned - cooldown_rollouts if cooldown_rollouts and planned is not None else None
        self.cooldown_s = cooldown_s
        self.dispatched = 0
        self.last_dispatch: float | None = None
        self.dispatch_ended: float | None = None
        """When the last rollout was dispatched, once dispatching is over."""
        self.cut_short = False
        """Dispatching ended before the selection did: no cool-down by time (see the module)."""
        self.excluded = {WARMUP: 0, COOLDOWN: 0}

    @property
    def active(self) -> bool:
        return any(self.warmup) or self.cooldown_from is not None or self.cooldown_s > 0

    def dispatch(self, position: int) -> Dispatched:
        """This run dispatches the rollout at ``position`` in the selection (0 for its first)."""
        now = self.last_dispatch = self.clock()
        warm = self.dispatched < self.warmup[0] or now - self.started < self.warmup[1]
        self.dispatched += 1
        return Dispatched(position, now, warm)

    def end_dispatch(self, complete: bool) -> None:
        """Dispatching is over; ``complete``: because the selection or the strategy's schedule was done."""
        if self.dispatch_ended is None:
            self.dispatch_ended = self.last_dispatch if self.last_dispatch is not None else self.clock()
            self.cut_short = not complete

    def phase(self, rollout: Dispatched) -> str | None:
        """``"warmup"``, ``"cooldown"``, ``None`` (measured) or ``UNDECIDED`` (hold it for now)."""
        if rollout.warmup:
            return WARMUP
        if self.cooldown_from is not None and rollout.position >= self.cooldown_from:
            return COOLDOWN
        if self.cooldown_s <= 0 or self.cut_short:
            return None
        if self.dispatch_ended is not None:
            return COOLDOWN if rollout.at >= self.dispatch_ended - self.cooldown_s else None
        return None if self.clock() > rollout.at + self.cooldown_s else UNDECIDED

    def count(self, phase: str | None) -> None:
        if phase in self.excluded:
            self.excluded[phase] += 1
