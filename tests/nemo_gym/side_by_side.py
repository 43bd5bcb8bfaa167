"""``gymbench collect`` beside NeMo Gym's ``gym eval run --no-serve`` on the same real stack.

``python -m tests.nemo_gym.side_by_side [TASKS]`` starts NeMo Gym's example stack (instant
simulator as the model), then runs both tools over the same distinct tasks at 16 and 64 in
parallel, alternated, twice each, and prints one JSON line per run: the whole process's CPU per
rollout (start-up included) and rows ÷ wall seconds. The figures are in docs/nemo-gym.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gymbench.engine.nemo_gym_stack import NeMoGymStack, start_nemo_gym_stack
from gymbench.engine.nemo_gym_venv import find_venv
from gymbench.sim import running_sim_server

from .test_real_stack import distinct_tasks


def timed(command: list[str], cwd: Path) -> tuple[float, float]:
    """(CPU seconds of the child, wall seconds)."""
    started, before = time.monotonic(), os.times()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    after = os.times()
    assert done.returncode == 0, done.stderr[-1500:]
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return cpu, time.monotonic() - started


def command(tool: str, stack: NeMoGymStack, tasks: Path, out: Path, parallel: int) -> list[str]:
    if tool == "nemo-gym":
        return [
            str(stack.venv / "bin" / "gym"), "eval", "run", "--no-serve", "--agent", stack.agent_name,
            "--input", str(tasks), "--output", str(out), "--concurrency", str(parallel),
            "+head_server.host=127.0.0.1", f"+head_server.port={stack.head_port}",
        ]  # fmt: skip
    return [
        sys.executable, "-m", "gymbench.cli", "collect", f"+agent_name={stack.agent_name}",
        f"+head_server.port={stack.head_port}", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}",
        f"+num_samples_in_parallel={parallel}", "+save_results=false", "+progress=false",
    ]  # fmt: skip


def main(count: int) -> None:
    venv = find_venv(build=False)
    work = Path(tempfile.mkdtemp(prefix="gymbench-side-by-side-"))
    tasks = distinct_tasks(venv, work / "tasks.jsonl", count)
    with running_sim_server(step_base_s=0.0, step_per_seq_s=0.0, prefill_per_token_s=0.0) as sim:
        with start_nemo_gym_stack(venv, sim.base_url, sim.config.model) as stack:
            print(json.dumps({"startup_s": round(stack.startup_s, 1), "load": os.getloadavg()}), flush=True)
            for parallel in (16, 64):
                for run in range(2):
                    for tool in ("nemo-gym", "gymbench"):
                        out = work / f"{tool}-{parallel}-{run}" / "rollouts.jsonl"
                        out.parent.mkdir()
                        cpu, wall = timed(command(tool, stack, tasks, out, parallel), out.parent)
                        rows = len(out.read_text().splitlines())
                        figures = {"tool": tool, "parallel": parallel, "run": run, "rows": rows,
                                   "cpu_ms_per_rollout": round(1e3 * cpu / rows, 2),
                                   "rollouts_per_s": round(rows / wall, 1), "load": os.getloadavg()[0]}  # fmt: skip
                        print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 400)
