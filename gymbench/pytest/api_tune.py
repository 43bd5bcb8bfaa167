"""``gymbench.tune(...)``: ``gymbench tune`` inside a benchmark, its knee and recommendation as metrics.

CI then notices when a server, agent or environment change moves the knee. The settings are
exactly ``gymbench tune``'s (``[tool.gymbench.tune]`` of pyproject.toml and the pytest server
options first, then a mapping or YAML/JSON file, then keyword arguments), and the same
:func:`~gymbench.tune.command.tune_run` runs. With no server named, the session's simulator
answers, as for ``gymbench.collect``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gymbench.pytest.jobs import ConfigSource, fail_test, job_settings, or_fail
from gymbench.record import Metric

if TYPE_CHECKING:
    from gymbench.pytest.api import Benchmark
    from gymbench.tune.sweep import TuneResult


@dataclass
class TuneOutcome:
    """What one ``gymbench.tune(...)`` found, for assertions; ``result`` has every probe."""

    recommended: int
    knee_parallelism: float
    expected_rollouts_per_s: float
    metrics: dict[str, Metric]
    result: TuneResult
    """The :class:`~gymbench.tune.sweep.TuneResult`: probes, knee interval, stop reason."""


def run_tune(bench: Benchmark, config: ConfigSource, prefix: str, settings: Mapping[str, Any]) -> TuneOutcome:
    """Tune with these settings; the knee and recommendation land in ``bench`` under ``prefix``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        fail_test(bench.context, "gymbench.tune(...) runs its own event loop; call it from a plain test")
    return _recorded(bench, or_fail(bench.context, lambda: _tune(bench, config, settings)), prefix)


def _tune(bench: Benchmark, config: ConfigSource, settings: Mapping[str, Any]) -> TuneResult:
    from gymbench.tune.command import tune_run
    from gymbench.tune.config import TuneConfig

    tune_config = job_settings(bench.context, TuneConfig, "tune", config, settings, {"progress": False, "plot": ""})
    return tune_run(tune_config, bench.context.plugins(), running_sim=bench.context.sim)


def _recorded(bench: Benchmark, result: TuneResult, prefix: str) -> TuneOutcome:
    from gymbench.tune.report import tune_result

    record = tune_result(result, {})
    bench.add_job("tune", record.metrics, prefix, {"params": dict(record.params), **record.extra})
    return TuneOutcome(
        recommended=result.recommended,
        knee_parallelism=float(result.knee.parallelism),
        expected_rollouts_per_s=float(result.expected_rollouts_per_s),
        metrics=dict(record.metrics),
        result=result,
    )
