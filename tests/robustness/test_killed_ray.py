"""Issue 41: Ray's parts killed mid-shard, for real (SIGKILL of the process).

A Ray worker running a shard (``ray::run_shard_task``) killed: the driver hears the task is lost,
redoes the shard (retries are the driver's, Ray's own are off), and the run completes with every
rollout exactly once and no traceback. The driver itself killed under ``+launcher=ray``: Ray's
processes it started end with it, and a resume gives every rollout exactly once.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .test_killed_driver import HANG_S, RAY_ENV, _args, _group_ends, _pairs, _tasks

NO_RAY = "ray is not installed: pip install 'gymbench[ray]'"
pytestmark = [pytest.mark.hostile, pytest.mark.ray, pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason=NO_RAY)]  # fmt: skip
SLOW_SIM = ["+sim.step_base_s=0.05"]
"""Shards long enough (seconds) that a kill lands mid-shard."""


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def shard_workers(driver: int) -> list[int]:
    """PIDs of Ray worker processes running a shard of this driver's run now (Ray names them after
    the task; the local cluster's processes descend from the driver, so another run's are left be)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                title = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            pid = int(entry.name)
            ancestor = pid
            while ancestor > 1 and ancestor != driver:
                ancestor = _parent(ancestor)
            if b"ray::run_shard_task" in title and ancestor == driver:
                found.append(pid)
    return found


def wait_for(predicate: object, driver: subprocess.Popen[bytes], stderr: Path) -> object:
    deadline = time.monotonic() + HANG_S
    while True:
        value = predicate()  # type: ignore[operator]
        if value:
            return value
        assert driver.poll() is None and time.monotonic() < deadline, stderr.read_text()
        time.sleep(0.05)


def ray_run(tmp_path: Path) -> tuple[Path, list[str]]:
    """The rows file and the command line of a sharded collection of 16 tasks x 4 on Ray."""
    tasks, out = _tasks(tmp_path / "tasks.jsonl", 16), tmp_path / "out.jsonl"
    return out, _args(tasks, out, "+num_workers=2", "+launcher=ray", *SLOW_SIM)


def test_a_killed_ray_worker_loses_its_shard_and_the_driver_redoes_it(tmp_path: Path) -> None:
    out, argv = ray_run(tmp_path)
    stderr = tmp_path / "stderr"
    with open(stderr, "w") as err:
        driver = subprocess.Popen([sys.executable, "-m", "gymbench.cli", *argv], stdout=subprocess.DEVNULL,
                                  stderr=err, env={**os.environ, **RAY_ENV}, start_new_session=True)  # fmt: skip
        try:
            victim = wait_for(lambda: shard_workers(driver.pid), driver, stderr)[0]  # type: ignore[index]
            time.sleep(1.0)  # mid-shard: the shard has started collecting
            os.kill(victim, signal.SIGKILL)
            status = driver.wait(HANG_S * 3)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
    said = stderr.read_text()
    assert status == 0, said
    assert "Traceback" not in said, said
    assert "Ray lost the task" in said or "lost" in said, said  # the loss is said, not hidden
    assert _pairs(out) == [(t, r) for t in range(16) for r in range(4)]


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_ray_driver_takes_its_ray_processes_with_it_and_a_resume_completes(
    tmp_path: Path, signum: int
) -> None:
    out, argv = ray_run(tmp_path)
    stderr = tmp_path / "stderr"
    with open(stderr, "w") as err:
        driver = subprocess.Popen([sys.executable, "-m", "gymbench.cli", *argv], stdout=subprocess.DEVNULL,
                                  stderr=err, env={**os.environ, **RAY_ENV}, start_new_session=True)  # fmt: skip
        workers = wait_for(lambda: shard_workers(driver.pid), driver, stderr)
        time.sleep(1.0)
        driver.send_signal(signum)
        driver.wait(HANG_S)
        assert _group_ends(driver.pid), "a process of the driver's group outlived it"
        deadline = time.monotonic() + HANG_S
        while any(Path(f"/proc/{pid}").exists() for pid in workers):  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "a Ray worker running a shard outlived its driver"
            time.sleep(0.1)
    said = stderr.read_text()
    assert "Traceback" not in said, said
    resumed = subprocess.run([sys.executable, "-m", "gymbench.cli", *argv, "+resume=true"], capture_output=True,
                             text=True, timeout=600, env={**os.environ, **RAY_ENV})  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert _pairs(out) == [(t, r) for t in range(16) for r in range(4)]
