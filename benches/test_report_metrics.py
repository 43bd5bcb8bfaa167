"""What scraping the server's ``/metrics`` costs a collection.

``gymbench collect`` against the simulator (its own process, vLLM's metric names), alternating
runs with ``+scrape_metrics=true`` and ``=false`` in one session; the ratio of the medians of
rollouts/s (on / off) must stay within 1% of 1. The whole command's wall time is recorded too,
because the scrapes before and after the run fall outside the measured collection.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gymbench import Recorder
from gymbench.sim import running_sim_server

ENGINE = {"step_base_s": 0.005, "step_per_seq_s": 0.0001, "output_tokens_mean": 16, "max_num_seqs": 64}


def write_tasks(path: Path, count: int) -> Path:
    row = json.dumps({"responses_create_params": {"input": "What is 2 + 2?"}, "expected_answer": "4"})
    path.write_text((row + "\n") * count)
    return path


def collect(base_url: str, tasks: Path, out: Path, scrape: bool) -> tuple[float, float]:
    """(rollouts/s of the collection, wall seconds of the whole command)."""
    command = [sys.executable, "-m", "gymbench.cli", "collect", f"+input_jsonl_fpath={tasks}",
               f"+output_jsonl_fpath={out}", "+overwrite=true", "+num_samples_in_parallel=64", f"+base_url={base_url}",
               "+model=gymbench-sim", "+stream=true", f"+scrape_metrics={str(scrape).lower()}", "+save_results=false",
               "+progress=false"]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    wall = time.perf_counter() - started
    summary = json.loads(out.with_name(out.name + ".metrics.json").read_text())["summary"]
    assert summary["failed"] == 0 and ("before" in summary["server_metrics"]) == scrape
    return summary["rollouts_per_s"], wall


def test_scraping_metrics_costs_under_one_percent(gymbench: Recorder, tmp_path: Path) -> None:
    rollouts, pairs = (300, 1) if gymbench.quick else (3000, 7)
    tasks = write_tasks(tmp_path / "tasks.jsonl", rollouts)
    rates: dict[bool, list[float]] = {True: [], False: []}
    walls: dict[bool, list[float]] = {True: [], False: []}
    with running_sim_server(**ENGINE) as server:
        for index in range(pairs):
            for scrape in (index % 2 == 0, index % 2 == 1):  # alternate which goes first
                rate, wall = collect(server.base_url, tasks, tmp_path / "out.jsonl", scrape)
                rates[scrape].append(rate)
                walls[scrape].append(wall)
    ratio = statistics.median(rates[True]) / statistics.median(rates[False])
    gymbench.record("rollouts_per_s_scraping", rates[True], "rollouts/s", "higher")
    gymbench.record("rollouts_per_s_not_scraping", rates[False], "rollouts/s", "higher")
    gymbench.record("throughput_ratio_scraping_over_not", ratio, "ratio", "higher")
    wall_ratio = statistics.median(walls[True]) / statistics.median(walls[False])
    gymbench.record("command_wall_ratio_scraping_over_not", wall_ratio, "ratio", "lower")
    if not gymbench.quick:
        assert abs(ratio - 1) <= 0.01, f"scraping /metrics changed throughput by {ratio - 1:+.2%}"
