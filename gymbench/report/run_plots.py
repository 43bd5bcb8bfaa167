"""Figures of one run (a collection or a tuning sweep), from its results record alone.

Axis limits come from the data (matplotlib's autoscale over every point drawn) and durations are
plotted in the unit they read best in, so no point is cut and no label reads ``1e-06``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gymbench.report.plots import pyplot, to_base64_png
from gymbench.units import number, time_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure


LATENCY_LABELS = {"ttft": "TTFT", "ttst": "TTST", "itl": "ITL", "tpot": "TPOT", "e2e": "e2e"}


def over_time_figure(timeline: Mapping[str, Any]) -> Figure:
    """Rollouts/s, output tokens/s and the mean e2e latency per time bucket, one panel each."""
    plt = pyplot()
    starts = timeline["start_s"]
    figure, (rate, tokens, latency) = plt.subplots(3, 1, figsize=(9, 6), sharex=True)
    rate.step(starts, timeline["rollouts_per_s"], where="post", color="tab:blue")
    rate.set_ylabel("rollouts/s")
    tokens.step(starts, timeline["output_tokens_per_s"], where="post", color="tab:green")
    tokens.set_ylabel("output tokens/s")
    points = [(t, v) for t, v in zip(starts, timeline["mean_e2e_s"], strict=True) if v is not None]
    scale, unit = time_axis([v for _, v in points])
    if points:
        latency.plot([t for t, _ in points], [v / scale for _, v in points], "o-", markersize=2, color="tab:red")
    latency.set_ylabel(f"mean e2e ({unit})")
    latency.set_xlabel(f"seconds into the run (buckets of {timeline['bucket_s']:g} s)")
    for axes in (rate, tokens):
        axes.set_ylim(bottom=0)
    rate.set_title("throughput and latency over time")
    figure.tight_layout()
    return figure


def stage_figure(stage_mean_s: Mapping[str, float | None]) -> Figure:
    """Where a rollout's time goes: the mean of each stage, in one unit."""
    plt = pyplot()
    stages = [(name, value) for name, value in stage_mean_s.items() if value is not None and name != "total"]
    scale, unit = time_axis([v for _, v in stages])
    figure, axes = plt.subplots(figsize=(8, 0.4 * len(stages) + 1.2))
    axes.barh([name for name, _ in stages], [v / scale for _, v in stages], color="tab:blue")
    for y, (_, value) in enumerate(stages):
        axes.annotate(number(value / scale, 3), (value / scale, y), xytext=(3, 0), textcoords="offset points",
                      va="center", fontsize=7)  # fmt: skip
    axes.invert_yaxis()
    axes.margins(x=0.15)
    axes.set_xlabel(f"mean per rollout ({unit})")
    axes.set_title("stage breakdown")
    figure.tight_layout()
    return figure


def percentile_figure(tables: Mapping[str, Mapping[str, Any]]) -> Figure:
    """Each latency's p50..p99 with its 95% interval; a hollow marker where the sample was too small."""
    plt = pyplot()
    columns = min(len(tables), 3)  # five latencies in one row would make a strip too thin to read
    rows = -(-len(tables) // columns)
    figure, grid = plt.subplots(rows, columns, figsize=(3.0 * columns, 2.8 * rows), squeeze=False)
    for axes in list(grid.flat)[len(tables) :]:
        axes.set_visible(False)
    for axes, (name, table) in zip(grid.flat, tables.items(), strict=False):
        found = [(key, table[key]) for key in table if key.startswith("p") and table[key] is not None]
        scale, unit = time_axis([p["value"] for _, p in found])
        for x, (_, p) in enumerate(found):
            if p["small_sample"]:
                axes.plot([x], [p["value"] / scale], "o", mfc="none", color="tab:orange")
                continue
            low, high = p["low"] / scale, p["high"] / scale
            axes.errorbar([x], [p["value"] / scale], yerr=[[p["value"] / scale - low], [high - p["value"] / scale]],
                          fmt="o", color="tab:blue", capsize=3)  # fmt: skip
        axes.set_xticks(range(len(found)), [key for key, _ in found], fontsize=7)
        axes.set_title(f"{LATENCY_LABELS.get(name, name)} (n={table['count']})", fontsize=8)
        axes.set_ylabel(unit, fontsize=7)
        axes.tick_params(axis="y", labelsize=7)
    figure.tight_layout()
    return figure


def server_figure(over_time: Sequence[Mapping[str, float | None]]) -> Figure:
    """The server's queue (running, waiting) and KV-cache use through the run, from its /metrics."""
    plt = pyplot()
    figure, queue = plt.subplots(figsize=(9, 3.4), layout="constrained")
    times = [s["t_s"] for s in over_time]
    for key, colour in (("running", "tab:blue"), ("waiting", "tab:orange")):
        queue.plot(times, [s.get(key) for s in over_time], color=colour, label=f"requests {key}")
    queue.set_ylabel("requests")
    queue.set_xlabel("seconds into the run")
    queue.set_ylim(bottom=0)
    used = [100 * (s.get("kv_cache") or 0.0) for s in over_time]
    shown = [queue]
    if any(used):
        kv = queue.twinx()
        kv.plot(times, used, ":", color="tab:purple", label="KV-cache %")
        kv.set_ylabel("KV-cache use (%)")
        kv.set_ylim(0, min(100.0, max(1.0, 1.2 * max(used))))  # at least 0–1 %: a trace of use stays a trace
        shown.append(kv)
    handles = [h for axes in shown for h in axes.get_legend_handles_labels()[0]]
    figure.legend(handles, [str(h.get_label()) for h in handles], fontsize=7, loc="outside lower center", ncols=3)
    # an axis from 0 to 0.05 % under a flat zero line said nothing: say there was no data instead
    note = "" if any(used) else "; no KV-cache data (the server reported none or 0 %)"
    queue.set_title(f"the server's view (its /metrics){note}")
    return figure


def tune_figure(table: Sequence[Mapping[str, Any]], knee_ci: Sequence[float] | None) -> Figure:
    """Throughput and p99 latency against parallelism, the knee's interval shaded."""
    plt = pyplot()
    probes = sorted(table, key=lambda row: row["parallelism"])
    figure, left = plt.subplots(figsize=(8, 4))
    left.plot([p["parallelism"] for p in probes], [p["rollouts_per_s"] for p in probes], "o-", label="rollouts/s")
    left.set_xscale("log", base=2)
    left.set_xlabel("num_samples_in_parallel")
    left.set_ylabel("rollouts/s")
    if knee_ci:
        left.axvspan(*knee_ci, color="tab:orange", alpha=0.15, label="knee 95% CI")
    latencies = [(p["parallelism"], p["latency_p99_s"]) for p in probes if p["latency_p99_s"] is not None]
    scale, unit = time_axis([v for _, v in latencies])
    right = left.twinx()
    if latencies:
        right.plot([p for p, _ in latencies], [v / scale for _, v in latencies], "s--", color="tab:red",
                   label="p99 latency")  # fmt: skip
    right.set_ylabel(f"p99 latency ({unit})", color="tab:red")
    handles = [h for axes in (left, right) for h in axes.get_legend_handles_labels()[0]]
    left.legend(handles, [str(h.get_label()) for h in handles], fontsize=7, loc="lower right")
    figure.tight_layout()
    return figure


def png(figure: Figure) -> str:
    return to_base64_png(figure)
