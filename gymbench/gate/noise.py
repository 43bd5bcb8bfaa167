"""What A/A calibration learned about one machine: each metric's run-to-run noise.

Kept apart from :mod:`calibrate` (which produces it) so that the comparison can read a noise
table without pulling in the machinery that reruns suites.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gymbench.errors import ResultsFileError
from gymbench.types import JSONObject

PRIOR_DF = 4.0
"""Weight, in runs, of the suite's typical noise in each metric's moderated noise estimate."""
CALIBRATION_SCHEMA = "gymbench.calibration"
CALIBRATION_VERSION = 1


@dataclass(frozen=True)
class MetricNoise:
    """Run-to-run noise of one metric, on the log scale (0.05 is about 5 %)."""

    run_sd: float
    """Standard deviation of a run's log median across reruns of the same code."""
    within_se: float
    """The typical bootstrap standard error of one run's log median (what one run can see)."""
    runs: int

    @property
    def between_sd(self) -> float:
        """The part of the run-to-run noise that resampling one run's samples cannot see."""
        return math.sqrt(max(0.0, self.run_sd**2 - self.within_se**2))


@dataclass(frozen=True)
class NoiseTable:
    """Noise per benchmark id and metric name, for one machine."""

    machine_key: str
    metrics: Mapping[str, Mapping[str, MetricNoise]] = field(default_factory=dict)
    source: str = ""
    """Where it came from (a calibration file), for reports."""

    def get(self, bench_id: str, metric: str) -> MetricNoise | None:
        return self.metrics.get(bench_id, {}).get(metric)

    @property
    def typical_sd(self) -> float:
        """The median run-to-run noise over all metrics: the prior each metric is pulled toward."""
        sds = sorted(n.run_sd for by in self.metrics.values() for n in by.values())
        return sds[len(sds) // 2] if sds else 0.0

    def moderated(self, bench_id: str, metric: str) -> tuple[float, float] | None:
        """(noise, degrees of freedom) of a metric, its own estimate shrunk toward the suite's.

        A standard deviation from a handful of runs is itself noisy: a metric that happened to be
        quiet during calibration would be gated far too tightly later. As in limma's moderated t,
        the estimate is pooled with the suite's typical noise, weighted as :data:`PRIOR_DF` runs,
        and the test uses Student's t with the combined degrees of freedom.
        """
        noise = self.get(bench_id, metric)
        if noise is None:
            return None
        own_df = max(noise.runs - 1, 1)
        variance = (own_df * noise.run_sd**2 + PRIOR_DF * self.typical_sd**2) / (own_df + PRIOR_DF)
        return math.sqrt(variance), own_df + PRIOR_DF

    def __len__(self) -> int:
        return sum(len(by_metric) for by_metric in self.metrics.values())


def noise_to_dict(table: NoiseTable, created_at: str) -> JSONObject:
    return {
        "schema": CALIBRATION_SCHEMA,
        "schema_version": CALIBRATION_VERSION,
        "machine_key": table.machine_key,
        "created_at": created_at,
        "source": table.source,
        "metrics": {
            bench_id: {name: vars(noise) for name, noise in by_metric.items()}
            for bench_id, by_metric in table.metrics.items()
        },
    }


def noise_from_dict(data: Mapping[str, Any], source: str) -> NoiseTable:
    """Read a calibration file's content; anything unexpected names the file and the fix."""
    if data.get("schema") != CALIBRATION_SCHEMA or data.get("schema_version") != CALIBRATION_VERSION:
        raise ResultsFileError(
            f"{source}: not a gymbench calibration file of version {CALIBRATION_VERSION} "
            f'(expected "schema": "{CALIBRATION_SCHEMA}"); run `gymbench calibrate` to write one'
        )
    try:
        metrics = {
            str(bench_id): {str(name): MetricNoise(float(n["run_sd"]), float(n["within_se"]), int(n["runs"]))
                            for name, n in by_metric.items()}
            for bench_id, by_metric in data["metrics"].items()
        }  # fmt: skip
        return NoiseTable(str(data["machine_key"]), metrics, source)
    except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError) as exc:
        raise ResultsFileError(
            f"{source}: corrupt calibration file ({type(exc).__name__}: {exc}); run `gymbench calibrate` again"
        ) from None
