"""Figures of one run (a collection or a tuning sweep), from its results record alone.

Axis limits come from the data (matplotlib's autoscale over every point drawn) and durations are
plotted in the unit they read best in, so no point is cut and no label reads ``1e-06``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gymbench.report.plots import pyplot, to_base64_png
from gymbench.units import duration, time_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure


LATENCY_LABELS = {"ttft": "TTFT", "ttst": "TTST", "itl": "ITL", "tpot": "TPOT", "e2e": "e2e"}


def over_time_figure(timeline: Mapping[str, Any]) -> Figure:
    """Rollouts/s, output tokens/s and the mean e2e latency per time bucket, one panel each."""
    plt = pyplot()
    starts = timeline["start_s"]
    figure, (rate, tokens, latency) = plt.subplots(3, 1, figsize=(9, 6), sharex=True)
    width = timeline["bucket_s"]  # one bar per bucket: a step line hid the last bucket in a vertical stroke
    rate.bar(starts, timeline["rollouts_per_s"], width=width, align="edge", color="tab:blue", edgecolor="white")
    rate.set_ylabel("rollouts/s")
    tokens.bar(starts, timeline["output_tokens_per_s"], width=width, align="edge", color="tab:green",
               edgecolor="white")  # fmt: skip
    tokens.set_ylabel("output tokens/s")
    points = [(t, v) for t, v in zip(starts, timeline["mean_e2e_s"], strict=True) if v is not None]
    scale, unit = time_axis([v for _, v in points])
    if points:
        middles = [t + width / 2 for t, _ in points]
        latency.plot(middles, [v / scale for _, v in points], "o-", markersize=3, color="tab:red")
    plain_axis(latency.yaxis)
    latency.set_ylabel(f"mean e2e ({unit})")
    latency.set_xlabel(f"seconds into the run (buckets of {timeline['bucket_s']:g} s)")
    for axes in (rate, tokens):
        axes.set_ylim(bottom=0)
    rate.set_title("throughput and latency over time")
    figure.tight_layout()
    return figure


def bar_figure(values_s: Mapping[str, float | None], title: str, measure: str) -> Figure:
    """Durations as bars in one unit, the largest bar's (an axis from 0 to the largest reads in its
    unit; the median's put 1.17 s bars on a µs axis), each bar labelled with its own duration."""
    plt = pyplot()
    bars = [(name, value) for name, value in values_s.items() if value is not None]
    scale, unit = time_axis([max((v for _, v in bars), default=1.0)])
    figure, axes = plt.subplots(figsize=(9, 0.45 * len(bars) + 1.4))
    axes.barh([name for name, _ in bars], [v / scale for _, v in bars], color="tab:blue")
    for y, (_, value) in enumerate(bars):
        axes.annotate(duration(value), (value / scale, y), xytext=(4, 0), textcoords="offset points",
                      va="center", fontsize=9)  # fmt: skip
    axes.invert_yaxis()
    axes.margins(x=0.18)
    plain_axis(axes.xaxis)
    axes.set_xlabel(f"{measure} ({unit})")
    axes.set_title(title)
    figure.tight_layout()
    return figure


def replica_figure(found: Mapping[str, Any]) -> Figure:
    """Each replica's completions per second and its p50 latency side by side, the straggler in red:
    a replica out of line shows as the one bar that differs."""
    plt = pyplot()
    replicas = found["replicas"]
    names = [r["url"] + (" (out)" if r["out"] else "") for r in replicas]
    colours = ["tab:red" if r["url"] == found.get("straggler") else "tab:blue" for r in replicas]
    figure, (rate, latency) = plt.subplots(1, 2, figsize=(10, 0.45 * len(replicas) + 1.6), sharey=True)
    rate.barh(names, [r["completed_per_s"] for r in replicas], color=colours)
    rate.set_xlabel("completed/s")
    rate.set_title("throughput per replica")
    p50 = [r["latency_p50_s"] or 0.0 for r in replicas]
    scale, unit = time_axis([max(p50, default=1.0) or 1.0])
    latency.barh(names, [v / scale for v in p50], color=colours)
    for y, value in enumerate(p50):
        latency.annotate(duration(value), (value / scale, y), xytext=(4, 0), textcoords="offset points",
                         va="center", fontsize=9)  # fmt: skip
    latency.margins(x=0.18)
    latency.set_xlabel(f"p50 latency ({unit})")
    latency.set_title("latency per replica" + (" (straggler in red)" if found.get("straggler") else ""))
    rate.invert_yaxis()
    figure.tight_layout()
    return figure


def diagnose_figure(
    parallelism: tuple[int, int], rates: tuple[float, float], latencies_s: tuple[float | None, float | None]
) -> Figure:
    """diagnose's two probes side by side: throughput against what perfect scaling from the low
    level would give (the gap is the verdict's evidence), and the median latency at each."""
    plt = pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    labels = [f"parallelism {p}" for p in parallelism]
    left.bar(labels, rates, color="tab:blue", label="measured")
    ideal = rates[0] * parallelism[1] / parallelism[0]
    left.hlines(ideal, 0.6, 1.4, colors="tab:red", linestyles="--", label=f"perfect scaling from {parallelism[0]}")
    left.set_ylim(0, max(ideal, *rates) * 1.18)
    for x, rate in enumerate(rates):
        left.annotate(f"{rate:.3g}", (x, rate), xytext=(0, 3), textcoords="offset points", ha="center", fontsize=9)
    left.set_ylabel("rollouts/s")
    left.set_title("throughput")
    left.legend(loc="upper left", fontsize=8)
    plain_axis(left.yaxis)
    known = [(name, value) for name, value in zip(labels, latencies_s, strict=True) if value is not None]
    scale, unit = time_axis([value for _, value in known] or [1.0])
    right.bar([name for name, _ in known], [value / scale for _, value in known], color="tab:gray")
    for x, (_, value) in enumerate(known):
        right.annotate(duration(value), (x, value / scale), xytext=(0, 3), textcoords="offset points",
                       ha="center", fontsize=9)  # fmt: skip
    right.set_ylabel(f"latency p50 ({unit})")
    right.set_title("median latency")
    plain_axis(right.yaxis)
    figure.tight_layout()
    return figure


def step_time_figure(steps_s: Sequence[float]) -> Figure:
    """Each timed step's duration in order (warm-up excluded), its median dashed: drift and outliers show."""
    plt = pyplot()
    scale, unit = time_axis(list(steps_s))
    figure, axes = plt.subplots(figsize=(9, 3.2))
    steps = range(1, len(steps_s) + 1)
    axes.plot(steps, [v / scale for v in steps_s], "o-", color="tab:blue", label="step time")
    middle = sorted(steps_s)[len(steps_s) // 2] / scale
    axes.axhline(middle, color="tab:gray", linestyle="--", label="median")
    axes.set_ylim(bottom=0)
    plain_axis(axes.yaxis)
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("timed step (warm-up excluded)")
    axes.set_ylabel(f"step time ({unit})")
    axes.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    return figure


def percentile_figure(tables: Mapping[str, Mapping[str, Any]]) -> Figure:
    """Each latency's p50..p99 with its 95% interval; a hollow marker where the sample was too small.

    One panel per latency (their scales differ: TPOT in ms beside e2e in s), two to a row, each
    large enough to read, axes labelled with what and which unit."""
    plt = pyplot()
    columns = min(len(tables), 2)
    rows = -(-len(tables) // columns)
    figure, grid = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.6 * rows), squeeze=False)
    for axes in list(grid.flat)[len(tables) :]:
        axes.set_visible(False)
    for axes, (name, table) in zip(grid.flat, tables.items(), strict=False):
        percentile_panel(axes, name, table)
    figure.tight_layout()
    return figure


def percentile_panel(axes: Any, name: str, table: Mapping[str, Any]) -> None:
    found = [(key, table[key]) for key in table if key.startswith("p") and table[key] is not None]
    scale, unit = time_axis([p["value"] for _, p in found])
    for x, (_, p) in enumerate(found):
        if p["small_sample"] or p.get("low") is None or p.get("high") is None:
            axes.plot([x], [p["value"] / scale], "o", mfc="none", color="tab:orange")
            continue
        low, high, value = p["low"] / scale, p["high"] / scale, p["value"] / scale
        axes.errorbar([x], [value], yerr=[[value - low], [high - value]], fmt="o", color="tab:blue", capsize=4)
    axes.set_xticks(range(len(found)), [key for key, _ in found])
    axes.set_xlim(-0.5, len(found) - 0.5)
    plain_axis(axes.yaxis)
    title = LATENCY_LABELS.get(name, name)
    axes.set_title(f"{title} (n={table['count']})")
    axes.set_xlabel("percentile (bars: 95% interval; hollow: too few for one)", fontsize=8)
    axes.set_ylabel(f"{title} ({unit})")


def plain_axis(axis: Any) -> None:
    """Tick labels as plain numbers: no ``1e6`` multiplier or ``+1.2`` offset above the axis."""
    formatter = axis.get_major_formatter()
    if hasattr(formatter, "set_useOffset"):
        formatter.set_useOffset(False)
        formatter.set_scientific(False)


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


def tune_figure(
    table: Sequence[Mapping[str, Any]], knee_ci: Sequence[float] | None, recommended: float | None = None
) -> Figure:
    """Throughput (with its 95% intervals) and p99 latency against parallelism, the knee's interval
    shaded and the recommendation marked."""
    plt = pyplot()
    probes = sorted(table, key=lambda row: row["parallelism"])
    figure, left = plt.subplots(figsize=(9, 4.8), layout="constrained")
    xs = [p["parallelism"] for p in probes]
    ys = [p["rollouts_per_s"] for p in probes]
    cis = [p.get("rollouts_per_s_ci") or [y, y] for p, y in zip(probes, ys, strict=True)]
    errors = [[max(0.0, y - ci[0]) for y, ci in zip(ys, cis, strict=True)],
              [max(0.0, ci[1] - y) for y, ci in zip(ys, cis, strict=True)]]  # fmt: skip
    left.errorbar(xs, ys, yerr=errors, fmt="o-", capsize=3, color="tab:blue", label="rollouts/s (95% interval)")
    if max(xs) > 8 * min(xs):  # a sweep over decades reads on a log axis; 5 to 20 reads better as it is
        from matplotlib.ticker import ScalarFormatter

        left.set_xscale("log", base=2)
        left.xaxis.set_major_formatter(ScalarFormatter())  # 4, 8, 16 rather than 2^2, 2^3, 2^4
    left.set_xlabel("parallelism (num_samples_in_parallel)")
    left.set_ylabel("rollouts/s", color="tab:blue")
    left.set_ylim(bottom=0)
    if knee_ci:
        left.axvspan(*knee_ci, color="tab:orange", alpha=0.15, label="knee 95% interval")
    if recommended is not None:
        left.axvline(recommended, color="tab:green", linestyle="--", label=f"recommended {recommended:g}")
    latencies = [(p["parallelism"], p["latency_p99_s"]) for p in probes if p["latency_p99_s"] is not None]
    scale, unit = time_axis([v for _, v in latencies])
    right = left.twinx()
    if latencies:
        right.plot([p for p, _ in latencies], [v / scale for _, v in latencies], "s--", color="tab:red",
                   label="p99 latency")  # fmt: skip
    right.set_ylim(bottom=0)
    plain_axis(right.yaxis)
    right.set_ylabel(f"p99 latency ({unit})", color="tab:red")
    handles = [h for axes in (left, right) for h in axes.get_legend_handles_labels()[0]]
    figure.legend(handles, [str(h.get_label()) for h in handles], fontsize=8, loc="outside lower center", ncols=4)
    return figure


def png(figure: Figure) -> str:
    return to_base64_png(figure)
