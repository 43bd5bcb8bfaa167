"""``gymbench collect +backend=nemo-gym`` against a NeMo-Gym-compatible agent stack in its own processes.

* Driver cost: CPU per rollout (the collection alone, and the whole process with start-up) and
  peak RSS of the ``gymbench collect`` process, at parallelism 16 and 64, the two alternated in
  one run; medians. The agent stack (head server, agent and resources servers) runs in one
  process and its model server, gymbench's simulator, in another (``tests/nemo_gym/stack.py``).
* Time to a clear error: wall seconds until ``gymbench collect`` exits with one error line when
  the agent is unreachable: a dead ``+agent_url``, an ``+agent_name`` the head server lists but
  whose server is gone, and a head server that is not there. 20 rows at parallelism 2.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gymbench import Recorder
from gymbench.record import load_record

ROOT = Path(__file__).resolve().parents[1]
MODEL = ["step_base_s=0.005", "step_per_seq_s=0", "prefill_per_token_s=0", "output_tokens_mean=16"]


@pytest.fixture(scope="module")
def stack() -> Iterator[dict[str, Any]]:
    """The agent stack as its own process (the simulator as a child of it)."""
    from tests.nemo_gym.stack import stack_process

    with stack_process("--dead-agent", "crashed_agent", "--sim", *MODEL) as addresses:
        yield addresses


def write_tasks(path: Path, count: int) -> Path:
    with open(path, "w") as handle:
        for index in range(count):
            question = {"input": [{"role": "user", "content": f"What is {index} + 1?"}]}
            handle.write(json.dumps({"responses_create_params": question, "expected_answer": str(index + 1)}) + "\n")
    return path


def run_gymbench(*settings: str, cwd: Path) -> dict[str, Any]:
    """``gymbench collect`` as a process of its own; its own CPU and peak RSS come from ``wait4``."""
    with open(cwd / "stderr.txt", "w+") as stderr:
        started = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "gymbench.cli", "collect", "+progress=false", *settings],
            cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        stderr.seek(0)
        return {
            "status": child.returncode, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mib": usage.ru_maxrss / 1024, "stderr": stderr.read(),
        }  # fmt: skip


def test_driver_cost_against_an_agent_stack(gymbench: Recorder, stack: dict[str, Any], tmp_path: Path) -> None:
    rollouts = 300 if gymbench.quick else 2000
    pairs = 1 if gymbench.quick else 3
    tasks = write_tasks(tmp_path / "tasks.jsonl", rollouts)
    kinds = ("collect", "process", "rss", "rate")
    seen: dict[int, dict[str, list[float]]] = {p: {kind: [] for kind in kinds} for p in (16, 64)}
    for _ in range(pairs):
        for parallelism in (16, 64):
            results = tmp_path / "results"
            done = run_gymbench(
                "+agent_name=simple_agent", f"+head_server.port={stack['head_port']}", f"+input_jsonl_fpath={tasks}",
                f"+output_jsonl_fpath={tmp_path / 'out.jsonl'}", "+overwrite=true", f"+results_dir={results}",
                f"+num_samples_in_parallel={parallelism}", cwd=tmp_path,
            )  # fmt: skip
            assert done["status"] == 0, done["stderr"]
            record = load_record(max(results.glob("*/*_collect.json"), key=lambda p: p.stat().st_mtime))
            metrics = record.benchmarks[0].metrics
            assert metrics["failed"].value == 0
            seen[parallelism]["collect"].append(metrics["client_cpu_per_rollout"].value * 1e3)
            seen[parallelism]["process"].append(done["cpu_s"] / rollouts * 1e3)
            seen[parallelism]["rss"].append(done["peak_rss_mib"])
            seen[parallelism]["rate"].append(metrics["rollouts_per_s"].value)
    for parallelism, values in seen.items():
        gymbench.record(f"p{parallelism}_driver_cpu_per_rollout", values["collect"], "ms", "lower")
        gymbench.record(f"p{parallelism}_process_cpu_per_rollout", values["process"], "ms", "lower")
        gymbench.record(f"p{parallelism}_peak_rss", values["rss"], "MiB", "lower")
        gymbench.record(f"p{parallelism}_rollouts_per_s", values["rate"], "rollouts/s", "higher")
    gymbench.extra.update(rollouts=rollouts, pairs=pairs, model=MODEL)


@pytest.mark.parametrize(
    ("case", "settings", "says"),
    [
        pytest.param(case, settings, says, id=case)
        for case, settings, says in [
            ("dead_agent_url", ["+agent_url=http://127.0.0.1:{dead}"], "cannot reach the agent server"),
            ("listed_agent_gone", ["+agent_name=crashed_agent", "+head_server.port={head}"], "cannot reach the agent"),
            ("no_head_server", ["+agent_name=simple_agent", "+head_server.port={dead}"], "cannot reach the NeMo Gym"),
        ]
    ],
)
def test_time_to_a_clear_error(
    gymbench: Recorder, stack: dict[str, Any], tmp_path: Path, case: str, settings: list[str], says: str
) -> None:
    from tests.nemo_gym.stack import unused_port

    tasks = write_tasks(tmp_path / "tasks.jsonl", 20)
    walls = []
    for _ in range(1 if gymbench.quick else 3):
        given = [item.format(dead=unused_port(), head=stack["head_port"]) for item in settings]
        done = run_gymbench(
            *given, f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={tmp_path / 'out.jsonl'}",
            "+overwrite=true", "+save_results=false", "+num_samples_in_parallel=2", cwd=tmp_path,
        )  # fmt: skip
        errors = [line for line in done["stderr"].splitlines() if line.startswith("gymbench: error:")]
        assert done["status"] != 0 and len(errors) == 1 and says in errors[0], done["stderr"]
        walls.append(done["wall_s"])
    gymbench.record(f"{case}_seconds_to_error", walls, "s", "lower")
    gymbench.extra.update(median_s=statistics.median(walls))
