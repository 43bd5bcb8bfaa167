"""gymbench: benchmark and regression harness for RL post-training of language models.

The public API is what this module re-exports; everything else is internal.
"""

from __future__ import annotations

from gymbench import start_guard as _start_guard

if _start_guard.started_as_the_command():  # before any other import: see gymbench.start_guard
    _start_guard.guard_start_up()

from gymbench.engine_metrics import EngineMetrics
from gymbench.errors import GymbenchError, PluginError, ResultsFileError, UnknownComponentError
from gymbench.hookspecs import hookimpl
from gymbench.measure import MeasureSettings, Recorder
from gymbench.record import BenchmarkResult, Metric, ResultsRecord, load_record, save_record
from gymbench.types import (
    Backend,
    Command,
    Component,
    ConcurrencyStrategy,
    Generation,
    GenerationFailed,
    GenerationRequest,
    RequestOutcome,
    RunInfo,
    TokenUsage,
    Verdict,
    Verifier,
)

__all__ = [
    "Backend",
    "BenchmarkResult",
    "Command",
    "Component",
    "ConcurrencyStrategy",
    "EngineMetrics",
    "Generation",
    "GenerationFailed",
    "GenerationRequest",
    "GymbenchError",
    "MeasureSettings",
    "Metric",
    "PluginError",
    "Recorder",
    "RequestOutcome",
    "ResultsFileError",
    "ResultsRecord",
    "RunInfo",
    "TokenUsage",
    "UnknownComponentError",
    "Verdict",
    "Verifier",
    "hookimpl",
    "load_record",
    "save_record",
]
