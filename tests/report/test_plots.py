"""The report's figures show every point, read in plain numbers and never overlap their labels."""

from __future__ import annotations

import math

import pytest

from gymbench.gate.compare import MetricComparison
from gymbench.gate.stats import Effect
from gymbench.report.plots import distribution_figure, history_figure, ratio_figure, ratio_limits, run_label


def comparison(name: str, ratio: float, low: float, high: float, verdict: str = "regressed") -> MetricComparison:
    effect = Effect(math.log(ratio), math.log(low), math.log(high), 0.1, "sample")
    return MetricComparison(name, "time", "s", "lower", 1.0, ratio, effect, 0.05, None, 0.001, 0.001, verdict)  # type: ignore[arg-type]


def close(figure: object) -> None:
    import matplotlib.pyplot as plt

    plt.close(figure)  # type: ignore[arg-type]


def test_ratio_plot_shows_every_ratio_far_out_and_marks_cut_intervals() -> None:
    comparisons = [
        comparison("far_slower", 4.41, 3.9, 5.0),
        comparison("far_faster", 0.227, 0.2, 0.26, "improved"),
        comparison("wide", 1.0, 1e-3, 1e3, "inconclusive"),
    ]
    figure = ratio_figure(comparisons)
    low, high = figure.axes[0].get_xlim()
    assert low < 0.2 and high > 5.0  # both extreme ratios and their intervals are inside
    assert (low, high) == pytest.approx(ratio_limits(comparisons))
    arrows = [line for line in figure.axes[0].lines if line.get_marker() in ("<", ">")]
    assert len(arrows) == 2  # the wide interval's two ends are past the axis, and marked
    figure.canvas.draw()
    labels = [t.get_text() for t in figure.axes[0].get_xticklabels()]
    assert "1×" in labels and all("$" not in text and "10^" not in text for text in labels)
    close(figure)


def test_ratio_limits_follow_the_data_both_ways() -> None:
    low, high = ratio_limits([comparison("a", 1.02, 0.99, 1.05, "pass")])
    assert 0.8 < low < 0.9 and 1.1 < high < 1.25  # no 0.25..4 default range squashing a small change


def overlapping(boxes: list) -> bool:
    return any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])


def test_distribution_titles_do_not_overlap_even_when_long() -> None:
    name = "benches/test_collect.py::test_collect_throughput[" + "concurrency=64-model=a-long-model-name]"
    samples = {f"{name}{i}": ([1e-6, 1.1e-6, 1.2e-6], [1.0e-6, 1.3e-6, 1.25e-6]) for i in range(8)}
    figure = distribution_figure(samples, "s")
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    titles = [axes.title.get_window_extent(renderer) for axes in figure.axes if axes.get_title()]
    assert len(titles) == 8 and not overlapping(titles)
    assert {axes.get_ylabel() for axes in figure.axes if axes.get_title()} == {"µs"}
    close(figure)


def test_history_labels_are_few_short_and_apart() -> None:
    points = [(f"run {month:02d}{day:02d}T1200", 0.002) for month in (1, 2) for day in range(1, 16)]
    figure = history_figure({"a.py::test_x": points, "a.py::test_y": points}, "time", "s")
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    labels = [t for t in figure.axes[0].get_xticklabels() if t.get_text()]
    assert 2 <= len(labels) <= 4 and not overlapping([t.get_window_extent(renderer) for t in labels])
    assert labels[0].get_text() == "01-01\n12:00" and figure.axes[0].get_ylabel() == "time (ms)"
    close(figure)


def test_run_label_keeps_what_it_does_not_recognise() -> None:
    assert run_label("baseline 0102T0304") == "01-02\n03:04"
    assert run_label("something else") == "something else"


def test_each_history_panel_reads_in_its_own_unit_without_an_offset() -> None:
    fast = [(f"r 0101T{hour:02d}00", 9.3e-6 + hour * 1e-9) for hour in range(3)]
    slow = [(f"r 0101T{hour:02d}00", 0.1 + hour * 1e-4) for hour in range(3)]
    figure = history_figure({"a.py::fast": fast, "a.py::slow": slow}, "time", "s")
    figure.canvas.draw()
    assert [axes.get_ylabel() for axes in figure.axes[:2]] == ["time (µs)", "time (ms)"]
    assert figure.axes[0].yaxis.get_offset_text().get_text() == ""
    close(figure)


def test_ratio_ticks_keep_their_distance() -> None:
    from gymbench.report.plots import spaced_ticks

    for low, high in ((8e-4, 1.1e3), (0.85, 1.2), (0.2, 5.5)):
        ticks = spaced_ticks(low, high)
        gaps = [math.log(b / a) for a, b in zip(ticks, ticks[1:], strict=False)]
        assert 1.0 in ticks and len(ticks) >= 3 and min(gaps) >= math.log(high / low) / 8 - 1e-12
