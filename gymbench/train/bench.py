"""A whole training-step benchmark: timing, FLOPs, memory, leak check, GPU samples, optional trace.

Used by ``gymbench train`` and by the pytest benchmarks, so both measure the same way and write
the same metrics into the results record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from gymbench.train.checkpointing import CheckpointPlan
from gymbench.train.config import TrainConfig
from gymbench.train.flops import FlopReport, count_flops, device_peak_flops
from gymbench.train.gpu_monitor import GpuMonitor, GpuReport
from gymbench.train.memory import LeakCheck, MemoryReport, check_leak, measure_step_memory
from gymbench.train.precision import LossScaling, cpu_precision_note
from gymbench.train.profiling import trace_one_step
from gymbench.train.runner import StepTimings, run_steps
from gymbench.train.session import ModelFactory, TrainSession
from gymbench.train.worker import WorkerJob, run_job
from gymbench.types import JSONObject

if TYPE_CHECKING:
    from gymbench.train.settings import TrainSettings

MiB = 1 << 20


@dataclass
class TrainReport:
    config: TrainConfig
    timings: StepTimings
    samples_per_step: int
    checkpointing: CheckpointPlan
    scaling: LossScaling
    leak: LeakCheck
    gpu: GpuReport
    lengths: str = ""
    """Where the sequence lengths came from (a distribution or a rollouts file)."""
    flops: FlopReport | None = None
    memory: MemoryReport | None = None
    peak_flops: float | None = None
    peak_source: str = ""
    trace: Path | None = None
    trace_table: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def median_step_s(self) -> float:
        return float(np.median(self.timings.step_s))

    @property
    def median_tokens_per_s(self) -> float:
        return float(np.median(self.timings.tokens_per_s))

    def model_flops_per_step(self) -> list[float]:
        return [self.flops.model_flops(count) for count in self.timings.counts] if self.flops else []

    @property
    def achieved_flops(self) -> float | None:
        """Median over steps of model FLOPs / step time (steps differ in shape with variable lengths)."""
        if self.flops is None:
            return None
        rates = [f / s for f, s in zip(self.model_flops_per_step(), self.timings.step_s, strict=True)]
        return float(np.median(rates))

    @property
    def mfu(self) -> float | None:
        if self.achieved_flops is None or self.peak_flops is None:
            return None
        return self.achieved_flops / self.peak_flops


def run_benchmark(factory: ModelFactory, config: TrainConfig, settings: TrainSettings) -> TrainReport:
    """One benchmark of the step ``config`` defines, measured as ``settings`` (``gymbench train``'s own:
    memory, flops, peak_tflops, leak_bound_mib_per_step, profile, progress) say."""
    session = TrainSession(factory, config)
    flops = count_flops(session, attention=True) if settings.flops else None
    with GpuMonitor.for_device(session.device) as monitor:
        timings = run_steps(session, progress=settings.progress)
    peak, source = device_peak_flops(session, settings.peak_tflops)
    report = TrainReport(
        config=config,
        timings=timings,
        samples_per_step=session.samples_per_step,
        checkpointing=session.checkpointing,
        scaling=session.precision.scaling,
        leak=check_leak(timings.memory_bytes, settings.leak_bound_mib_per_step * MiB, timings.memory_source),
        gpu=monitor.report,
        lengths=session.kind.lengths,
        flops=flops,
        peak_flops=peak,
        peak_source=source,
    )
    if settings.profile_trace:
        report.trace, report.trace_table = trace_one_step(session, settings.profile_trace)
    if settings.memory:
        report.memory = _memory_pass(session, factory, config)
    report.notes += [note for note in (session.checkpointing.note, cpu_precision_note(config, session.device)) if note]
    return report


def _memory_pass(session: TrainSession, factory: ModelFactory, config: TrainConfig) -> MemoryReport:
    if session.device.type == "cuda":
        return measure_step_memory(session)
    return MemoryReport.from_dict(run_job(WorkerJob("memory", factory, config)))


class MetricSink(Protocol):
    """What receives metrics: the ``gymbench`` fixture, or a ``Recorder`` in the CLI."""

    extra: dict[str, Any]

    def record(self, name: str, value: Any, unit: str, direction: Any) -> object: ...


def record_metrics(sink: MetricSink, report: TrainReport) -> None:
    timings = report.timings
    sink.record("step_time", timings.step_s, "s", "lower")
    sink.record("samples_per_s", [report.samples_per_step / s for s in timings.step_s], "samples/s", "higher")
    sink.record("tokens_per_s", timings.tokens_per_s, "tokens/s", "higher")
    if report.config.uses_sequences:
        sink.record("padding_share", timings.padding_share, "ratio", "lower")
    for phase, seconds in timings.phases_s.items():
        sink.record(f"phase_{phase}", seconds, "s", "lower")
    sink.record("memory_growth_per_step", report.leak.growth_per_step_bytes, "B/step", "lower")
    if report.scaling.enabled:
        sink.record("skipped_steps", report.scaling.skipped_steps, "steps", "lower")
    _record_flops_and_memory(sink, report)
    sink.extra.update(report_extra(report))


def _record_flops_and_memory(sink: MetricSink, report: TrainReport) -> None:
    if report.flops is not None and report.achieved_flops is not None:
        sink.record("model_flops_per_step", report.model_flops_per_step(), "FLOP", "lower")
        sink.record("achieved_tflops", report.achieved_flops / 1e12, "TFLOP/s", "higher")
    if report.mfu is not None:
        sink.record("mfu", report.mfu, "ratio", "higher")
    if report.memory is not None:
        sink.record("peak_memory", report.memory.peak_bytes, "B", "lower")
        sink.record("step_peak_memory", report.memory.step_peak_bytes, "B", "lower")
        sink.record("activation_memory", report.memory.activation_bytes, "B", "lower")


def report_extra(report: TrainReport) -> JSONObject:
    """Context that is not compared between runs but explains the figures."""
    q1, q3 = np.percentile(report.timings.step_s, [25, 75])
    extra: dict[str, Any] = {
        "config": report.config.to_dict(),
        "effective_lr": report.config.effective_lr,
        "step_time_iqr_s": float(q3 - q1),
        "checkpointed_blocks": report.checkpointing.wrapped,
        "blocks": report.checkpointing.total,
        "leak_check": report.leak.to_dict(),
        "gpu": report.gpu.to_dict(),
        "peak_flops": report.peak_flops,
        "peak_source": report.peak_source,
        "notes": report.notes,
    }
    if report.lengths:
        extra["lengths"] = report.lengths
        extra["padding_share"] = report.timings.padding_share
    if report.flops is not None:
        extra["flops"] = _flop_extra(report)
    if report.memory is not None:
        extra["memory"] = report.memory.to_dict()
    if report.scaling.enabled:
        extra["loss_scale"] = report.scaling.scales[-1] if report.scaling.scales else None
    return extra


def _flop_extra(report: TrainReport) -> JSONObject:
    flops = report.flops
    assert flops is not None
    counts = report.timings.counts
    return {
        "model_per_step_median": float(np.median(report.model_flops_per_step())),
        "hardware_per_step_median": float(np.median([flops.hardware_flops(c) for c in counts])),
        "rule": flops.rule,
        "ratio_to_rule": float(np.median([flops.ratio_to_rule(c) for c in counts])),
        "attention_counted": flops.attention_counted,
        "definition": "model FLOPs: real tokens, no recompute (PaLM's MFU); hardware: as run, pads included",
    }
