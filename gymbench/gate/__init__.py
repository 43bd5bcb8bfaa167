"""Baselines, statistics, calibration and the CI gate.

This room reads results records and turns them into verdicts. It depends only on gymbench's core
(types, records, fingerprint, errors), never on the plugin manager or the other rooms. The names
below are imported on first use: the statistics pull in scipy, which ``gymbench --version`` must
not pay for.
"""

from __future__ import annotations

from gymbench.lazy import lazy_exports

_EXPORTS = {
    "BaselineStore": "gymbench.gate.store",
    "Selection": "gymbench.gate.store",
    "CompareSettings": "gymbench.gate.settings",
    "GateResult": "gymbench.gate.gate",
    "Outcome": "gymbench.gate.gate",
    "run_gate": "gymbench.gate.gate",
    "MetricComparison": "gymbench.gate.compare",
    "Shift": "gymbench.gate.compare",
    "SuiteComparison": "gymbench.gate.compare",
    "compare_runs": "gymbench.gate.compare",
    "MetricNoise": "gymbench.gate.noise",
    "NoiseTable": "gymbench.gate.noise",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
