"""What ends a collection early, and how every rollout is accounted for when it does.

Two things stop a run before its tasks run out:

* an *internal error*: a plugin (strategy, verifier cache, progress callback) or the writer raised.
  The run stops dispatching, lets what is in flight land, and reports the error with the pairs
  whose rows were not written; resuming redoes exactly those.
* a *dead server*: ``limit`` rollouts in a row failed (NeMo Gym's default is to retry forever; a
  dead server otherwise costs every remaining rollout its full retry budget). The run stops at
  once, cancelling what is in flight (unwritten, so resuming redoes it without spending an
  attempt), and says why.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from gymbench.types import GenerationFailed

OUTAGE_KINDS = frozenset({"timeout", "connection_error", "server_error", "rate_limited"})
"""Failure kinds a server that is down or overloaded gives; the rest (404, 400, a bad answer) are
the same on every try, so waiting for the server does not help them."""


@dataclass
class FailureBreaker:
    """Trips after ``limit`` consecutive failed rollouts; ``limit`` 0 never trips."""

    limit: int = 20
    streak: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    last_reason: str = ""

    def observe(self, failure: GenerationFailed | None) -> bool:
        """Count one finished rollout; True when this one trips the breaker."""
        if failure is None:
            self.streak = 0
            self.kinds.clear()
            return False
        self.streak += 1
        self.kinds[failure.kind] += 1
        self.last_reason = failure.reason
        return self.limit > 0 and self.streak == self.limit

    @property
    def outage(self) -> bool:
        """The streak is of failures a server outage gives: waiting and trying again may succeed."""
        return bool(self.kinds) and all(kind in OUTAGE_KINDS for kind in self.kinds)

    def reason(self) -> str:
        kinds = ", ".join(f"{kind}: {count}" for kind, count in self.kinds.most_common())
        return (
            f"{self.streak} rollouts in a row failed ({kinds}); the server looks unreachable or is refusing "
            f"every request. Last failure: {self.last_reason}"
        )


@dataclass
class RunProblems:
    """Internal errors of a run and the pairs they left without a row."""

    errors: list[str] = field(default_factory=list)
    unwritten: list[tuple[int, int]] = field(default_factory=list)
    stop_reason: str | None = None
    cancelled: int = 0
    """Rollouts in flight when the run stopped early; not written, so a resume redoes them."""
    cancelled_pairs: list[tuple[int, int]] = field(default_factory=list)
    """Those rollouts' (task_index, rollout_index), to name them."""
    outage: bool = False
    """The stop was a server outage (connection errors, timeouts, 5xx), not a wrong setting."""

    @property
    def halted(self) -> bool:
        return bool(self.errors) or self.stop_reason is not None

    def add_error(self, where: str, exc: BaseException, pair: tuple[int, int] | None, written: bool) -> None:
        message = f"{where} raised {type(exc).__name__}: {' '.join(str(exc).split())}"
        if message not in self.errors:  # a broken plugin raises on every call: say it once
            self.errors.append(message)
        if pair is not None and not written:
            self.unwritten.append(pair)


@dataclass
class StopConditions:
    """Ends a run cleanly (no cancelling: what is in flight lands and is written) once failures
    pass a bound: ``max_errors`` failed rollouts in all, or a share ``error_rate`` of those landed
    so far, judged from ``min_rollouts`` on so that the first failure of a run is not 100%."""

    max_errors: int = 0
    error_rate: float | None = None
    min_rollouts: int = 20
    landed: int = 0
    failed: int = 0

    def observe(self, failed: bool) -> str | None:
        """Count one rollout; the reason to stop when this one crosses a bound."""
        self.landed += 1
        self.failed += failed
        if self.max_errors and self.failed >= self.max_errors:
            return f"{self.failed} rollouts failed, reaching stop_after_errors={self.max_errors}"
        rate = self.error_rate
        if rate is not None and self.landed >= self.min_rollouts and self.failed >= rate * self.landed:
            return (
                f"{self.failed} of {self.landed} rollouts failed ({self.failed / self.landed:.1%}), reaching "
                f"stop_at_error_rate={rate:g}"
            )
        return None
