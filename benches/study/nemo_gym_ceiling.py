"""NeMo Gym 0.7.0's example stack: its ceiling by server, diagnose's verdict, and a check from ``/proc``.

``python -m benches.study.nemo_gym_ceiling [RUNS]`` starts the example stack (simple agent,
example_single_tool_call resources server, its environment server, the ``openai_model`` adapter)
in front of gymbench's simulator, twice: the simulator instant (NeMo Gym's own dispatch is the
limit) and slow (50 ms steps, 2 sequences: the model is the limit). Against each it runs
``gymbench diagnose`` RUNS times (default 3) and then, as a check that owes nothing to diagnose,
one ``gymbench collect`` (1,000 distinct tasks; 200 with the slow model) at the high probe's
parallelism with each server's CPU read from ``/proc`` before and after. One JSON line per run;
the figures are in docs/nemo-gym.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gymbench import load_record
from gymbench.engine.nemo_gym_stack import NeMoGymStack, start_nemo_gym_stack
from gymbench.engine.nemo_gym_venv import find_venv
from gymbench.sim import running_sim_server
from tests.nemo_gym.test_real_stack import distinct_tasks

INSTANT = {"step_base_s": 0.0, "step_per_seq_s": 0.0, "prefill_per_token_s": 0.0}
SLOW = {**INSTANT, "step_base_s": 0.05, "max_num_seqs": 2, "output_tokens_mean": 8}


def proc_cpu(pids: list[int]) -> dict[int, float]:
    """CPU seconds per process (user + system) from ``/proc/PID/stat``, read here by this script
    (``ps`` gives whole seconds, too coarse for a few seconds of CPU): a check that owes nothing to
    gymbench's own reader."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = {}
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        found[pid] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime: fields 14 and 15 of stat(5)
    return found


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "gymbench.cli", *args], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def diagnose(stack: NeMoGymStack, tasks: Path, work: Path, low: int, high: int) -> dict[str, Any]:
    results = work / "results"
    done = cli("diagnose", f"+agent_name={stack.agent_name}", f"+head_server.port={stack.head_port}",
               f"+input_jsonl_fpath={tasks}", f"+low={low}", f"+high={high}", "+progress=false",
               f"+results_dir={results}")  # fmt: skip
    [bench] = load_record(next(results.glob("*/*_diagnose.json"))).benchmarks
    extra = bench.extra
    verdict_line = next((line for line in done.stdout.splitlines() if "Bottleneck" in line), "")
    return {
        "verdict": extra.get("verdict"),
        "line": verdict_line.strip(),
        "rates": {k: round(m.value, 2) for k, m in bench.metrics.items() if "rollouts_per_s" in k},
        "servers": {
            s["name"]: {k: s.get(k) for k in ("role", "cpu_ms_per_rollout", "cpu_s")} for s in extra.get("servers", [])
        },
        "load": round(os.getloadavg()[0], 1),
    }


def by_ps(stack: NeMoGymStack, tasks: Path, work: Path, parallel: int) -> dict[str, Any]:
    """One collect, each server's CPU per rollout as ``/proc`` gave it. Without the aggregate-metrics
    file: simple_agent hands ``/aggregate_metrics`` to the resources server, whose aggregation of
    1,000 rows cost it 4.3 s of CPU at the end, which diagnose's probes never ask for."""
    pids = stack.pids()
    before = proc_cpu(list(pids.values()))
    out = work / "check" / "rollouts.jsonl"
    out.parent.mkdir()
    cli("collect", f"+agent_name={stack.agent_name}", f"+head_server.port={stack.head_port}",
        f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", f"+num_samples_in_parallel={parallel}",
        "+save_results=false", "+progress=false", "+disable_aggregation=true")  # fmt: skip
    after = proc_cpu(list(pids.values()))
    rows = len(out.read_text().splitlines())
    return {name: round(1e3 * (after[pid] - before[pid]) / rows, 2) for name, pid in pids.items()} | {"rows": rows}


def head(tasks: Path, out: Path, rows: int) -> Path:
    out.write_text("".join(tasks.read_text().splitlines(keepends=True)[:rows]))
    return out


def main(runs: int) -> None:
    venv = find_venv(build=False)
    work = Path(tempfile.mkdtemp(prefix="gymbench-ceiling-"))
    tasks = distinct_tasks(venv, work / "tasks.jsonl", 1000)
    for label, sim_settings, (low, high) in (("instant", INSTANT, (4, 32)), ("slow", SLOW, (4, 16))):
        with (
            running_sim_server(**sim_settings) as sim,
            start_nemo_gym_stack(venv, sim.base_url, sim.config.model) as stack,
        ):
            for run in range(runs):
                (work / f"{label}-{run}").mkdir()
                found = diagnose(stack, tasks, work / f"{label}-{run}", low, high)
                print(json.dumps({"model": label, "run": run, **found}), flush=True)
            (work / f"{label}-ps").mkdir()
            checked = tasks if label == "instant" else head(tasks, work / "tasks-200.jsonl", 200)  # 3-4 rollouts/s
            figures = by_ps(stack, checked, work / f"{label}-ps", high)
            print(json.dumps({"model": label, "proc_ms_per_rollout": figures}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
