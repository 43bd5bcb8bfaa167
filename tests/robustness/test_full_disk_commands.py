"""Issue 28: a full disk (ENOSPC) for the writing commands :mod:`.test_full_disk` does not cover.

``tune`` (its results record, its plot), ``diagnose`` (its results record), ``train --save``,
``calibrate`` (the calibration file) and ``calibrate-sim +output=`` (the profile), each pointed at a
real small tmpfs with no room left: one ``gymbench: error:`` line naming the file that was not
written and what to do, no traceback, exit 2, and nothing left on the full disk (no hidden
``.NAME.*.tmp``, no half a file). Each runs on tiny settings: a few seconds of work.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gymbench.cli import main
from tests.fuzz.bad_records import record
from tests.sim.fake_llama import StepModel, fake_llama_server

from .small_fs import SmallFs

pytestmark = pytest.mark.hostile

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "gymbench" / "data" / "example_tasks.jsonl"
KNEE16 = ["+sim.max_num_seqs=16", "+sim.step_base_s=0.01", "+sim.step_per_seq_s=0.0005", "+sim.output_tokens_mean=8"]
"""A small engine whose probes take seconds (as tests/tune uses)."""
PROBE = [f"+input_jsonl_fpath={TASKS}", "+max_batches=8", "+progress=false", *KNEE16]
TINY_TRAIN = ["--size", "tiny", "--steps", "1", "--warmup", "0", "--no-progress", "--no-memory", "--no-flops",
              "--device", "cpu"]  # fmt: skip


def gymbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gymbench.cli", *args], capture_output=True, text=True, timeout=300)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


def _the_error(status: int, stderr: str, disk: SmallFs, name: str) -> str:
    """The one error line a full disk gives: what was not written, that nothing partial is left, what to do."""
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("gymbench: error:")]
    assert status == 2 and len(errors) == 1, (status, stderr)
    assert "No space left on device" in errors[0] and "free space first" in errors[0], errors
    assert f"{name} was not written and no partial copy is left" in errors[0], errors
    assert _files(disk.root) == ["filler"] and disk.left_behind() == []
    return errors[0]


@pytest.mark.parametrize("command", ["tune", "diagnose"])
def test_a_probe_commands_record_on_a_full_disk(disk: SmallFs, tmp_path: Path, command: str) -> None:
    extra = ["+start=4", f"+plot={tmp_path / 'tune.png'}"] if command == "tune" else ["+low=2", "+high=8"]
    disk.fill()
    done = gymbench(command, *PROBE, *extra, f"+results_dir={disk.root / 'results'}")
    line = _the_error(done.returncode, done.stderr, disk, f"_{command}.json")
    assert "choose another results_dir" in line
    assert "| parallelism |" in done.stdout or "verdict: " in done.stdout  # the result itself was printed


def test_tunes_plot_on_a_full_disk_keeps_the_record(disk: SmallFs, tmp_path: Path) -> None:
    """The plot is rendered in memory and written whole, after the record: no half a PNG, no traceback."""
    results = tmp_path / "results"
    disk.fill()
    done = gymbench("tune", *PROBE, "+start=4", f"+plot={disk.root / 'tune.png'}", f"+results_dir={results}")
    line = _the_error(done.returncode, done.stderr, disk, "tune.png")
    assert "choose another +plot" in line
    assert len(list(results.glob("*/*_tune.json"))) == 1  # the record went first, to a disk with room


def test_train_save_on_a_full_disk(disk: SmallFs) -> None:
    disk.fill()
    done = gymbench("train", *TINY_TRAIN, "--save", "tiny", "--results-dir", str(disk.root / "results"))
    assert "choose another results_dir" in _the_error(done.returncode, done.stderr, disk, "_tiny.json")


def test_calibrate_on_a_full_disk(disk: SmallFs) -> None:
    machine = disk.root / "results" / "fuzz-machine"
    machine.mkdir(parents=True)
    for index in range(3):  # three stored reruns to learn the noise from
        run = record(f"aa-{index}", 1 + 0.01 * index)
        (machine / f"2026010{index + 1}T000000_aa-{index}.json").write_text(json.dumps(run))
    stored = _files(disk.root)
    disk.fill()
    done = gymbench("calibrate", "--from", "aa-*", "--results-dir", str(disk.root / "results"))
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("gymbench: error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    assert "_calibration.json was not written and no partial copy is left (free space first)" in errors[0], errors
    assert "choose another --results-dir" in errors[0]
    assert _files(disk.root) == sorted([*stored, "filler"]) and disk.left_behind() == []


def test_calibrate_sim_profile_on_a_full_disk(disk: SmallFs, capsys: pytest.CaptureFixture[str]) -> None:
    disk.fill()
    with fake_llama_server(StepModel(slots=2)) as url:
        code = main(["calibrate-sim", "--from", url, f"+output={disk.root / 'p.yaml'}", "+concurrencies=1,2",
                     "+warmup_s=0.1", "+window_s=0.3", "+max_tokens=4", "+progress=false"])  # fmt: skip
    line = _the_error(code, capsys.readouterr().err, disk, "p.yaml")
    assert "choose another +output and run calibrate-sim again" in line
