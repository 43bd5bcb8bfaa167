"""Issue 28: a merge killed mid-write leaves no hidden partial file for long.

``merge-rollouts`` is killed (SIGKILL, SIGTERM) once its temporary ``.OUT.*.tmp`` exists: SIGTERM
removes it on the way out (one line, exit 143); SIGKILL cannot, and the next writer of the same
path removes it, recognising it as abandoned because no process holds its lock. A temporary file
a live writer holds is never touched.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gymbench.jsonio import AtomicFile, remove_abandoned

pytestmark = pytest.mark.hostile


def _parts(tmp_path: Path, rows: int = 200_000) -> list[Path]:
    """Two parts big enough that a merge takes a while to write."""
    parts = []
    for half in range(2):
        path = tmp_path / f"part{half}.jsonl"
        with open(path, "w") as handle:
            for task in range(half * rows, (half + 1) * rows):
                handle.write(json.dumps({"task_index": task, "rollout_index": 0, "status": "ok", "reward": 1.0,
                                         "timings": {"total": 0.1}, "pad": "x" * 100}) + "\n")  # fmt: skip
        parts.append(path)
    return parts


def _temporaries(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}.*.tmp"))


def _kill_while_writing(parts: list[Path], out: Path, signum: int) -> subprocess.CompletedProcess[str] | None:
    """Run the merge and send ``signum`` once its temporary file exists; None when it finished first."""
    process = subprocess.Popen([sys.executable, "-m", "gymbench.cli", "merge-rollouts", *map(str, parts), "-o",
                                str(out)], stderr=subprocess.PIPE, text=True)  # fmt: skip
    while not _temporaries(out) and process.poll() is None:
        time.sleep(0.001)
    if process.poll() is not None:
        process.communicate()
        return None
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, "", stderr)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_merge_leaves_nothing_behind_after_the_next_run(tmp_path: Path, signum: int) -> None:
    parts, out = _parts(tmp_path), tmp_path / "merged.jsonl"
    for _ in range(5):  # the merge may win the race on a fast machine: try again
        killed = _kill_while_writing(parts, out, signum)
        if killed is not None:
            break
        out.unlink()
    else:
        pytest.skip("the merge always finished before the signal landed")
    assert "Traceback" not in killed.stderr and not out.exists()
    if signum == signal.SIGTERM:
        assert killed.returncode == 143 and _temporaries(out) == [], killed.stderr
        said = [line for line in killed.stderr.splitlines() if not line.startswith("gymbench: note:")]
        assert said == [f"gymbench: terminated; nothing was written to {out} and the files merged are unchanged"]
    else:
        assert len(_temporaries(out)) == 1  # what SIGKILL leaves, until the next run
    again = subprocess.run([sys.executable, "-m", "gymbench.cli", "merge-rollouts", *map(str, parts), "-o", str(out)],
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert _temporaries(out) == [] and sum(1 for _ in out.open()) == 400_000


def test_a_temporary_file_a_live_writer_holds_is_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "x.json"
    abandoned = tmp_path / ".x.json.abc123.tmp"
    abandoned.write_text("half")
    other = tmp_path / ".y.json.abc123.tmp"  # another output's: not ours to judge
    other.write_text("half")
    with AtomicFile(out) as live:  # its own creation removed the abandoned one
        live.write(b"{}")
        assert not abandoned.exists() and other.exists()
        assert remove_abandoned(out) == [] and live.temporary.exists()
    assert out.read_bytes() == b"{}" and _temporaries(out) == []


LEFT_BETWEEN = """
import os, sys
from gymbench.jsonio import AtomicFile

made = AtomicFile(sys.argv[1])  # a SIGTERM's SystemExit here never reaches a with block's exit
if os.fork() == 0:
    raise SystemExit(0)  # a forked child exits through atexit too, and leaves its parent's file alone
os.wait()
print(made.temporary.exists())
raise SystemExit(143)
"""


def test_a_temporary_file_no_block_discarded_is_removed_when_the_process_exits(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    done = subprocess.run([sys.executable, "-c", LEFT_BETWEEN, str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 143 and done.stdout.strip() == "True", done.stderr
    assert _temporaries(out) == [] and not out.exists()
