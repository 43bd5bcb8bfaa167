"""The tuner's outputs: the probe table, a markdown table for CI logs, a plot, a benchmark result."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gymbench.collect.summary import replica_lines
from gymbench.jsonio import AtomicFile
from gymbench.record import BenchmarkResult, Metric
from gymbench.tune.diagnose import Diagnosis
from gymbench.tune.probe import ProbeResult
from gymbench.tune.server_load import ServerLoad
from gymbench.tune.sweep import TuneResult
from gymbench.units import duration

SOURCES = {"server counters": "server", "client completions": "client"}


def _flags(probe: ProbeResult) -> str:
    flags = []
    if probe.rate_limited:
        flags.append("429s")
    if probe.rate.under_measured:
        flags.append("under-measured")
    return ", ".join(flags)


def markdown_table(result: TuneResult) -> str:
    """Every probe (or level) in the order measured, with its rate's 95% interval and its source."""
    header = "| parallelism | rollouts/s | 95% CI | read from | output tokens/s | p50 latency | p99 latency |"
    lines = [header + " errors | flags |", "|---:|---:|---:|---|---:|---:|---:|---:|---|"]
    for probe in result.probes:
        rate = probe.rate
        lines.append(
            f"| {probe.parallelism} | {rate.value:.3g} | {rate.low:.3g}–{rate.high:.3g} | "
            f"{SOURCES.get(rate.source, rate.source)} | {probe.output_tokens_per_s:.1f} | "
            f"{duration(probe.latency_p50_s)} | {duration(probe.latency_p99_s)} | {probe.error_rate:.1%} | "
            f"{_flags(probe)} |"
        )
    return "\n".join(lines)


def _knee_text(result: TuneResult) -> str:
    """The knee as a point with its interval, or as a range when the interval holds two levels or
    more besides the two around the knee it may have been widened to (:func:`within_the_levels`
    in :mod:`gymbench.tune.curves`; then the output says no level was measured between them): then
    the levels inside it read within each other's noise (the machine's drift, once the
    second pass has merged it in), measuring more often would not tell them apart, and a point
    would claim what the measurements do not show."""
    knee = result.knee
    ends = knee.between or ()
    inside = sorted(p for p in result.curve if knee.low <= p <= knee.high and p not in ends)
    if len(inside) < 2:
        said = f"parallelism {knee.parallelism:.1f} (95% CI {knee.low:.1f}–{knee.high:.1f}"
        if knee.between is None:
            return said + ")"
        low, high = knee.between
        return said + f": no level measured between {low} and {high}, where the curve's shape is not known)"
    return (
        f"a range, parallelism {knee.low:.1f}–{knee.high:.1f} (95% CI; point estimate {knee.parallelism:.1f}): the "
        f"levels measured in it ({', '.join(map(str, inside))}) read within each other's noise, so no level between "
        "them is known to be the knee"
    )


def summary_text(result: TuneResult) -> str:
    knee = result.knee
    spread = _plateau_spread(result)
    lines = [f"PARTIAL: {result.partial} before the search ended; read from the levels measured so far"]
    lines = lines if result.partial else []
    lines += [
        f"method: {result.method}, {len({p.parallelism for p in result.probes})} levels in "
        f"{len(result.probes)} measurements, {result.wall_s:.1f}s; "
        f"stopped: {result.stop_reason}",
        f"knee: {_knee_text(result)}, the smallest reaching 97% of the plateau; plateau {knee.plateau:.3g} "
        f"rollouts/s (±{spread:.1%}), highest at {knee.peak_parallelism}",
        f"recommended num_samples_in_parallel={result.recommended}: expected {result.expected_rollouts_per_s:.3g} "
        f"rollouts/s, {result.expected_share:.1%} of the plateau; {_latency_there(result)}",
        *([f"why: {result.search.recommendation.why}"] if result.search.recommendation.why else []),
        f"ceiling: {_ceiling(result)}",
        f"throughput read from {_sources(result)}; {_per_rollout(result)}",
    ]
    if result.replicas > 1:
        lines.append(per_replica_text(result))
    if result.objective_said:
        lines.append(result.objective_said)
    if result.first_pass is not None:
        once = result.first_pass.knee
        lines.append(
            f"first pass alone: knee {once.parallelism:.1f} (95% CI {once.low:.1f}–{once.high:.1f}), "
            f"recommended {result.first_pass.recommendation.parallelism}"
        )
    if result.capacity:
        lines.append(f"capacity signals: {'; '.join(result.capacity)}")
    if result.server is not None:
        lines.append(f"server counters: {server_counters_text(result.server)}")
    lines += [f"note: {note}" for note in result.notes]
    if result.stability is not None:
        s = result.stability
        verdict = "PASSED" if s.passed else "FAILED: " + "; ".join(s.reasons)
        lines.append(
            f"stability at {s.parallelism} over {s.rollouts} rollouts: {s.rollouts_per_s:.3g}/s, errors "
            f"{s.error_rate:.1%}: {verdict}"
        )
    return "\n".join(lines)


def per_replica_text(result: TuneResult) -> str:
    """The knee and the recommendation over several replicas: the collector's setting is the total
    (``num_samples_in_parallel``), what each replica sees is that over the replicas (evenly under
    round-robin and least-in-flight; sticky routing spreads rollouts, not requests)."""
    n, knee = result.replicas, result.knee
    return (
        f"over {n} replicas: the knee and the recommendation are totals; per replica the knee is "
        f"{knee.parallelism / n:.1f} (95% CI {knee.low / n:.1f}–{knee.high / n:.1f}) and the recommendation "
        f"{result.recommended / n:.1f} in flight, at {result.expected_rollouts_per_s / n:.3g} rollouts/s each"
    )


def _latency_there(result: TuneResult) -> str:
    """The p50 latency at the recommendation beside the plateau's (its highest level): what the
    throughput given up (if any) buys."""
    here, top = result.recommended, result.knee.peak_parallelism
    at_here, at_top = result.p50_at(here), result.p50_at(top)
    said = f"p50 latency {duration(at_here)} there" if at_here is not None else f"p50 latency not measured at {here}"
    if top != here and at_top is not None:
        said += f", {duration(at_top)} at {top} (the plateau's highest level)"
    return said


def server_counters_text(server: dict[str, object]) -> str:
    """Which engine's /metrics the probe read, and what it read there (or why it read nothing)."""
    if server.get("engine") is None:
        return f"none read: {server.get('engine_note')}"
    reads = server.get("reads")
    said = "; ".join(f"{key}: {value}" for key, value in reads.items()) if isinstance(reads, dict) else ""
    return f"engine {server['engine']}" + (f" ({said})" if said else "")


def _plateau_spread(result: TuneResult) -> float:
    """The plateau's relative 95% half-width, with the work-per-rollout's uncertainty in it."""
    knee = result.search.knee
    own = knee.plateau_half_width / knee.plateau if knee.plateau > 0 else 0.0
    return (own**2 + (1.96 * result.per_rollout_relative_se) ** 2) ** 0.5


def _ceiling(result: TuneResult) -> str:
    if result.search.ceiling == "rate limit":
        return "the server's rate limit (429s), not the parallelism: the plateau is its sustained rate"
    if result.search.ceiling == "errors":
        return "errors above the max_error_rate bound; the knee is among the levels below them"
    return "the server's capacity (throughput stops growing with parallelism)"


def _sources(result: TuneResult) -> str:
    counts: dict[str, int] = {}
    for probe in result.probes:
        counts[probe.rate.source] = counts.get(probe.rate.source, 0) + 1
    return ", ".join(f"{source} ({n} of {len(result.probes)})" for source, n in counts.items())


def _per_rollout(result: TuneResult) -> str:
    if result.probes and result.probes[0].work_unit == "tokens":
        return (f"rollouts/s = output tokens/s ÷ {result.per_rollout:.4g} tokens per rollout "
                f"(±{1.96 * result.per_rollout_relative_se:.1%})")  # fmt: skip
    return "the backend reports no tokens: rollouts/s counted directly"


def diagnosis_text(diagnosis: Diagnosis) -> str:
    which = ""
    if diagnosis.verdict == "slow replica" and diagnosis.replicas is not None:
        which = f": {diagnosis.replicas['straggler']} ({diagnosis.replicas['straggler_reason']})"
    lines = [f"verdict: {diagnosis.verdict}{which}", f"next step: {diagnosis.next_step}", "evidence:"]
    lines += [f"  - {item}" for item in diagnosis.evidence]
    if diagnosis.replicas is not None and len(diagnosis.replicas["replicas"]) > 1:
        lines += ["  " + line for line in replica_lines(diagnosis.replicas)[1:]]
    lines.append("symptoms:")
    lines += [f"  - {item}" for item in diagnosis.symptoms] or ["  - none seen"]
    return "\n".join(lines)


def diagnosis_markdown(diagnosis: Diagnosis) -> str:
    rows = "\n".join(f"| {item} |" for item in diagnosis.evidence + diagnosis.symptoms)
    return f"**Bottleneck: {diagnosis.verdict}** — {diagnosis.next_step}\n\n| evidence |\n|---|\n{rows}"


def plot(result: TuneResult, path: Path) -> Path:
    """Throughput (with 95% intervals) and p99 latency against parallelism, the knee and the recommendation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = result.curve
    ps = sorted(curve)
    figure, left = plt.subplots(figsize=(8, 4.5))
    values = [curve[p].value for p in ps]
    errors = [curve[p].half_width if curve[p].half_width < float("inf") else 0.0 for p in ps]
    left.errorbar(ps, values, yerr=errors, fmt="o-", color="tab:blue", capsize=3, label="rollouts/s (95% CI)")
    left.set_xscale("log", base=2)
    left.set_xlabel("num_samples_in_parallel")
    left.set_ylabel("rollouts/s", color="tab:blue")
    knee = result.knee
    left.axhline(0.97 * knee.plateau, color="tab:gray", linestyle=":", label="97% of the plateau")
    left.axvspan(knee.low, knee.high, color="tab:orange", alpha=0.15, label="knee 95% CI")
    left.axvline(knee.parallelism, color="tab:orange", label=f"knee {knee.parallelism:.1f}")
    left.plot([result.recommended], [result.expected_rollouts_per_s], "*", color="tab:green", markersize=16,
              label=f"recommended {result.recommended} ({result.expected_share:.0%})")  # fmt: skip
    right = left.twinx()
    latencies = sorted((p.parallelism, p.latency_p99_s) for p in result.probes if p.latency_p99_s is not None)
    if latencies:
        right.plot(*zip(*latencies, strict=True), "s--", color="tab:red", label="p99 latency")
        right.set_ylabel("p99 latency (s)", color="tab:red")
    handles = left.get_legend_handles_labels()
    extra = right.get_legend_handles_labels()
    left.legend(handles[0] + extra[0], handles[1] + extra[1], loc="lower right", fontsize=8)
    left.set_title(f"gymbench tune ({result.method}): knee and recommendation")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    # Rendered in memory, then written whole: a full disk leaves no half a PNG (and no traceback).
    with AtomicFile(path, then="; choose another +plot (or +plot= for none)") as out:
        out.write(buffer.getvalue())
    return path


def tune_result(result: TuneResult, params: dict[str, Any]) -> BenchmarkResult:
    knee = result.knee
    metrics = {
        "knee_parallelism": Metric(knee.parallelism, "parallelism", "higher"),
        "plateau_rollouts_per_s": Metric(knee.plateau, "rollouts/s", "higher"),
        "recommended_parallelism": Metric(float(result.recommended), "parallelism", "higher"),
        "expected_rollouts_per_s": Metric(result.expected_rollouts_per_s, "rollouts/s", "higher"),
        "expected_share_of_plateau": Metric(result.expected_share, "ratio", "higher"),
        **_latency_metrics(result),
        "wall_time": Metric(result.wall_s, "s", "lower"),
    }
    extra = {
        "table": [p.row() for p in result.probes],
        "stop_reason": result.stop_reason,
        "ceiling": result.search.ceiling,
        "knee_ci": [knee.low, knee.high],
        "per_rollout": {"work": result.per_rollout, "relative_se": result.per_rollout_relative_se},
        "steps": [{"parallelism": s.parallelism, "why": s.why} for s in result.steps],
        "notes": result.notes,
    }
    if result.objective_said:
        extra["latency_objective"] = result.objective_said
    if result.partial:
        extra["partial"] = result.partial
    if result.capacity:
        extra["capacity_signals"] = result.capacity
    if result.replicas > 1:
        knee = result.knee
        extra["per_replica"] = {
            "replicas": result.replicas, "knee": knee.parallelism / result.replicas,
            "knee_ci": [knee.low / result.replicas, knee.high / result.replicas],
            "recommended": result.recommended / result.replicas,
        }  # fmt: skip
    if result.server is not None:
        extra["server_counters"] = result.server
    return BenchmarkResult(name="tune", params={**params, "method": result.method}, metrics=metrics, extra=extra)


def _latency_metrics(result: TuneResult) -> dict[str, Metric]:
    latencies = {"recommended_latency_p50": result.p50_at(result.recommended),
                 "plateau_latency_p50": result.p50_at(result.knee.peak_parallelism)}  # fmt: skip
    return {name: Metric(value, "s", "lower") for name, value in latencies.items() if value is not None}


def diagnose_result(diagnosis: Diagnosis, params: dict[str, Any]) -> BenchmarkResult:
    """The diagnosis as a benchmark result: both probes' figures, the verdict in ``extra``."""
    metrics = {}
    for label, probe in (("low", diagnosis.low), ("high", diagnosis.high)):
        metrics[f"{label}_rollouts_per_s"] = Metric(probe.rollouts_per_s, "rollouts/s", "higher")
        if probe.latency_p50_s is not None:
            metrics[f"{label}_latency_p50"] = Metric(probe.latency_p50_s, "s", "lower")
    metrics["gain"] = Metric(diagnosis.gain, "ratio", "higher")
    metrics.update(server_cpu_metrics(diagnosis.servers))
    extra: dict[str, Any] = {
        "verdict": diagnosis.verdict,
        "next_step": diagnosis.next_step,  # the run report's answer: what to do about the verdict
        "evidence": diagnosis.evidence,
        "symptoms": diagnosis.symptoms,
    }
    if diagnosis.server is not None:
        extra["server_counters"] = diagnosis.server
    if diagnosis.servers:
        extra["servers"] = [server_load_record(load) for load in diagnosis.servers]
    if diagnosis.replicas is not None:
        extra["replicas"] = diagnosis.replicas
    params = {**params, "low": diagnosis.low.parallelism, "high": diagnosis.high.parallelism}
    return BenchmarkResult(name="diagnose", params=params, metrics=metrics, extra=extra)


def server_cpu_metrics(loads: Sequence[ServerLoad]) -> dict[str, Metric]:
    """Each seen server's CPU per rollout as a metric, ``cpu_ms_per_rollout[<server name>]``: so
    ``gymbench compare`` sets two NeMo Gym versions, or two commits of a resources server, side by
    side per server, and gates a server that got costlier like any other metric (3+ runs a side)."""
    return {
        f"cpu_ms_per_rollout[{load.server.name}]": Metric(load.cpu_ms_per_rollout, "ms", "lower")
        for load in loads
        if load.cpu_ms_per_rollout is not None
    }


def server_load_record(load: ServerLoad) -> dict[str, Any]:
    server = load.server
    return {
        "name": server.name, "role": server.role, "host": server.host, "port": server.port, "pid": server.pid,
        "cpu_s": load.cpu_s, "cpu_ms_per_rollout": load.cpu_ms_per_rollout, "core_share": load.core_share,
        "unseen": load.unseen,
    }  # fmt: skip
