"""What a person watching a run sees: progress bars and one-line warnings on stderr.

Warnings go through tqdm's ``write`` so that they do not tear a progress bar in two.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from gymbench.rollout.engine import Collector
from gymbench.rollout.stats import CollectStats

REFRESH_S = 0.5


def _postfix(stats: CollectStats) -> str:
    reward = "-" if stats.mean_reward is None else f"{stats.mean_reward:.3f}"
    return f"reward={reward} failed={stats.failed}"


class CollectProgressBar:
    """tqdm with rollouts/s (its rate) and the running mean reward; it closes on the final figures.

    A :class:`~gymbench.collect.driver.CollectionProgress`: the collection opens it when it starts.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self._shown_at = 0.0

    def start(self, collector: Collector) -> None:
        from tqdm import tqdm

        total = collector.planned() if self.enabled else None
        self.bar = tqdm(total=total, unit="rollout", desc="Collecting rollouts", disable=not self.enabled,
                        mininterval=REFRESH_S)  # fmt: skip

    def update(self, done: int, stats: CollectStats) -> None:
        self.bar.update(done)
        now = time.monotonic()
        if now - self._shown_at > REFRESH_S:
            self._shown_at = now
            self.bar.set_postfix_str(_postfix(stats), refresh=False)

    def close(self, stats: CollectStats) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(_postfix(stats), refresh=True)
            self.bar.close()
            self.bar = None


class ProbeProgress:
    """One line per probe while it runs: which parallelism, rollouts so far, and the probe's own
    steady-state rollouts/s with its interval so far (:meth:`show`)."""

    def __init__(self, enabled: bool, what: str = "probe") -> None:
        self.enabled = enabled
        self.what = what
        self.bar: Any = None

    def start(self, parallelism: int, total: int | None) -> Callable[[int, CollectStats], None]:
        from tqdm import tqdm

        self.close()
        self.bar = tqdm(total=total, unit="rollout", desc=f"{self.what} at parallelism {parallelism}",
                        disable=not self.enabled, mininterval=REFRESH_S, leave=True)  # fmt: skip
        bar = self.bar

        def on_progress(done: int, stats: CollectStats) -> None:
            bar.update(done)

        return on_progress

    def show(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)

    def said(self, text: str) -> None:
        """A probe's outcome on a line of its own (to stderr, beside the results on stdout), bar or
        no bar: with ``+progress=false`` a tune used to print nothing at all until its end."""
        self.close()
        print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
