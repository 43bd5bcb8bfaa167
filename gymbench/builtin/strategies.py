"""The built-in concurrency strategies' plugin: ``semaphore`` and ``adaptive``.

Registration only: the strategies and their settings (:mod:`gymbench.builtin.strategy_settings`)
are imported when a run uses them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gymbench.hookspecs import hookimpl
from gymbench.types import Component, ConcurrencyStrategy

if TYPE_CHECKING:
    from gymbench.builtin.strategy_settings import AdaptiveSettings, SemaphoreSettings

SETTINGS = "gymbench.builtin.strategy_settings"


def make_semaphore(settings: SemaphoreSettings) -> ConcurrencyStrategy:
    from gymbench.builtin.semaphore import SemaphoreStrategy

    return SemaphoreStrategy(settings.num_samples_in_parallel)


def make_adaptive(settings: AdaptiveSettings) -> ConcurrencyStrategy:
    from gymbench.builtin.adaptive import AdaptiveStrategy

    return AdaptiveStrategy(settings.search_settings(), settings.precision_rule(), settings.stop_when_converged)


@hookimpl
def gymbench_register_strategies() -> list[Component]:
    return [
        Component(
            "semaphore",
            make_semaphore,
            "at most num_samples_in_parallel rollouts at once (unset: unbounded, as NeMo Gym)",
            settings=f"{SETTINGS}:SemaphoreSettings",
        ),
        Component(
            "adaptive",
            make_adaptive,
            "finds the knee of the throughput curve during the run and settles there (gymbench tune +method=adaptive)",
            settings=f"{SETTINGS}:AdaptiveSettings",
        ),
    ]
