"""Baselines, statistics, calibration and the CI gate.

This room reads results records and turns them into verdicts. It depends only on gymbench's core
(types, records, fingerprint, errors), never on the plugin manager or the other rooms. The names
below are imported on first use: the statistics pull in scipy, which ``gymbench --version`` must
not pay for.
"""

from __future__ import annotations

from gymbench.lazy import lazy_exports

_EXPORTS = {
    "BaselineStore": "gymbench.baseline.store",
    "Selection": "gymbench.baseline.store",
    "CompareSettings": "gymbench.baseline.settings",
    "GateResult": "gymbench.baseline.gate",
    "Outcome": "gymbench.baseline.gate",
    "run_gate": "gymbench.baseline.gate",
    "MetricComparison": "gymbench.baseline.compare",
    "Shift": "gymbench.baseline.compare",
    "SuiteComparison": "gymbench.baseline.compare",
    "compare_runs": "gymbench.baseline.compare",
    "MetricNoise": "gymbench.baseline.noise",
    "NoiseTable": "gymbench.baseline.noise",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
