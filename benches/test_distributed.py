"""Beyond one process: sharded collection and data-parallel training steps (docs/distributed.md).

* Collection, client-bound: ``gymbench collect`` with 2 local workers against 1 (the plain
  single-process command), the zero-latency simulator in its own process so that the client is
  the bottleneck; runs alternate, the figure is the ratio of medians. Throughput is end to end
  (rollouts over the command's wall time, start-up included) and in-run (the record's rate).
* Training: ``--dp 2`` under torchrun with gloo for the mlp and the transformer: step time, the
  exposed all-reduce share, a bare all-reduce of the gradient, and scaling efficiency against one
  process doing its rank's share (measured in the same job).

The machine is shared (2 cores, other tenants): these are conditions, not targets.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gymbench import Recorder
from gymbench.settings import build_settings
from gymbench.testing import make_plugins
from gymbench.train.execute import train
from gymbench.train.settings import TrainSettings


def write_tasks(path: Path, count: int) -> Path:
    line = json.dumps({"responses_create_params": {"input": "What is 2 + 2?"}, "expected_answer": "4"})
    path.write_text((line + "\n") * count)
    return path


def collect(tasks: Path, out: Path, workers: int) -> tuple[float, float]:
    """End-to-end and in-run rollouts/s of one ``gymbench collect`` command."""
    command = [sys.executable, "-m", "gymbench.cli", "collect", f"+input_jsonl_fpath={tasks}",
               f"+output_jsonl_fpath={out}", "+overwrite=true", "+sim_preset=zero-latency", "+progress=false",
               "+num_samples_in_parallel=64", "+save_results=false", f"+num_workers={workers}"]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, timeout=900)
    wall = time.perf_counter() - started
    summary = json.loads(out.with_name(out.name + ".metrics.json").read_text())["summary"]
    rollouts = summary["completed"]
    assert rollouts == sum(1 for _ in open(tasks))
    return rollouts / wall, summary["rollouts_per_s"]


def test_collection_two_local_workers_against_one(gymbench: Recorder, tmp_path: Path) -> None:
    rollouts, rounds = (1500, 1) if gymbench.quick else (20000, 3)
    tasks = write_tasks(tmp_path / "tasks.jsonl", rollouts)
    end_to_end: dict[int, list[float]] = {1: [], 2: []}
    in_run: dict[int, list[float]] = {1: [], 2: []}
    for index in range(rounds):
        for workers in (1, 2) if index % 2 == 0 else (2, 1):
            wall_rate, run_rate = collect(tasks, tmp_path / f"out{workers}.jsonl", workers)
            end_to_end[workers].append(wall_rate)
            in_run[workers].append(run_rate)
    for workers in (1, 2):
        gymbench.record(f"rollouts_per_s_end_to_end_{workers}w", end_to_end[workers], "rollouts/s", "higher")
        gymbench.record(f"rollouts_per_s_in_run_{workers}w", in_run[workers], "rollouts/s", "higher")
    for name, rates in (("end_to_end", end_to_end), ("in_run", in_run)):
        ratio = statistics.median(rates[2]) / statistics.median(rates[1])
        gymbench.record(f"speedup_2w_over_1w_{name}", ratio, "ratio", "higher")


@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_data_parallel_two_ranks(gymbench: Recorder, model: str) -> None:
    size = "tiny" if gymbench.quick else "small"
    steps = 3 if gymbench.quick else 20
    shape = ["batch=64"] if model == "mlp" else ["batch=16", "seq_len=128"]
    settings = build_settings(TrainSettings, [f"model={model}", f"size={size}", *shape, f"steps={steps}", "warmup=2",
                                              "threads=1", "dp=2", "progress=false"])  # fmt: skip
    recorder = Recorder()
    train(settings, make_plugins(), recorder)
    assert recorder.extra["data_parallel"]["replicas_identical"]
    for name in ("step_time", "reference_step_time", "allreduce_exposed_share", "allreduce_time", "scaling_efficiency",
                 "tokens_per_s"):  # fmt: skip
        metric = recorder.metrics[name]
        gymbench.record(name, list(metric.samples) or [metric.value], metric.unit, metric.direction)
    gymbench.extra["gradient_bytes"] = recorder.extra["data_parallel"]["gradient_bytes"]
