"""The pytest session summary shows durations in the unit they read best in."""

from __future__ import annotations

from gymbench.pytest.plugin import summary_lines
from gymbench.record import BenchmarkResult, Metric


def test_seconds_read_as_microseconds_and_other_units_stay() -> None:
    fast = Metric.from_samples([2.0e-6, 2.08e-6, 2.1e-6, 2.2e-6], "s", "lower")
    rate = Metric(12.5, "rollouts/s", "higher")
    lines = summary_lines([BenchmarkResult("a.py::t", {}, {"time": fast, "rate": rate})])
    time_row, rate_row = lines[1].split(), lines[2].split()
    assert time_row[2:5] == ["2.09", "0.155", "µs"] and "e-06" not in lines[1]
    assert rate_row[2] == "12.5" and rate_row[4] == "rollouts/s"


def test_bytes_read_in_binary_units_and_large_counts_keep_their_digits() -> None:
    memory = Metric(4.133e8, "B", "lower")
    flops = Metric(119_537_664.0, "FLOP", "lower")
    lines = summary_lines([BenchmarkResult("a.py::t", {}, {"peak_memory": memory, "flops": flops})])
    memory_row, flops_row = lines[1].split(), lines[2].split()
    assert memory_row[2] == "394.2" and memory_row[4] == "MiB" and "e+" not in lines[1]
    assert flops_row[2] == "119,537,664" and flops_row[4] == "FLOP"
