"""Issue 28: killed parts of a sharded collection end quietly, and a resume finishes the job.

A sharded driver (``+num_workers=2``) killed by SIGKILL or SIGTERM while its workers collect:
every process of the run ends (none left running), nothing on stderr but gymbench's own lines (no
BrokenPipeError traceback from a worker), and a resume gives every rollout exactly once. SIGTERM
is one line saying where the shards are kept and how to go on, and exit status 143. With Ray,
gymbench's progress actor killed mid-run: one warning, and the run completes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.hostile

SIM = ["+sim.step_base_s=0.02", "+sim.step_per_seq_s=0", "+sim.output_tokens_mean=8"]
HANG_S = 120
"""Far past a shard's length: a process of the run still alive then will never end by itself."""


def _tasks(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps({"responses_create_params": {"input": f"q{i}"}}) + "\n" for i in range(count)))
    return path


def _args(tasks: Path, out: Path, *extra: str) -> list[str]:
    return ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+num_samples_in_parallel=2",
            "+num_repeats=4", "+save_results=false", "+progress=false", *SIM, *extra]  # fmt: skip


def _pairs(path: Path) -> list[tuple[int, int]]:
    return sorted((r["task_index"], r["rollout_index"]) for r in map(json.loads, path.read_text().splitlines()))


def _group_ends(pgid: int) -> bool:
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    os.killpg(pgid, signal.SIGKILL)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_workers_of_a_killed_driver_exit_quietly_and_a_resume_completes(tmp_path: Path, signum: int) -> None:
    tasks, out = _tasks(tmp_path / "tasks.jsonl", 30), tmp_path / "out.jsonl"
    stderr = tmp_path / "stderr"
    with open(stderr, "w") as err:
        driver = subprocess.Popen([sys.executable, "-m", "gymbench.cli", *_args(tasks, out, "+num_workers=2")],
                                  stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)  # fmt: skip
        shards = out.with_name("out.jsonl.shards")
        deadline = time.monotonic() + HANG_S
        while not any(p.stat().st_size for p in shards.glob("shard-*.jsonl")):  # workers are collecting
            assert driver.poll() is None and time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.005)
        driver.send_signal(signum)
        status = driver.wait(HANG_S)
        assert _group_ends(driver.pid), "a worker outlived its driver"
    said = stderr.read_text()
    assert "Traceback" not in said and "BrokenPipeError" not in said, said
    assert all(line.startswith("gymbench: ") for line in said.splitlines()), said
    if signum == signal.SIGTERM:  # as Ctrl-C, with the shell's status for SIGTERM: what is kept, how to go on
        assert status == 143, (status, said)
        told = [line for line in said.splitlines() if "terminated" in line]
        assert len(told) == 1 and f"the shards so far are in {shards}" in told[0], said
        assert "Run the same command again" in told[0], said
    resumed = subprocess.run([sys.executable, "-m", "gymbench.cli", *_args(tasks, out, "+num_workers=2",
                              "+resume=true")], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert _pairs(out) == [(t, r) for t in range(30) for r in range(4)]


RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
KILL_THE_BOARD = """
import sys
import gymbench.collect.launch_ray as launch_ray
original = launch_ray.RayLauncher._progress
def progress(self):
    if self.running and self.board is not None and not getattr(self, "killed", False):
        self.killed = True
        self.ray.kill(self.board)  # gymbench's progress actor, killed for real while shards run
    return original(self)
launch_ray.RayLauncher._progress = progress
import gymbench.cli as cli
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed: pip install 'gymbench[ray]'")
def test_a_killed_progress_actor_is_one_warning_and_the_run_completes(tmp_path: Path) -> None:
    tasks, out = _tasks(tmp_path / "tasks.jsonl", 12), tmp_path / "out.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", KILL_THE_BOARD, *_args(tasks, out, "+num_workers=2", "+launcher=ray")],
        capture_output=True, text=True, timeout=600, env={**os.environ, **RAY_ENV},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "ActorDiedError" not in done.stderr.replace("(ActorDiedError)", "")
    warnings = [line for line in done.stderr.splitlines() if "progress actor is gone" in line]
    assert len(warnings) == 1 and "the run goes on" in warnings[0], done.stderr
    assert _pairs(out) == [(t, r) for t in range(12) for r in range(4)]
