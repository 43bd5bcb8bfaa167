"""The tuner's outputs: the probe table, a markdown table for CI logs, a plot, a benchmark result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gymbench.curves import throughput_at
from gymbench.record import BenchmarkResult, Metric
from gymbench.tuning.diagnose import Diagnosis
from gymbench.tuning.sweep import TuneResult
from gymbench.units import duration


def markdown_table(result: TuneResult) -> str:
    lines = [
        "| parallelism | rollouts/s | output tokens/s | p50 latency | p99 latency | errors |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for probe in sorted(result.probes, key=lambda p: p.parallelism):
        lines.append(
            f"| {probe.parallelism} | {probe.rollouts_per_s:.2f} | {probe.output_tokens_per_s:.1f} | "
            f"{duration(probe.latency_p50_s)} | {duration(probe.latency_p99_s)} | {probe.error_rate:.1%} |"
        )
    return "\n".join(lines)


def summary_text(result: TuneResult) -> str:
    knee = result.knee
    lines = [
        f"method: {result.method}, {len(result.probes)} probes, {result.wall_s:.1f}s; stopped: {result.stop_reason}",
        f"knee: parallelism {knee.parallelism:.1f} (95% CI {knee.low:.1f}–{knee.high:.1f}), "
        f"plateau {knee.plateau:.2f} rollouts/s",
        f"recommended num_samples_in_parallel={result.recommended} ({result.recommended / knee.parallelism:.0%} of "
        f"the knee), expected {result.expected_rollouts_per_s:.2f} rollouts/s",
    ]
    if result.stability is not None:
        s = result.stability
        verdict = "PASSED" if s.passed else "FAILED: " + "; ".join(s.reasons)
        lines.append(
            f"stability at {s.parallelism} over {s.rollouts} rollouts: {s.rollouts_per_s:.2f}/s, errors "
            f"{s.error_rate:.1%}: {verdict}"
        )
    return "\n".join(lines)


def diagnosis_text(diagnosis: Diagnosis) -> str:
    lines = [f"verdict: {diagnosis.verdict}", f"next step: {diagnosis.next_step}", "evidence:"]
    lines += [f"  - {item}" for item in diagnosis.evidence]
    lines.append("symptoms:")
    lines += [f"  - {item}" for item in diagnosis.symptoms] or ["  - none seen"]
    return "\n".join(lines)


def diagnosis_markdown(diagnosis: Diagnosis) -> str:
    rows = "\n".join(f"| {item} |" for item in diagnosis.evidence + diagnosis.symptoms)
    return f"**Bottleneck: {diagnosis.verdict}** — {diagnosis.next_step}\n\n| evidence |\n|---|\n{rows}"


def plot(result: TuneResult, path: Path) -> Path:
    """Throughput and p99 latency against parallelism, with the knee and the recommendation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    probes = sorted(result.probes, key=lambda p: p.parallelism)
    ps = [p.parallelism for p in probes]
    figure, left = plt.subplots(figsize=(8, 4.5))
    left.plot(ps, [p.rollouts_per_s for p in probes], "o-", color="tab:blue", label="rollouts/s")
    left.set_xscale("log", base=2)
    left.set_xlabel("num_samples_in_parallel")
    left.set_ylabel("rollouts/s", color="tab:blue")
    knee = result.knee
    left.axvspan(knee.low, knee.high, color="tab:orange", alpha=0.15, label="knee 95% CI")
    left.axvline(knee.parallelism, color="tab:orange", label=f"knee {knee.parallelism:.0f}")
    left.plot([result.recommended], [result.expected_rollouts_per_s], "*", color="tab:green", markersize=16,
              label=f"recommended {result.recommended}")  # fmt: skip
    right = left.twinx()
    latencies = [(p.parallelism, p.latency_p99_s) for p in probes if p.latency_p99_s is not None]
    if latencies:
        right.plot(*zip(*latencies, strict=True), "s--", color="tab:red", label="p99 latency")
        right.set_ylabel("p99 latency (s)", color="tab:red")
    handles = left.get_legend_handles_labels()
    extra = right.get_legend_handles_labels()
    left.legend(handles[0] + extra[0], handles[1] + extra[1], loc="lower right", fontsize=8)
    left.set_title(f"gymbench tune ({result.method}): knee and recommendation")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def tune_result(result: TuneResult, params: dict[str, Any]) -> BenchmarkResult:
    means = {p: sum(v) / len(v) for p, v in result.measured.items()}
    metrics = {
        "knee_parallelism": Metric(result.knee.parallelism, "parallelism", "higher"),
        "plateau_rollouts_per_s": Metric(result.knee.plateau, "rollouts/s", "higher"),
        "recommended_parallelism": Metric(float(result.recommended), "parallelism", "higher"),
        "expected_rollouts_per_s": Metric(
            throughput_at(means, result.recommended)
            if result.recommended >= min(means)
            else result.expected_rollouts_per_s,
            "rollouts/s",
            "higher",
        ),
        "wall_time": Metric(result.wall_s, "s", "lower"),
    }
    extra = {
        "table": [p.row() for p in result.probes],
        "stop_reason": result.stop_reason,
        "knee_ci": [result.knee.low, result.knee.high],
    }
    return BenchmarkResult(name="tune", params={**params, "method": result.method}, metrics=metrics, extra=extra)


def diagnose_result(diagnosis: Diagnosis, params: dict[str, Any]) -> BenchmarkResult:
    """The diagnosis as a benchmark result: both probes' figures, the verdict in ``extra``."""
    metrics = {}
    for label, probe in (("low", diagnosis.low), ("high", diagnosis.high)):
        metrics[f"{label}_rollouts_per_s"] = Metric(probe.rollouts_per_s, "rollouts/s", "higher")
        if probe.latency_p50_s is not None:
            metrics[f"{label}_latency_p50"] = Metric(probe.latency_p50_s, "s", "lower")
    metrics["gain"] = Metric(diagnosis.gain, "ratio", "higher")
    extra = {"verdict": diagnosis.verdict, "evidence": diagnosis.evidence, "symptoms": diagnosis.symptoms}
    params = {**params, "low": diagnosis.low.parallelism, "high": diagnosis.high.parallelism}
    return BenchmarkResult(name="diagnose", params=params, metrics=metrics, extra=extra)
