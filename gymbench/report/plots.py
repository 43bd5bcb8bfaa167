"""Figures for the HTML report, rendered off-screen (Agg) and returned as base64 PNG.

Each figure is one function of already-computed data, so the report can be built from stored
results alone and the figures stay testable without a display.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gymbench.console import printable
from gymbench.gate.compare import MetricComparison
from gymbench.gate.format import VERDICT_MARK
from gymbench.labels import label
from gymbench.units import time_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class ChangeHistory:
    """One changed benchmark's metric across the stored runs, and which runs the comparison used."""

    benchmark: str
    metric: str
    unit: str
    verdict: str
    points: list[tuple[str, float]]
    """(run label, median), oldest first."""
    roles: list[str]
    """Per point: ``baseline``, ``candidate`` or empty."""
    baseline: float | None = None
    min_effect: float = 0.0


COLOURS = {
    "pass": "#4c72b0",
    "regressed": "#c44e52",
    "improved": "#55a868",
    "inconclusive": "#dd8452",
    "ungated": "#8c8c8c",
}
MAX_PANELS = 48


def short_name(bench_id: str) -> str:
    """The test and its parameters without the file path, which repeats in every panel; control
    characters escaped, as everywhere a record's text is shown."""
    return printable(bench_id.rsplit("::", 1)[-1])


def pyplot() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg")
    # Text is data (benchmark and run names), never mathtext: a name holding ``$\\frac{$`` was a
    # ParseSyntaxException traceback when the figure was drawn.
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


def to_base64_png(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    pyplot().close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def ratio_plot(comparisons: Sequence[MetricComparison]) -> str:
    return to_base64_png(ratio_figure(comparisons))


def ratio_figure(comparisons: Sequence[MetricComparison]) -> Figure:
    """Every metric's ratio with its interval, the no-change line and the threshold band.

    Every ratio is inside the axis; an interval reaching far beyond the ratios is drawn to the
    edge with an arrow and its end written there, so nothing is cut silently.
    """
    plt = pyplot()
    height = max(2.0, 0.28 * len(comparisons) + 1)
    figure, axes = plt.subplots(figsize=(8, height))
    low_limit, high_limit = ratio_limits(comparisons)
    for y, c in enumerate(comparisons):
        colour = COLOURS[c.verdict]
        low, high = c.interval
        low, high = (c.ratio, c.ratio) if not (math.isfinite(low) and math.isfinite(high)) else (low, high)
        axes.plot([max(low, low_limit), min(high, high_limit)], [y, y], color=colour, linewidth=2)
        axes.plot([c.ratio], [y], "o", color=colour, label=VERDICT_MARK[c.verdict])
        for end, edge, marker, align in ((low, low_limit, "<", "left"), (high, high_limit, ">", "right")):
            if (end < edge) if marker == "<" else (end > edge):
                axes.plot([edge], [y], marker, color=colour, markersize=6)
                axes.annotate(f"{end:.3g}", (edge, y), textcoords="offset points", xytext=(0, 4),
                              ha=align, fontsize=6, color=colour)  # fmt: skip
    axes.axvline(1.0, color="black", linewidth=0.8)
    axes.set_xscale("log")
    axes.set_xlim(low_limit, high_limit)
    _ratio_ticks(axes, low_limit, high_limit)
    if comparisons:
        band = comparisons[0].min_effect
        axes.axvspan(1 / (1 + band), 1 + band, color="grey", alpha=0.12)
    axes.set_yticks(range(len(comparisons)), [f"{short_name(c.benchmark)} · {label(c.metric)}" for c in comparisons],
                    fontsize=7)  # fmt: skip
    axes.invert_yaxis()
    axes.set_xlabel("candidate / baseline (shift-corrected), with interval")
    handles, labels = axes.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    axes.legend(unique.values(), unique.keys(), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return figure


SMALLEST_RATIO = 1e-300
"""Axis limits stay finite (and their logarithms too) whatever a broken record holds."""
WIDEST_INTERVAL = 4.0
"""How far (as a factor) beyond the outermost ratios the axis follows an interval before marking it."""
NICE_RATIOS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0,
               10.0, 20.0, 50.0, 100.0)  # fmt: skip


def ratio_limits(comparisons: Sequence[MetricComparison]) -> tuple[float, float]:
    """Log-scale limits from the data: every ratio always, interval ends up to a factor of 4 beyond."""
    ratios = [c.ratio for c in comparisons if math.isfinite(c.ratio) and c.ratio > 0] or [1.0]
    ends = [x for c in comparisons for x in c.interval if math.isfinite(x) and x > 0]
    low = min(ratios + [0.9]) / WIDEST_INTERVAL
    high = max(ratios + [1.1]) * WIDEST_INTERVAL
    low = max(min(ends + ratios + [0.9]), low)
    high = min(max(ends + ratios + [1.1]), high)
    return max(low / 1.08, SMALLEST_RATIO), min(high * 1.08, 1 / SMALLEST_RATIO)


def spaced_ticks(low: float, high: float, most: int = 8) -> list[float]:
    """Nice ratios inside ``[low, high]``, outward from 1×, at least 1/``most`` of the axis apart."""
    gap = math.log(high / low) / most
    inside = [t for t in NICE_RATIOS if low <= t <= high]
    centre = min(inside or [1.0], key=lambda t: abs(math.log(t)))
    kept = [centre]
    for side in ([t for t in inside if t > centre], [t for t in reversed(inside) if t < centre]):
        last = centre
        for tick in side:
            if abs(math.log(tick / last)) >= gap:
                kept.append(tick)
                last = tick
    return sorted(kept)


def _ratio_ticks(axes: Any, low: float, high: float) -> None:
    """Plain ratios (0.5×, 1×, 2×) on the log axis instead of matplotlib's 3×10⁻¹ labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    axes.xaxis.set_major_locator(FixedLocator(spaced_ticks(low, high)))
    axes.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}×"))
    axes.xaxis.set_minor_locator(NullLocator())


def history_plot(history: dict[str, list[tuple[str, float]]], metric: str, unit: str) -> str:
    return to_base64_png(history_figure(history, metric, unit))


def history_figure(history: dict[str, list[tuple[str, float]]], metric: str, unit: str) -> Figure:
    """One panel per benchmark: the metric's median in each stored run, oldest to newest.

    The x axis counts runs (1 = oldest) with at most four labels, each the run's date and time on
    two lines, so they never run into each other.
    """
    items = list(history.items())[:MAX_PANELS]
    plt = pyplot()
    columns = 3
    rows = max(1, math.ceil(len(items) / columns))
    figure, grid = plt.subplots(rows, columns, figsize=(11, 2.6 * rows), squeeze=False)
    for axes, (bench_id, points) in zip(grid.flat, items, strict=False):
        scale, shown_unit = _axis_unit([v for _, v in points], unit)
        axes.plot(range(len(points)), [v / scale for _, v in points], "o-", markersize=3)
        axes.ticklabel_format(axis="y", useOffset=False)
        axes.set_title(wrapped(short_name(bench_id)), fontsize=7)
        axes.set_ylabel(f"{metric} ({shown_unit})", fontsize=7)
        ticks = list(range(0, len(points), max(1, math.ceil(len(points) / 4))))
        axes.set_xticks(ticks, [run_label(points[i][0]) for i in ticks], fontsize=6)
        axes.tick_params(axis="y", labelsize=6)
    for axes in list(grid.flat)[len(items) :]:
        axes.axis("off")
    figure.tight_layout()
    return figure


def run_label(text: str) -> str:
    """``name 0102T0000`` (a stored run's label) as ``01-02\n00:00``; other labels unchanged."""
    stamp = text.rsplit(" ", 1)[-1]
    if len(stamp) == 9 and stamp[4] == "T" and (stamp[:4] + stamp[5:]).isdigit():
        return f"{stamp[:2]}-{stamp[2:4]}\n{stamp[5:7]}:{stamp[7:9]}"
    return text


def wrapped(title: str, width: int = 34) -> str:
    """A panel title on at most two lines, shortened in the middle when longer, so titles never overlap."""
    import textwrap

    if len(title) > 2 * width:
        title = title[: width - 1] + "…" + title[-width:]
    return "\n".join(textwrap.wrap(title, width, break_on_hyphens=False)[:2]) or title


def _axis_unit(values: Sequence[float], unit: str) -> tuple[float, str]:
    """Durations plotted in ms or µs when that is how they read; other units as they are."""
    if unit != "s":
        return 1.0, unit
    return time_axis(list(values))


def distribution_plot(samples: Mapping[str, tuple[Sequence[float], Sequence[float]]], unit: str) -> str:
    return to_base64_png(distribution_figure(samples, unit))


def distribution_figure(samples: Mapping[str, tuple[Sequence[float], Sequence[float]]], unit: str) -> Figure:
    """Box plots of the baseline's and the candidate's samples, one panel per benchmark."""
    items = [(k, v) for k, v in samples.items() if v[0] and v[1]][:MAX_PANELS]
    plt = pyplot()
    columns = 4
    rows = max(1, math.ceil(len(items) / columns))
    figure, grid = plt.subplots(rows, columns, figsize=(11, 2.6 * rows), squeeze=False)
    for axes, (bench_id, (base, cand)) in zip(grid.flat, items, strict=False):
        scale, shown_unit = _axis_unit([*base, *cand], unit)
        axes.boxplot([[x / scale for x in base], [x / scale for x in cand]], tick_labels=["baseline", "candidate"],
                     showfliers=False)  # fmt: skip
        axes.set_title(wrapped(short_name(bench_id), 26), fontsize=7)
        axes.set_ylabel(shown_unit, fontsize=7)
        axes.ticklabel_format(axis="y", useOffset=False)
        axes.tick_params(labelsize=6)
    for axes in list(grid.flat)[len(items) :]:
        axes.axis("off")
    figure.tight_layout()
    return figure


ROLE_MARKERS = {"baseline": ("s", "#222222", "baseline"), "candidate": ("*", None, "candidate")}


def change_history_plot(change: ChangeHistory) -> str:
    return to_base64_png(change_history_figure(change))


def change_history_figure(change: ChangeHistory) -> Figure:
    """One changed benchmark's metric over the stored runs, oldest first, read at a glance (asv's
    history, Bencher's threshold band): the baseline's run marked with a square, the candidate's
    with a star in the verdict's colour, the band the minimum effect spans around the baseline,
    and one unit on the value axis (``ms``, not seconds times 1e-3)."""
    plt = pyplot()
    values = [v for _, v in change.points]
    scale, shown_unit = _axis_unit(values, change.unit)
    figure, axes = plt.subplots(figsize=(6.4, 3.0))
    xs = range(len(values))
    axes.plot(xs, [v / scale for v in values], "o-", color="#4c72b0", markersize=4, linewidth=1.2)
    for x, role in enumerate(change.roles):
        if role in ROLE_MARKERS:
            marker, colour, name = ROLE_MARKERS[role]
            axes.plot([x], [values[x] / scale], marker, color=colour or COLOURS[change.verdict], markersize=11,
                      label=name, zorder=3)  # fmt: skip
    if change.baseline is not None and math.isfinite(change.baseline):
        middle = change.baseline / scale
        axes.axhspan(middle * (1 - change.min_effect), middle * (1 + change.min_effect), color="grey", alpha=0.15,
                     label=f"baseline ± {change.min_effect:.0%}")  # fmt: skip
    axes.ticklabel_format(axis="y", useOffset=False)
    axes.set_title(wrapped(short_name(change.benchmark), 60), fontsize=9)
    name = label(change.metric)
    axes.set_ylabel(name if name == shown_unit else f"{name} ({shown_unit})", fontsize=8)
    axes.set_xlabel("stored runs, oldest first (date, UTC time)", fontsize=8)
    ticks = list(range(0, len(values), max(1, math.ceil(len(values) / 6))))
    axes.set_xticks(ticks, [run_label(change.points[i][0]) for i in ticks], fontsize=7)
    axes.tick_params(axis="y", labelsize=7)
    axes.grid(axis="y", alpha=0.3)
    handles, names = axes.get_legend_handles_labels()
    if handles:
        unique = dict(zip(names, handles, strict=True))
        axes.legend(unique.values(), unique.keys(), fontsize=7, loc="best")
    figure.tight_layout()
    return figure
