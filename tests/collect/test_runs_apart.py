"""No run mixes with or overwrites another: one run per output, overwrite clears the earlier run,
resume and merge refuse parts made differently (issue 24, "Runs that mix or overwrite each other")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymbench.cli import main
from gymbench.collect.output_lock import lock_path, output_lock
from gymbench.collect.shards import shards_dir

from ..rollout.test_dataset import write_tasks
from .test_collect_cli import FAST_SIM, gymbench, rows

pytestmark = pytest.mark.hostile  # a case of the adversarial sweep (issue 24): benches/hostile_count.sh

SLOW_SIM = ["+sim.step_base_s=0.05", "+sim.step_per_seq_s=0", "+sim.output_tokens_mean=8", "+num_samples_in_parallel=1"]
WAIT_S = 60
"""How long a test waits for a child to reach a point (a window for work, not a timing assertion)."""


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def held_lock(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """Another process holding the lock of ``tmp_path/o.jsonl`` until the test ends: (output, its PID)."""
    output = tmp_path / "o.jsonl"
    code = (
        "import sys\nfrom gymbench.collect.output_lock import output_lock\n"
        f"with output_lock({str(output)!r}):\n    print('held', flush=True)\n    sys.stdin.read()\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    yield output, holder.pid
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait(timeout=WAIT_S)


def second_run(kind: str, tasks: Path, output: Path, tmp_path: Path) -> list[str]:
    base = ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={output}", "+save_results=false",
            "+progress=false", *FAST_SIM]  # fmt: skip
    if kind == "merge":
        part = tmp_path / "part.jsonl"
        part.write_text(json.dumps({"task_index": 0, "rollout_index": 0, "status": "ok"}) + "\n")
        return ["merge-rollouts", str(part), "-o", str(output), "--overwrite"]
    extra = {"single": [], "sharded": ["+num_workers=2"], "resume": ["+resume=true"], "overwrite": ["+overwrite=true"],
             "sharded-resume": ["+num_workers=2", "+resume=true"]}[kind]  # fmt: skip
    return base + extra


KINDS = ["single", "sharded", "resume", "overwrite", "sharded-resume", "merge"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_second_run_on_a_locked_output_is_refused_naming_the_first(
    kind: str, tmp_path: Path, held_lock: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    output, pid = held_lock
    before = b"row of the first run\n"
    output.write_bytes(before)
    tasks = write_tasks(tmp_path / "tasks.jsonl", 4)
    assert main(second_run(kind, tasks, output, tmp_path)) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and f"another gymbench run (PID {pid}) is writing it" in error[0], error
    assert output.read_bytes() == before and not shards_dir(output).exists()  # nothing touched


def test_two_collects_on_one_output_never_interleave(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 20)
    output = tmp_path / "o.jsonl"
    args = ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={output}", "+save_results=false",
            "+progress=false", *SLOW_SIM]  # fmt: skip
    first = subprocess.Popen([sys.executable, "-m", "gymbench.cli", *args], stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: output.exists() and output.stat().st_size > 0, "the first run's first row")
        second = gymbench(*args)
        assert second.returncode == 2
        assert f"another gymbench run (PID {first.pid}) is writing it" in second.stderr
        assert first.wait(timeout=WAIT_S * 2) == 0
    finally:
        first.kill()
        first.wait()
    assert sorted(row["task_index"] for row in rows(output)) == list(range(20))  # one run's rows, once each
    assert not lock_path(output).exists()  # removed when the run ends


def test_a_lock_left_by_a_killed_run_does_not_block(tmp_path: Path) -> None:
    output = tmp_path / "o.jsonl"
    code = f"from gymbench.collect.output_lock import output_lock\nimport os\nwith output_lock({str(output)!r}):\n"
    code += "    print('held', flush=True)\n    os.kill(os.getpid(), 9)\n"
    holder = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT_S)
    assert holder.returncode == -signal.SIGKILL and lock_path(output).exists()  # left behind, with its PID
    tasks = write_tasks(tmp_path / "tasks.jsonl", 3)
    assert main(["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={output}", "+save_results=false",
                 "+progress=false", *FAST_SIM]) == 0  # fmt: skip
    assert len(rows(output)) == 3 and not lock_path(output).exists()


def test_the_lock_is_released_when_the_block_raises(tmp_path: Path) -> None:
    output = tmp_path / "o.jsonl"
    with pytest.raises(RuntimeError), output_lock(output):
        assert lock_path(output).read_text().strip() == str(os.getpid())
        raise RuntimeError
    with output_lock(output):  # taken again at once
        pass


def test_overwrite_then_kill_then_resume_never_merges_the_earlier_runs_shards(tmp_path: Path) -> None:
    """The issue's sequence: sharded run; fresh single-process +overwrite run, SIGKILLed after its first
    row; resume. Before the fix the resume continued the old OUT.shards/ and merged its rows over the new."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", 6)
    output = tmp_path / "o.jsonl"
    args = ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={output}", "+save_results=false",
            "+progress=false", *SLOW_SIM]  # fmt: skip
    assert gymbench(*args, "+num_workers=2").returncode == 0
    shards = shards_dir(output)
    for path in [output, *shards.glob("shard-*.jsonl")]:  # mark the earlier run's rows
        path.write_text("".join(json.dumps({**row, "earlier_run": True}) + "\n" for row in rows(path)))
    (output.with_name(output.name + ".metrics.json")).write_text('{"earlier": true}')
    fresh = subprocess.Popen([sys.executable, "-m", "gymbench.cli", *args, "+overwrite=true"], stderr=subprocess.PIPE)
    try:
        wait_for(lambda: any("earlier_run" not in row for row in _complete_rows(output)), "the new run's first row")
    finally:
        fresh.send_signal(signal.SIGKILL)
        fresh.wait()
    assert not shards.exists() and not output.with_name(output.name + ".metrics.json").exists()
    resumed = gymbench(*args, "+resume=true")
    assert resumed.returncode == 0, resumed.stderr
    written = rows(output)
    assert sorted(row["task_index"] for row in written) == list(range(6))
    assert not any("earlier_run" in row for row in written), "rows of the earlier run were merged in"


def _complete_rows(path: Path) -> list[dict]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.split("\n")[:-1] if line]


@pytest.mark.parametrize("workers", [1, 2])
def test_overwrite_removes_everything_of_the_earlier_run(workers: int, tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 4)
    output = tmp_path / "o.jsonl"
    args = ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={output}", "+save_results=false",
            "+progress=false", *FAST_SIM]  # fmt: skip
    assert main([*args, "+num_workers=2", "+limit=2"]) == 0
    stale = shards_dir(output) / "shard-00099.jsonl"
    stale.write_text("{}\n")
    assert main([*args, f"+num_workers={workers}", "+overwrite=true"]) == 0
    assert not stale.exists()
    assert sorted(row["task_index"] for row in rows(output)) == list(range(4))
