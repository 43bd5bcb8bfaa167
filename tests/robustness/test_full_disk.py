"""Issue 28: a full disk (ENOSPC) for every command that writes, on a real small tmpfs.

Each writing command (merge-rollouts, timings -o, report -o and --markdown, export -o, collect
writing rows, collect's end-of-run files, a sharded collect's final merge) is pointed at a
file system with no room left: one ``gymbench: error:`` line (collect: its summary, then the
rollouts without a row), no traceback, no hidden ``.OUT.*.tmp`` left, the inputs unchanged; then,
with space freed, the same command (with ``+resume=true`` for collect) finishes the job with every
rollout exactly once.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .small_fs import SmallFs

pytestmark = pytest.mark.hostile

FAST_SIM = ["+sim.step_base_s=0.004", "+sim.step_per_seq_s=0", "+sim.output_tokens_mean=8"]


def gymbench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gymbench.cli", *args], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def _tasks(path: Path, count: int, pad: int = 0) -> Path:
    path.write_text("".join(json.dumps({"responses_create_params": {"input": f"q{i}" + "x" * pad},
                                        "expected_answer": str(i)}) + "\n" for i in range(count)))  # fmt: skip
    return path


def _collect(tasks: Path, out: Path, *extra: str) -> list[str]:
    return ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+num_samples_in_parallel=4",
            "+save_results=false", "+progress=false", *FAST_SIM, *extra]  # fmt: skip


def _pairs(path: Path) -> list[tuple[int, int]]:
    return [(row["task_index"], row["rollout_index"]) for row in map(json.loads, path.read_text().splitlines())]


def _no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real rollouts file (40 rows) and a results record beside it, on an ordinary disk."""
    root = tmp_path_factory.mktemp("rollouts")
    out = root / "r.jsonl"
    done = gymbench(*_collect(_tasks(root / "tasks.jsonl", 20, pad=300), out, "+num_repeats=2",
                              "+save_results=true", f"+results_dir={root / 'results'}"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def _record(rollouts: Path) -> Path:
    return next((rollouts.parent / "results").glob("*/*_collect.json"))


WRITERS = {
    "merge-rollouts": lambda r, o: ["merge-rollouts", str(r), "-o", str(o / "merged.jsonl")],
    "timings_csv": lambda r, o: ["timings", str(r), "-o", str(o / "t.csv")],
    "timings_json": lambda r, o: ["timings", str(r), "-o", str(o / "t.json"), "--format", "json"],
    "report": lambda r, o: ["report", str(_record(r)), "-o", str(o / "r.html")],
    "report_markdown": lambda r, o: ["report", str(_record(r)), "-o", str(o / "r.html"), "--markdown", str(o / "r.md")],
    "export": lambda r, o: ["export", str(_record(r)), "-o", str(o / "e.json"), "--metric", "latency"],
    "import": lambda r, o: ["import", str(_exported(r)), "--results-dir", str(o / "results")],
    "compare_markdown": lambda r, o: ["compare", str(_record(r)), str(_copy(r)), "--markdown", str(o / "c.md")],
}


def _copy(rollouts: Path) -> Path:
    """The record under another name: compare refuses to compare a file with itself."""
    path = rollouts.with_name("copy_collect.json")
    if not path.exists():
        shutil.copyfile(_record(rollouts), path)
    return path


def _exported(rollouts: Path) -> Path:
    """A pytest-benchmark file to import (what ``export`` writes)."""
    path = rollouts.with_name("exported.json")
    if not path.exists():
        assert gymbench("export", str(_record(rollouts)), "-o", str(path), "--metric", "latency").returncode == 0
    return path


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_a_full_disk_is_one_line_and_leaves_nothing(disk: SmallFs, rollouts: Path, command: str) -> None:
    before = rollouts.read_bytes()
    disk.fill()
    done = gymbench(*WRITERS[command](rollouts, disk.root))
    _no_traceback(done)
    errors = [line for line in done.stderr.splitlines() if line.startswith("gymbench: error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    assert "No space left on device" in errors[0] and "no partial copy is left" in errors[0], errors
    assert _files(disk.root) == ["filler"] and rollouts.read_bytes() == before
    disk.empty()
    again = gymbench(*WRITERS[command](rollouts, disk.root))
    assert again.returncode == 0, again.stderr


def test_collect_on_a_disk_that_fills_says_its_summary_and_what_to_redo(disk: SmallFs, tmp_path: Path) -> None:
    tasks = _tasks(tmp_path / "tasks.jsonl", 40, pad=1000)  # ~1.3 kB rows: 80 of them need ~100 kB
    out = disk.root / "out.jsonl"
    disk.fill(leave=12 * 4096)
    done = gymbench(*_collect(tasks, out, "+num_repeats=2"))
    _no_traceback(done)
    assert done.returncode == 1, done.stderr
    assert "completed " in done.stderr and "rollouts: " in done.stderr  # the summary
    assert "cannot write rollouts (No space left on device)" in done.stderr
    assert "rollouts without a row (task/rollout): " in done.stderr and "+resume=true" in done.stderr
    assert "not written: " in done.stderr and "out.jsonl.metrics.json" in done.stderr
    assert not out.with_name("out.jsonl.metrics.json").exists() and disk.left_behind() == []
    disk.empty()
    resumed = gymbench(*_collect(tasks, out, "+num_repeats=2", "+resume=true"))
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(_pairs(out)) == [(t, r) for t in range(40) for r in range(2)]
    assert out.with_name("out.jsonl.metrics.json").exists() and disk.left_behind() == []


def test_collect_whose_end_of_run_files_do_not_fit_says_so(disk: SmallFs, tmp_path: Path) -> None:
    """The rollouts fit, the metrics file after them does not: the run says it was not written."""
    tasks = _tasks(tmp_path / "tasks.jsonl", 6)
    rehearsal = tmp_path / "rehearsal.jsonl"
    assert gymbench(*_collect(tasks, rehearsal)).returncode == 0
    pages = sum(-(-p.stat().st_size // 4096) for p in (rehearsal, rehearsal.with_name("rehearsal.jsonl.run.json")))
    metrics_pages = -(-rehearsal.with_name("rehearsal.jsonl.metrics.json").stat().st_size // 4096)
    assert metrics_pages >= 2  # so a page of slack below cannot hold it
    out = disk.root / "out.jsonl"
    disk.fill(leave=(pages + 1) * 4096)
    done = gymbench(*_collect(tasks, out))
    _no_traceback(done)
    assert done.returncode == 1, done.stderr
    assert sorted(_pairs(out)) == [(t, 0) for t in range(6)]
    line = next(line for line in done.stderr.splitlines() if "not written: " in line)
    assert "out.jsonl.metrics.json" in line and "+resume=true" in line
    assert not out.with_name("out.jsonl.metrics.json").exists() and disk.left_behind() == []
    disk.empty()
    again = gymbench(*_collect(tasks, out, "+resume=true"))
    assert again.returncode == 0 and out.with_name("out.jsonl.metrics.json").exists(), again.stderr


def test_collect_whose_results_directory_is_full_keeps_its_rollouts(disk: SmallFs, tmp_path: Path) -> None:
    tasks, out = _tasks(tmp_path / "tasks.jsonl", 6), tmp_path / "out.jsonl"
    disk.fill()
    done = gymbench(*_collect(tasks, out, "+save_results=true", f"+results_dir={disk.root / 'results'}"))
    _no_traceback(done)
    assert done.returncode == 1, done.stderr
    line = next(line for line in done.stderr.splitlines() if "not written: " in line)
    assert "the results record" in line and "No space left on device" in line, line
    assert sorted(_pairs(out)) == [(t, 0) for t in range(6)] and out.with_name("out.jsonl.metrics.json").exists()
    assert _files(disk.root) == ["filler"]


def test_a_sharded_collects_final_merge_on_a_full_disk_keeps_the_shards(disk: SmallFs, tmp_path: Path) -> None:
    tasks = _tasks(tmp_path / "tasks.jsonl", 40, pad=1000)
    out = disk.root / "out.jsonl"
    disk.fill(leave=70 * 4096)  # 8 shards (~57 pages with their .run.json) fit; their merged copy (45) does not
    done = gymbench(*_collect(tasks, out, "+num_repeats=2", "+num_workers=2"))
    _no_traceback(done)
    errors = [line for line in done.stderr.splitlines() if line.startswith("gymbench: error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    assert "No space left on device" in errors[0] and "every rollout is kept in" in errors[0], errors
    assert "+resume=true" in errors[0] and not out.exists() and disk.left_behind() == []
    disk.empty()
    resumed = gymbench(*_collect(tasks, out, "+num_repeats=2", "+num_workers=2", "+resume=true"))
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(_pairs(out)) == [(t, r) for t in range(40) for r in range(2)]
