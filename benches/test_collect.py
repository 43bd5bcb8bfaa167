"""What the collection engine costs, and whether it keeps the server busy.

* Driver overhead (issue 38's "lean hot path"): client CPU per rollout, gymbench versus a minimal
  uvloop + aiohttp + ``asyncio.Semaphore`` loop sending the same requests, and versus that loop
  when it also checks each answer and appends one orjson line per rollout (``minimal-rows``: the
  least a collector does with its product), streamed and not, each
  side in its own process timed with ``time.process_time()`` after its imports. The server is
  ``canned_server.py``: the simulator's own answer, recorded once and replayed from a raw socket
  protocol several times faster than either client asks, so both clients are always the limit and
  a run measures the client's work, not how the two processes took turns. The three run in
  rounds (each first in turn), so a noisy machine slows every side of a round alike; the
  headline is the median of the rounds' ratios, with their spread and the machine's load beside
  it. Target ratio ≤ 1.05 at parallelism 64 (7 rounds of 20,000 rollouts); ``--gymbench-quick``
  runs one round of 2,000 at 64 only (seconds).
* Little's law: achieved rollouts/s ÷ (parallelism ÷ mean latency) against a fixed-latency
  server the machine keeps up with; target ≥ 0.97.
* Memory: peak RSS of a run over 10,000 versus 1,000,000 input rows; target ≤ 1.2×.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gymbench import Recorder
from gymbench.pytest.api import Benchmark
from gymbench.sim import running_sim_server

DRIVERS = Path(__file__).with_name("collect_drivers.py")
CANNED = Path(__file__).with_name("canned_server.py")
MODES = ("minimal", "minimal-rows", "gymbench")
"""The bare loop, the bare loop that also checks and writes each answer, and gymbench."""


@contextmanager
def canned_server() -> Iterator[str]:
    """``canned_server.py`` replaying the zero-latency simulator's answer; yields its base URL."""
    with running_sim_server(preset="zero-latency") as sim:
        server = subprocess.Popen([sys.executable, str(CANNED), sim.base_url], stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            line = server.stdout.readline()  # it prints once listening; an empty line: it died
            assert line, "canned_server.py exited before listening"
            yield json.loads(line)["base_url"]
        finally:
            server.kill()
            server.wait(timeout=30)


def write_tasks(path: Path, count: int) -> Path:
    line = json.dumps(
        {
            "responses_create_params": {"input": [{"role": "user", "content": "What is 2 + 2?"}]},
            "expected_answer": "4",
        }
    )
    with open(path, "w") as handle:
        for _ in range(count):
            handle.write(line + "\n")
    return path


def drive(mode: str, base_url: str, tasks: Path, parallelism: int, out: Path, stream: bool = False) -> dict:
    command = [sys.executable, str(DRIVERS), mode, base_url, str(tasks), str(parallelism), str(out)]
    done = subprocess.run(command + (["stream"] if stream else []), capture_output=True, text=True, check=True,
                          timeout=900)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("parallelism", "stream"), [(64, False), (64, True), (1024, False)])
def test_driver_overhead(gymbench: Recorder, tmp_path: Path, parallelism: int, stream: bool) -> None:
    if gymbench.quick and parallelism != 64:
        pytest.skip("quick mode measures parallelism 64 only")
    rollouts = 2000 if gymbench.quick else 20000
    rounds = 1 if gymbench.quick else 7
    tasks = write_tasks(tmp_path / "tasks.jsonl", rollouts)
    per_rollout: dict[str, list[float]] = {mode: [] for mode in MODES}
    walls: dict[str, list[float]] = {mode: [] for mode in MODES}
    ratios: dict[str, list[float]] = {"minimal": [], "minimal-rows": []}
    loads = []
    with canned_server() as base_url:
        for turn in range(rounds):
            for mode in MODES[turn % 3 :] + MODES[: turn % 3]:  # each side first in turn
                report = drive(mode, base_url, tasks, parallelism, tmp_path / f"{mode}.jsonl", stream)
                assert report["done"] == rollouts
                per_rollout[mode].append(report["cpu_s"] / rollouts * 1e6)
                walls[mode].append(rollouts / report["wall_s"])
            for reference, found in ratios.items():
                found.append(per_rollout["gymbench"][-1] / per_rollout[reference][-1])
            loads.append(os.getloadavg()[0])
            spent = ", ".join(f"{mode} {per_rollout[mode][-1]:.1f} µs" for mode in MODES)
            shown = " and ".join(f"{found[-1]:.3f}" for found in ratios.values())
            print(f"round {turn}: {spent}, ratios {shown}, load {loads[-1]:.1f}")
    for mode in MODES:
        gymbench.record(f"{mode.replace('-', '_')}_cpu_per_rollout", per_rollout[mode], "µs", "lower")
        gymbench.record(f"{mode.replace('-', '_')}_rollouts_per_s", walls[mode], "rollouts/s", "higher")
    gymbench.record("cpu_ratio_gymbench_over_minimal", statistics.median(ratios["minimal"]), "ratio", "lower")
    gymbench.record("cpu_ratio_gymbench_over_minimal_rows", statistics.median(ratios["minimal-rows"]), "ratio", "lower")
    gymbench.record("pair_cpu_ratios", ratios["minimal"], "ratio", "lower")
    gymbench.extra.update(rollouts=rollouts, rounds=rounds, stream=stream, load_1min=loads, server="canned")
    for reference, found in ratios.items():
        spread = f"rounds {min(found):.3f}-{max(found):.3f}, load {min(loads):.1f}-{max(loads):.1f}"
        print(f"gymbench / {reference}: median {statistics.median(found):.3f} ({spread})")


@pytest.mark.parametrize("parallelism", [1, 4, 16, 64, 256, 1024])
def test_littles_law(
    gymbench: Benchmark, tmp_path: Path, parallelism: int, gymbench_sim_factory: Callable[..., Any]
) -> None:
    """Measured as a user would measure their server: one ``gymbench.collect(...)`` per parallelism."""
    if gymbench.quick and parallelism not in (1, 64):
        pytest.skip("quick mode runs two points only")
    rounds = 3 if gymbench.quick else 8
    tasks = write_tasks(tmp_path / "tasks.jsonl", parallelism * rounds)
    fixed = {
        "max_num_seqs": 4096,
        "step_base_s": 0.1,
        "step_per_seq_s": 0.0,
        "prefill_per_token_s": 0.0,
        "output_tokens_mean": 10,
    }
    server = gymbench_sim_factory(**fixed)
    result = gymbench.collect(
        backend="openai", base_url=server.base_url, model="gymbench-sim", input_jsonl_fpath=str(tasks),
        num_samples_in_parallel=parallelism,
    )  # fmt: skip
    assert result.completed == parallelism * rounds
    latency = gymbench.metrics["stage_generation"].value  # the mean time in the server, per rollout
    gymbench.record("mean_latency", latency, "s", "lower")
    gymbench.record("littles_law_efficiency", result.rollouts_per_s / (parallelism / latency), "ratio", "higher")


def test_memory_does_not_grow_with_input(gymbench: Recorder, tmp_path: Path) -> None:
    small, large = (1_000, 100_000) if gymbench.quick else (10_000, 1_000_000)
    peaks = {}
    for rows in (small, large):
        tasks = write_tasks(tmp_path / f"tasks_{rows}.jsonl", rows)
        report = drive("memory", "-", tasks, 256, tmp_path / "out.jsonl")
        assert report["done"] == rows
        peaks[rows] = report["peak_rss_mib"]
        tasks.unlink()
    gymbench.record("peak_rss_small", peaks[small], "MiB", "lower")
    gymbench.record("peak_rss_large", peaks[large], "MiB", "lower")
    gymbench.record("peak_rss_ratio_large_over_small", peaks[large] / peaks[small], "ratio", "lower")
    gymbench.extra.update(small_rows=small, large_rows=large)
