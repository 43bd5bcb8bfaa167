"""Open-loop arrivals: constant, Poisson, gamma and trace replay, registered through the same hook
as the built-in closed-loop strategies, with the achieved rate against the target in the record.

Runs go in simulated time (the simulator in-process on a virtual clock), so rates and schedules
are exact and nothing depends on how loaded the machine is.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import numpy as np
import pytest

from gymbench.builtin.arrivals import gamma_gaps, read_trace
from gymbench.builtin.exact_match import ExactMatchVerifier
from gymbench.collect.collection import make_strategy
from gymbench.collect.summary import format_summary
from gymbench.errors import GymbenchError
from gymbench.plugins import Plugins, get_plugin_manager
from gymbench.rollout.engine import Collector, CollectSettings
from gymbench.rollout.stats import CollectStats
from gymbench.sim import InProcessBackend, SimConfig, run_in_simulated_time
from gymbench.types import ConcurrencyStrategy

FAST = SimConfig(step_base_s=0.005, step_per_seq_s=0.0, prefill_per_token_s=0.0, output_tokens_mean=4,
                 max_num_seqs=64)  # fmt: skip
SLOW = SimConfig(step_base_s=0.05, step_per_seq_s=0.0, prefill_per_token_s=0.0, output_tokens_mean=8,
                 max_num_seqs=2)  # fmt: skip


def write_tasks(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps({"responses_create_params": {"input": f"{i}?"}}) + "\n" for i in range(count)))
    return path


def strategy(name: str, **options: object) -> ConcurrencyStrategy:
    return make_strategy(Plugins(get_plugin_manager()), name, dict(options), None)


def run(tmp_path: Path, chosen: ConcurrencyStrategy, tasks: int, engine: SimConfig = FAST,
        **policy: object) -> tuple[CollectStats, list[dict[str, object]]]:  # fmt: skip
    out = tmp_path / "out.jsonl"

    async def main() -> CollectStats:
        settings = CollectSettings(write_tasks(tmp_path / "t.jsonl", tasks), out, overwrite=True, **policy)
        async with InProcessBackend(engine) as backend:
            clock = asyncio.get_running_loop().time
            return await Collector(settings, backend, ExactMatchVerifier(), chosen, clock=clock).run()

    stats = run_in_simulated_time(main())
    return stats, [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.parametrize("rate", [10.0, 50.0, 200.0])
def test_constant_arrivals_keep_their_rate_and_record_it(tmp_path: Path, rate: float) -> None:
    stats, rows = run(tmp_path, strategy("constant", request_rate=rate), 60)
    arrivals = stats.summary()["arrivals"]
    assert arrivals["sent"] == len(rows) == 60 and arrivals["target_per_s"] == rate
    assert arrivals["achieved_per_s"] == pytest.approx(rate, rel=1e-6)
    assert arrivals["late_p99_s"] == pytest.approx(0.0, abs=1e-9)
    assert all(row["timings"]["slot_wait"] == pytest.approx(0.0, abs=1e-9) for row in rows)
    assert "arrivals (constant): target" in format_summary(stats.summary(), tmp_path / "out.jsonl")


@pytest.mark.parametrize(("shape", "cv"), [(1.0, 1.0), (0.25, 2.0), (4.0, 0.5)])
def test_gamma_gaps_have_the_rate_and_the_burstiness_asked_for(shape: float, cv: float) -> None:
    gaps = np.fromiter(gamma_gaps(20.0, shape, seed=3), float, count=40_000)
    assert gaps.mean() == pytest.approx(1 / 20.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)  # a gamma's CV is 1/sqrt(shape)


def test_poisson_and_gamma_are_plugins_with_seeded_schedules(tmp_path: Path) -> None:
    first, _ = run(tmp_path, strategy("poisson", request_rate=50.0, arrival_seed=7), 40)
    again, _ = run(tmp_path, strategy("poisson", request_rate=50.0, arrival_seed=7), 40)
    assert first.summary()["arrivals"]["achieved_per_s"] == again.summary()["arrivals"]["achieved_per_s"]
    bursty, _ = run(tmp_path, strategy("gamma", request_rate=50.0, gamma_shape=0.5), 40)
    assert bursty.summary()["arrivals"]["shape"] == "gamma (shape 0.5)" and bursty.completed == 40


def test_a_trace_is_replayed_on_its_schedule_and_its_end_ends_the_run(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text('0.0\n0.5\n{"timestamp_s": 0.75}\n\n{"timestamp": 2000}\n')
    stats, rows = run(tmp_path, strategy("trace", trace_file=str(trace)), 10)
    assert len(rows) == 4 and stats.summary()["stopped"] == "the trace's 4 arrivals were all sent"
    assert stats.summary()["arrivals"]["achieved_per_s"] == pytest.approx(3 / 2.0)


def test_a_bad_trace_line_is_one_error_naming_the_file_and_line(tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text("0.1\n0.2\n0.15\n")
    with pytest.raises(GymbenchError, match=r"trace.txt:3: expected an arrival time in seconds"):
        strategy("trace", trace_file=str(trace))
    trace.write_text("0.1\nsoon\n")
    with pytest.raises(GymbenchError, match=r"trace.txt:2: .*got 'soon'"):
        read_trace(trace)
    with pytest.raises(GymbenchError, match="request_rate"):
        strategy("constant")


def test_arrivals_faster_than_the_server_end_the_run_as_over_saturated(tmp_path: Path) -> None:
    chosen = strategy("constant", request_rate=100.0, saturation_window_s=1.0, saturation_windows=3)
    stats, rows = run(tmp_path, chosen, 3000, SLOW)
    summary = stats.summary()
    assert summary["stopped"].startswith("over-saturated: in 3 windows of 1 s in a row")
    assert summary["arrivals"]["sent"] == len(rows) < 3000  # ended early, every rollout sent was written
    assert "stopped early (cleanly" in format_summary(summary, tmp_path / "out.jsonl")


def test_a_server_that_keeps_up_is_not_called_over_saturated(tmp_path: Path) -> None:
    chosen = strategy("constant", request_rate=3.0, saturation_window_s=1.0, saturation_windows=2)
    stats, rows = run(tmp_path, chosen, 60, SLOW)  # SLOW serves about 4 a second
    assert len(rows) == 60 and "stopped" not in stats.summary()


def test_max_in_flight_caps_the_requests_and_the_lateness_is_recorded(tmp_path: Path) -> None:
    chosen = strategy("constant", request_rate=100.0, max_in_flight=2, saturation_window_s=100.0)
    stats, rows = run(tmp_path, chosen, 20, SLOW)
    assert len(rows) == 20 and stats.summary()["arrivals"]["late_p99_s"] > 0.1
    assert max(row["timings"]["slot_wait"] for row in rows) > 0.1  # the late sends are in the rollouts' time


def test_an_open_loop_run_is_not_split_across_workers() -> None:
    from gymbench.collect.config import CollectConfig

    with pytest.raises(GymbenchError, match="strategy 'poisson' sends requests on one schedule from one process"):
        CollectConfig(strategy="poisson", num_workers=2)


@pytest.mark.parametrize(
    ("name", "options", "expected"),
    [
        ("constant", {"request_rate": 1e-308}, "setting 'request_rate': got 1e-308, expected arrivals per second"),
        ("poisson", {"request_rate": 1e9}, "setting 'request_rate': got 1000000000.0, expected arrivals per second"),
        ("gamma", {"request_rate": 5, "gamma_shape": 1e-300}, "setting 'gamma_shape': got 1e-300, expected a shape"),
        ("constant", {"request_rate": 5, "saturation_window_s": 1e300}, "setting 'saturation_window_s': got 1e+300"),
    ],
)
def test_an_arrival_setting_outside_what_makes_sense_is_one_line(name: str, options: dict[str, float],
                                                                  expected: str) -> None:  # fmt: skip
    """A rate of 1e-308 was accepted and the run sat silent; a range that makes sense refuses it."""
    with pytest.raises(GymbenchError, match=re.escape(expected)):
        strategy(name, **options)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1e308\n", r"huge.txt:1: an arrival 1e\+308 s after the start, more than a week"),
        ('{"timestamp": 1e300}\n', r"huge.txt:1: an arrival 1e\+297 s after the start"),
        ("0.1\n\xff\n", r"cannot read the trace file .*huge.txt"),
    ],
)
def test_a_trace_asking_for_an_arrival_no_run_reaches_is_one_line(tmp_path: Path, text: str, expected: str) -> None:
    """A first arrival at 1e308 s was accepted, and the run sat silent."""
    trace = tmp_path / "huge.txt"
    trace.write_bytes(b"0.1\n\xff\n" if "\xff" in text else text.encode())
    with pytest.raises(GymbenchError, match=expected):
        read_trace(trace)


def test_a_trace_may_repeat_a_time(tmp_path: Path) -> None:
    trace = tmp_path / "same.txt"
    trace.write_text("0.1\n0.1\n0.2\n")
    assert read_trace(trace) == [0.1, 0.1, 0.2]
