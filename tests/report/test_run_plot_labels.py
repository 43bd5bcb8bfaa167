"""The run report's plots label what people read: no ``1.19e+03`` bars, no empty KV-cache axis."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from gymbench.report.run_plots import server_figure, stage_figure  # noqa: E402


def texts(figure: object) -> list[str]:
    return [text.get_text() for axes in figure.axes for text in axes.texts] + [  # type: ignore[attr-defined]
        axes.get_title()
        for axes in figure.axes  # type: ignore[attr-defined]
    ]


def test_stage_bars_are_labelled_without_exponents() -> None:
    figure = stage_figure({"generation": 1.1904, "verification": 0.0021, "slot_wait": 0.35})
    labels = [text.get_text() for text in figure.axes[0].texts]
    assert labels == ["1,190", "2.1", "350"]  # ms, the median's unit


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
