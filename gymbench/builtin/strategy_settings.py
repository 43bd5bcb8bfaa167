"""The built-in concurrency strategies' settings, each declared once.

``num_samples_in_parallel`` (:class:`Parallelism`) is NeMo Gym's name, offered by ``gymbench
collect`` and taken by the ``semaphore`` strategy; the ``adaptive`` strategy's settings are the
knee search's (:mod:`gymbench.search_settings`), with its own defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gymbench.search_settings import GrowthSettings, PrecisionSettings, SearchSettings
from gymbench.settings import Checked, at_least, doc, require, with_defaults


@dataclass
class Parallelism(Checked):
    num_samples_in_parallel: int | None = field(
        default=None, metadata=doc("rollouts at once, at most (unset: unbounded, as NeMo Gym)", run_neutral=True)
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("num_samples_in_parallel", self.num_samples_in_parallel, 1)


@dataclass
class SemaphoreSettings(Parallelism):
    """The ``semaphore`` strategy's settings: the limit alone."""


@dataclass
class AdaptiveSettings(GrowthSettings, PrecisionSettings):
    """The ``adaptive`` strategy's settings: the knee search's rules, found during one run."""

    max_limit: int = field(default=4096, metadata=doc("largest limit tried"))
    stop_when_converged: bool = field(default=False, metadata=doc("stop the run once the knee is found"))

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.max_limit >= self.start, "max_limit", self.max_limit, f"at least start ({self.start})")

    def search_settings(self) -> SearchSettings:
        growth = {name: getattr(self, name) for name in GrowthSettings.__dataclass_fields__}
        return SearchSettings(**growth, max_parallelism=self.max_limit, fine_growth=True)


AdaptiveSettings = with_defaults(AdaptiveSettings, start=4, error_rate=0.02, min_batches=3)  # type: ignore[misc]
