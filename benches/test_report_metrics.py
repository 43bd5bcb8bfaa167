"""What scraping the server's ``/metrics`` costs a collection.

``gymbench collect`` against the simulator (its own process, vLLM's metric names), alternating
runs with ``+scrape_metrics=true`` and ``=false`` in one session (which goes first alternates
too). Recorded: the ratio of the medians (on / off) of rollouts/s (the target: within 1% of 1),
of the whole command's wall time (the scrapes before and after fall outside the measured
collection) and of the client's CPU seconds (the steadiest of the three on a shared machine).
"""

from __future__ import annotations

import json
import resource
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


def child_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def collect(base_url: str, tasks: Path, out: Path, scrape: bool) -> tuple[float, float, float]:
    """(rollouts/s of the collection, wall seconds and CPU seconds of the whole command)."""
    command = [sys.executable, "-m", "gymbench.cli", "collect", f"+input_jsonl_fpath={tasks}",
               f"+output_jsonl_fpath={out}", "+overwrite=true", "+num_samples_in_parallel=64", f"+base_url={base_url}",
               "+model=gymbench-sim", "+stream=true", f"+scrape_metrics={str(scrape).lower()}", "+save_results=false",
               "+progress=false"]  # fmt: skip
    started, cpu = time.perf_counter(), child_cpu_s()
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    wall, cpu = time.perf_counter() - started, child_cpu_s() - cpu
    summary = json.loads(out.with_name(out.name + ".metrics.json").read_text())["summary"]
    assert summary["failed"] == 0 and ("before" in summary["server_metrics"]) == scrape
    return summary["rollouts_per_s"], wall, cpu


def test_what_scraping_metrics_costs(gymbench: Recorder, tmp_path: Path) -> None:
    rollouts, pairs = (300, 1) if gymbench.quick else (4000, 11)
    tasks = write_tasks(tmp_path / "tasks.jsonl", rollouts)
    runs: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    with running_sim_server(**ENGINE) as server:
        for index in range(pairs):
            for scrape in (index % 2 == 0, index % 2 == 1):  # alternate which goes first
                runs[scrape].append(collect(server.base_url, tasks, tmp_path / "out.jsonl", scrape))
    rates = {scrape: [run[0] for run in found] for scrape, found in runs.items()}
    gymbench.record("rollouts_per_s_scraping", rates[True], "rollouts/s", "higher")
    gymbench.record("rollouts_per_s_not_scraping", rates[False], "rollouts/s", "higher")
    for position, name, direction in ((0, "throughput", "higher"), (1, "command_wall", "lower"),
                                      (2, "client_cpu", "lower")):  # fmt: skip
        on, off = ([run[position] for run in runs[scrape]] for scrape in (True, False))
        gymbench.record(f"{name}_ratio_scraping_over_not", statistics.median(on) / statistics.median(off), "ratio",
                        direction)  # fmt: skip
