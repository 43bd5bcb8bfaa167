"""``gymbench.train_step(...)`` and ``gymbench.find_batch(...)``: ``gymbench train`` inside a benchmark.

Both take exactly the settings ``gymbench train`` takes (``[tool.gymbench.train]`` of pyproject.toml
first, then a mapping or YAML/JSON file, then keyword arguments) and call the same
:func:`gymbench.train.execute.train` the command line calls, so a figure from a pytest suite
and one from ``gymbench train`` are the same measurement. Imported only when a benchmark calls
them: torch loads then, never when pytest starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gymbench.measure import Recorder
from gymbench.pytest.jobs import ConfigSource, job_settings, or_fail
from gymbench.record import Metric

if TYPE_CHECKING:
    from gymbench.pytest.api import Benchmark
    from gymbench.train.execute import TrainDetail, TrainOutcome


@dataclass
class TrainResult:
    """What one ``gymbench.train_step(...)`` or ``gymbench.find_batch(...)`` gave, for assertions."""

    params: dict[str, Any]
    metrics: dict[str, Metric]
    lines: list[str]
    """The summary ``gymbench train`` prints for the same settings."""
    warnings: list[str] = field(default_factory=list)
    report: TrainDetail | None = None
    """A ``TrainReport`` (steps), a ``SearchResult`` (``find_batch``), the halving's ``Trial`` list or
    the data-parallel figures: every detail."""

    def value(self, name: str) -> float | None:
        """The median of a recorded metric (``step_time``, ``tokens_per_s``, ``largest_fit`` ...)."""
        metric = self.metrics.get(name)
        return None if metric is None else metric.value

    @property
    def step_time_s(self) -> float | None:
        return self.value("step_time")

    @property
    def tokens_per_s(self) -> float | None:
        return self.value("tokens_per_s")

    @property
    def chosen_batch(self) -> int | None:
        chosen = self.value("chosen_batch")
        return None if chosen is None else int(chosen)


def run_train(bench: Benchmark, config: ConfigSource, prefix: str, settings: Mapping[str, Any]) -> TrainResult:
    """Run ``gymbench train`` with these settings; its metrics land in ``bench`` under ``prefix``."""
    from gymbench.train.execute import train
    from gymbench.train.settings import TrainSettings

    def work() -> TrainOutcome:
        train_settings = job_settings(
            bench.context,
            TrainSettings,
            "train",
            config,
            settings,
            {"progress": False, "save": None},
            "gymbench.train_step",
        )
        return train(train_settings, bench.context.plugins(), Recorder(bench.settings))

    outcome = or_fail(bench.context, work)
    result = outcome.result
    bench.add_job("train", result.metrics, prefix, {"params": dict(result.params), **result.extra})
    return TrainResult(dict(result.params), dict(result.metrics), outcome.lines, outcome.warnings, outcome.report)
