"""``gymbench collect +num_workers=N``: shards across worker processes, merged exactly, a dead worker's
shard recovered. Real processes, the simulator, real files; the ``local`` launcher (Ray: test_ray.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from gymbench.collect.config import CollectConfig
from gymbench.collect.shards import Shard, ShardProgress, shard_cooldowns, shard_settings
from gymbench.record import load_record
from gymbench.testing import terminal_sigint

from ..rollout.test_dataset import write_tasks
from .test_collect_cli import FAST_SIM, gymbench, rows


def pairs(path: Path) -> list[tuple[int, int]]:
    return [(r["task_index"], r["rollout_index"]) for r in rows(path)]


def flagged(path: Path) -> list[tuple[int, int]]:
    return sorted((r["task_index"], r["rollout_index"]) for r in rows(path) if r.get("phase") == "cooldown")


def test_the_cooldown_by_count_is_the_selections_last_rollouts_shard_by_shard() -> None:
    config = CollectConfig(num_repeats=2, cooldown_rollouts=9)
    shards = [Shard(i, start, end, f"shard-{i}") for i, (start, end) in enumerate([(0, 5), (5, 8), (8, 12)])]
    assert shard_cooldowns(config, shards) == {2: 8, 1: 1, 0: 0}
    assert shard_cooldowns(CollectConfig(cooldown_rollouts=20), shards) == {2: 4, 1: 3, 0: 5}
    assert shard_settings(config, shards[1], {}, cooldown_rollouts=1)["cooldown_rollouts"] == 1


def collect_args(tasks: Path, out: Path, *extra: str) -> list[str]:
    return ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+num_samples_in_parallel=4",
            "+progress=false", *extra]  # fmt: skip


def test_two_workers_give_exactly_the_single_process_set_and_one_record(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 30)
    single, sharded = tmp_path / "single.jsonl", tmp_path / "sharded.jsonl"
    selection = ["+start_idx=3", "+end_idx=28", "+num_repeats=2", "+cooldown_rollouts=9", "+save_results=false",
                 *FAST_SIM]  # fmt: skip
    assert gymbench(*collect_args(tasks, single, *selection)).returncode == 0
    done = gymbench(*collect_args(tasks, sharded, *selection[:4], "+num_workers=2", *FAST_SIM,
                                  f"+results_dir={tmp_path / 'results'}"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(pairs(sharded)) == sorted(pairs(single))
    assert len(pairs(sharded)) == len(set(pairs(sharded))) == 50
    cooldown = [(24, 0), (24, 1), (25, 0), (25, 1), (26, 0), (26, 1), (27, 0), (27, 1), (23, 1)]
    assert flagged(single) == flagged(sharded) == sorted(cooldown)  # the selection's last 9, across two shards
    plan = json.loads((tmp_path / "sharded.jsonl.shards" / "plan.json").read_text())
    assert len(plan["shards"]) == 8 and plan["shards"][0][0] == 3 and plan["shards"][-1][1] == 28
    (benchmark,) = load_record(next((tmp_path / "results").glob("*/*_collect.json"))).benchmarks
    workers = benchmark.extra["workers"]
    assert len(workers) == 2 and sum(worker["rollouts"] for worker in workers) == 50
    assert sum(worker["shards"] for worker in workers) == 8
    assert all(worker["nice"] is not None and "omp_num_threads" in worker for worker in workers)
    assert benchmark.extra["distribution"]["simulator"] == "one shared by all workers"
    assert benchmark.extra["summary"]["completed"] == 50 and benchmark.params["num_workers"] == 2
    assert "shard_retries" in benchmark.metrics
    assert json.loads((tmp_path / "sharded.jsonl.metrics.json").read_text())["summary"]["completed"] == 50


def test_a_killed_workers_shard_is_run_again_and_the_merge_stays_exact(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 48)
    out = tmp_path / "out.jsonl"
    slow = ["+sim.step_base_s=0.02", "+sim.step_per_seq_s=0", "+sim.output_tokens_mean=8"]
    args = collect_args(tasks, out, "+num_workers=2", "+num_shards=6", f"+results_dir={tmp_path / 'r'}", *slow)
    driver = subprocess.Popen([sys.executable, "-m", "gymbench.cli", *args], stderr=subprocess.PIPE, text=True)
    shards = tmp_path / "out.jsonl.shards"
    deadline = time.monotonic() + 120
    while not any(path.stat().st_size for path in shards.glob("shard-*.jsonl")):
        assert time.monotonic() < deadline and driver.poll() is None, "no shard started"
        time.sleep(0.02)
    victim = next(child for child in psutil.Process(driver.pid).children() if "spawn_main" in " ".join(child.cmdline()))
    victim.send_signal(signal.SIGKILL)
    _, stderr = driver.communicate(timeout=180)
    assert driver.returncode == 0, stderr
    assert f"worker process {victim.pid} died (signal SIGKILL)" in stderr and "running it again (it resumes)" in stderr
    assert sorted(pairs(out)) == [(t, 0) for t in range(48)]
    (benchmark,) = load_record(next((tmp_path / "r").glob("*/*_collect.json"))).benchmarks
    assert benchmark.metrics["shard_retries"].value == 1
    assert sum(shard["attempts"] for shard in benchmark.extra["shards"]) == 7


def test_an_interrupted_sharded_run_continues_from_its_shards(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 200)
    out = tmp_path / "out.jsonl"
    args = collect_args(tasks, out, "+num_workers=2", "+save_results=false", *FAST_SIM)
    driver = subprocess.Popen([sys.executable, "-m", "gymbench.cli", *args], stderr=subprocess.PIPE, text=True,
                              preexec_fn=terminal_sigint)  # fmt: skip
    deadline = time.monotonic() + 120
    while not any(path.stat().st_size for path in (tmp_path / "out.jsonl.shards").glob("shard-*.jsonl")):
        assert time.monotonic() < deadline and driver.poll() is None
        time.sleep(0.02)
    driver.send_signal(signal.SIGINT)
    _, stderr = driver.communicate(timeout=60)
    assert driver.returncode == 130, stderr
    assert "Run the same command again to continue" in stderr and not out.exists()
    done = gymbench(*args, "+num_workers=1")  # one worker would plan 4 shards: the saved 8 stay
    assert done.returncode == 0, done.stderr
    assert "continuing them with one worker" in done.stderr and "merged 8 shards" in done.stderr
    assert sorted(pairs(out)) == [(t, 0) for t in range(200)]
    summary = json.loads((tmp_path / "out.jsonl.metrics.json").read_text())["summary"]
    assert summary["skipped_from_resume"] > 0 and summary["skipped_from_resume"] + summary["completed"] == 200


def test_one_bar_neither_resets_nor_double_counts_a_restarted_shard() -> None:
    progress = ShardProgress(total=20, enabled=False)
    for shard, done in [(0, 4), (1, 3), (0, 6), (0, 2), (0, 6), (0, 10), (1, 10), (1, 9)]:  # shard 0 restarts
        progress.report(shard, done)
    assert sum(progress.done.values()) == 20
    progress.close()


def test_a_pipe_cannot_be_sharded(tmp_path: Path) -> None:
    done = gymbench("collect", "+input_jsonl_fpath=/dev/stdin", f"+output_jsonl_fpath={tmp_path / 'o.jsonl'}",
                    "+num_workers=2")  # fmt: skip
    assert done.returncode == 2 and "needs a regular file" in done.stderr
