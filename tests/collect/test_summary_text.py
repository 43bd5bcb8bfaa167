"""The collect summary in the terminal: intervals without exponents, stages by their labels."""

from __future__ import annotations

from gymbench.collect.summary import percentile_lines, stage_line


def test_a_percentile_whose_interval_crosses_a_second_reads_without_an_exponent() -> None:
    """Issue 42 saw ``e2e p90 992 ms [991–1.02e+03]``."""
    found = {"value": 0.992, "low": 0.991, "high": 1.02, "small_sample": False}
    small = {"value": 1.5, "low": None, "high": None, "small_sample": True}
    lines = percentile_lines({"e2e": {"count": 200, "p50": found, "p90": found, "p99": small}})
    assert "992 ms [991–1,020]" in lines[2] and "1.5 s*" in lines[2]
    assert not any("e+" in line for line in lines)


def test_stages_read_as_words_and_an_unmeasured_one_is_left_out() -> None:
    stages = {"slot_wait": 0.0359, "connection_wait": 0.00234, "ttft": None, "generation": 1.17,
              "backend_other": 1.84e-4, "verification": 4.53e-5, "total": 1.21}  # fmt: skip
    line = stage_line(stages)
    assert line == (
        "time per rollout (mean): 1.21 s: wait for a parallelism slot 35.9 ms, wait for a connection 2.34 ms, "
        "generation time 1.17 s, other backend time 184 µs, verification time 45.3 µs"
    )
    assert "slot_wait" not in line and " - " not in line
