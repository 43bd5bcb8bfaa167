"""The run report's plots label what people read: no ``1.19e+03`` bars, no ``1e6`` multiplier on an
axis, every axis named with its unit, no empty KV-cache axis."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from gymbench.report.run_plots import (  # noqa: E402
    bar_figure,
    over_time_figure,
    percentile_figure,
    server_figure,
    step_time_figure,
    tune_figure,
)


def texts(figure: object) -> list[str]:
    return [text.get_text() for axes in figure.axes for text in axes.texts] + [  # type: ignore[attr-defined]
        axes.get_title()
        for axes in figure.axes  # type: ignore[attr-defined]
    ]


def offsets(figure: object) -> list[str]:
    """Every axis's offset or multiplier text (``1e6``, ``+1.2``), drawn first so it is set."""
    figure.canvas.draw()  # type: ignore[attr-defined]
    return [
        text
        for axes in figure.axes  # type: ignore[attr-defined]
        for axis in (axes.xaxis, axes.yaxis)
        if (text := axis.get_offset_text().get_text())
    ]


def test_stage_bars_are_labelled_with_durations_on_one_axis_unit() -> None:
    figure = bar_figure({"generation": 1.1904, "verification": 0.0021, "slot wait": 0.35}, "stages", "mean")
    labels = [text.get_text() for text in figure.axes[0].texts]
    assert labels == ["1.19 s", "2.1 ms", "350 ms"]  # each bar its own duration
    assert figure.axes[0].get_xlabel() == "mean (s)"  # the axis in the largest bar's unit


def test_seconds_beside_microseconds_get_no_multiplier() -> None:
    """The issue's chart: µs stages beside a 1.17 s one read "mean per rollout (µs)" with ×1e6."""
    figure = bar_figure({"generation": 1.17, "backend": 184e-6, "verification": 45e-6}, "stages", "mean")
    assert figure.axes[0].get_xlabel() == "mean (s)" and offsets(figure) == []
    ticks = [tick for tick in figure.axes[0].get_xticks() if tick >= 0]
    assert max(ticks) < 10


def test_percentile_panels_are_readable_and_labelled() -> None:
    def row(value: float) -> dict:
        return {"value": value, "low": value * 0.99, "high": value * 1.01, "small_sample": False}

    tables = {
        "ttft": {"count": 200, "p50": row(0.012), "p90": row(0.0131), "p99": None},
        "e2e": {"count": 200, "p50": row(0.992), "p90": row(1.0002), "p99": row(1.0004)},
        "tpot": {"count": 200, "p50": row(37e-3), "p90": row(37.8e-3), "p99": row(37.9e-3)},
    }
    figure = percentile_figure(tables)
    width, _ = figure.get_size_inches()
    visible = [axes for axes in figure.axes if axes.get_visible()]
    assert width / 2 >= 5  # two panels to a row, each about 5 inches wide
    assert [axes.get_ylabel() for axes in visible] == ["TTFT (ms)", "e2e (s)", "TPOT (ms)"]
    assert all(axes.get_xlabel().startswith("percentile") for axes in visible)
    assert offsets(figure) == []  # 0.992 s to 1.0004 s: no "+9.9e-1" offset above the axis


def test_every_run_figure_names_its_axes_with_units() -> None:
    timeline = {"start_s": [0.0, 1.0, 2.0], "bucket_s": 1.0, "rollouts_per_s": [0.0, 30.0, 31.0],
                "output_tokens_per_s": [0.0, 900.0, 950.0], "mean_e2e_s": [None, 1.18, 1.2]}  # fmt: skip
    table = [{"parallelism": p, "rollouts_per_s": min(p, 16) * 2.0, "rollouts_per_s_ci": [min(p, 16) * 1.9,
              min(p, 16) * 2.1], "output_tokens_per_s": 1.0, "latency_p50_s": 0.2, "latency_p99_s": 0.3 * p,
              "error_rate": 0.0} for p in (1, 2, 4, 8, 16, 32, 64)]  # fmt: skip
    figures = [over_time_figure(timeline), tune_figure(table, [12.0, 20.0], 13.0), step_time_figure([0.1, 0.11])]
    labels = [label for figure in figures for axes in figure.axes for label in (axes.get_ylabel(),) if label]
    assert labels == ["rollouts/s", "output tokens/s", "mean e2e (s)", "rollouts/s", "p99 latency (s)",
                      "step time (ms)"]  # fmt: skip
    assert all(offsets(figure) == [] for figure in figures)


def test_a_server_without_kv_data_says_so_instead_of_an_empty_axis() -> None:
    flat = [{"t_s": float(t), "running": 3.0, "waiting": 0.0, "kv_cache": 0.0} for t in range(5)]
    figure = server_figure(flat)
    assert len(figure.axes) == 1  # no KV-cache axis
    assert any("no KV-cache data" in text for text in texts(figure))


def test_a_little_kv_use_gets_an_axis_that_shows_it() -> None:
    used = [{"t_s": float(t), "running": 3.0, "waiting": 0.0, "kv_cache": 0.002 * t} for t in range(5)]
    figure = server_figure(used)
    assert len(figure.axes) == 2
    low, high = figure.axes[1].get_ylim()
    assert (low, high) == (0, 1.0)
