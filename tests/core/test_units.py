"""Durations read as people write them, in every summary and table."""

from __future__ import annotations

import pytest

from gymbench.units import duration, interval, number, quantity, time_axis


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(2.08e-06, "2.08 µs"), (0.0123, "12.3 ms"), (3.5, "3.5 s"), (4e-10, "0.4 ns"), (0.99997, "1 s"), (0.0, "0 s"),
     (None, "-")],
)  # fmt: skip
def test_duration_picks_the_unit_that_reads_best(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def test_quantities_convert_time_units_and_keep_others() -> None:
    assert quantity(1.146e-07, "s") == "114.6 ns"
    assert quantity(250.0, "ms") == "250 ms"
    assert quantity(12.5, "tokens/s") == "12.5 tokens/s"
    assert quantity(float("nan"), "s") == "n/a"


def test_interval_and_axis_share_the_values_unit() -> None:
    assert interval(0.0239, 0.023, 0.025) == "23.9 ms [23–25]"
    assert time_axis([1e-6, 2e-6, 3e-3]) == (1e-6, "µs")


@pytest.mark.parametrize(
    ("value", "low", "high", "text"),
    [(0.992, 0.991, 1.02, "992 ms [991–1,020]"), (999.0, 990.0, 1020.0, "999 s [990–1,020]"),
     (1e-3, 1e-8, 1.2e-3, "1 ms [0.00001–1.2]"), (1.5, 1.4, 1.6, "1.5 s [1.4–1.6]")],
)  # fmt: skip
def test_an_interval_never_reads_with_an_exponent(value: float, low: float, high: float, text: str) -> None:
    """The collect summary printed ``e2e p90 992 ms [991–1.02e+03]`` (issue 42)."""
    assert interval(value, low, high) == text


@pytest.mark.parametrize(("seconds", "text"), [(1200.0, "1,200 s"), (999.7, "1,000 s"), (86400.0, "86,400 s")])
def test_a_long_duration_keeps_its_digits(seconds: float, text: str) -> None:
    assert duration(seconds) == text and quantity(seconds, "s", 3) == text


def test_bytes_and_large_counts_read_as_people_read_them() -> None:
    assert quantity(4.29e8, "B") == "409.1 MiB"
    assert quantity(512, "B") == "512 B"
    assert quantity(1190.4, "tokens/s") == "1,190 tokens/s"
    assert quantity(9.437e7, "FLOP") == "94,370,000 FLOP"
    assert quantity(8.3551e-05, "s") == "83.55 µs"
    for shown in (quantity(4.29e8, "B"), quantity(1190.4, "x"), quantity(9.437e7, "FLOP")):
        assert "e+" not in shown


def test_a_small_or_huge_number_is_written_without_an_exponent() -> None:
    # A train report on a CPU shows 8.579e-05 TFLOP/s unless number() writes it out.
    assert number(8.579e-05) == "0.00008579"
    assert number(-3e-9, 3) == "-0.000000003"
    assert number(1.5e20) == "150,000,000,000,000,000,000"
    assert number(12.3456) == "12.35" and number(1234.5) == "1,234"
    assert not any("e" in number(v) for v in (1e-12, 7.7e-7, 1e15, 123456789.0))
