"""Nothing replaces what it should not: records saved in the same second keep distinct names, and a
device node or FIFO given as an output is written through, never replaced (issue 24)."""

from __future__ import annotations

import functools
import json
import os
import random
import stat
import threading
from pathlib import Path

import pytest

from gymbench import record as record_module
from gymbench.cli import main
from gymbench.errors import GymbenchError
from gymbench.fingerprint import collect_fingerprint
from gymbench.gate.store import BaselineStore
from gymbench.jsonio import AtomicFile, write_json_atomic
from gymbench.plugins import get_plugin_manager
from gymbench.record import BenchmarkResult, Metric, ResultsRecord, load_record, save_to_store
from gymbench.run import Run

pytestmark = pytest.mark.hostile  # a case of the adversarial sweep (issue 24): benches/hostile_count.sh

SECOND = "2026-11-22T07:39:55+00:00"


@functools.lru_cache(maxsize=1)
def _fingerprint() -> dict:
    fingerprint = collect_fingerprint()
    fingerprint["machine"]["key"] = "m"
    return fingerprint


def record(value: float, name: str = "split") -> ResultsRecord:
    bench = BenchmarkResult("collect", metrics={"x": Metric(value, "s", "lower")})
    return ResultsRecord(name, [bench], _fingerprint(), created_at=SECOND, kind="collect")


@pytest.mark.parametrize("count", [2, 3, 12])
def test_records_of_one_name_saved_in_one_second_all_survive(count: int, tmp_path: Path) -> None:
    paths = [save_to_store(record(float(i)), tmp_path) for i in range(count)]
    assert len(set(paths)) == count
    assert [load_record(p).benchmarks[0].metrics["x"].value for p in paths] == [float(i) for i in range(count)]
    runs = BaselineStore(tmp_path).runs("m")
    assert [run.path for run in runs] == paths  # oldest first: the counter sorts after the plain name
    assert {run.name for run in runs} == {"split"}  # the name is still the run's name
    assert not [p for p in (tmp_path / "m").iterdir() if p.name.startswith(".")]  # no temporary left


def _interleaved_saves(count: int, seed: int) -> list[list[str]]:
    chooser = random.Random(seed)
    names = ["split", "split-0002", "a", "collect", "x_y", "nemo.gym"]
    return [[chooser.choice(names) for _ in range(chooser.randint(2, 9))] for _ in range(count)]


@pytest.mark.parametrize("order", _interleaved_saves(30, seed=2405), ids=",".join)
def test_interleaved_runs_of_several_names_in_one_second_each_keep_a_record(order: list[str], tmp_path: Path) -> None:
    paths = [save_to_store(record(float(i), name), tmp_path) for i, name in enumerate(order)]
    assert len(set(paths)) == len(order)
    loaded = [load_record(path) for path in paths]
    assert [(r.name, r.benchmarks[0].metrics["x"].value) for r in loaded] == [
        (n, float(i)) for i, n in enumerate(order)
    ]
    store = BaselineStore(tmp_path).runs("m")
    for name in set(order):  # the store still finds each run by its name, oldest first
        assert [run.path for run in store if run.name == name] == [
            p for p, n in zip(paths, order, strict=True) if n == name
        ]


def test_an_existing_record_is_never_replaced(tmp_path: Path) -> None:
    first = save_to_store(record(1.0), tmp_path)
    before = first.read_bytes()
    second = save_to_store(record(2.0), tmp_path)
    assert first.read_bytes() == before and second != first


def test_runs_finishing_in_the_same_second_save_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NeMo Gym-style manual splits launched together: the clock is faked, not slept on."""
    monkeypatch.setattr(record_module, "utc_now", lambda: SECOND)
    plugins = get_plugin_manager()
    saved = []
    for value in (1.0, 2.0):
        with Run(plugins, "collect", "split", results_dir=tmp_path) as run:
            run.finish([BenchmarkResult("collect", metrics={"x": Metric(value, "s", "lower")})], say=False)
            saved.append(run.saved_path)
    assert saved[0] != saved[1] and all(p is not None and p.exists() for p in saved)


def test_every_name_taken_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_module, "MOST_RECORDS_PER_SECOND", 2)
    save_to_store(record(1.0), tmp_path)
    save_to_store(record(2.0), tmp_path)
    with pytest.raises(GymbenchError, match="every name for it is taken"):
        save_to_store(record(3.0), tmp_path)


# --- device nodes and FIFOs as outputs


@pytest.fixture
def dev_null(tmp_path: Path) -> Path:
    """A private twin of ``/dev/null`` (the same device numbers): a broken writer replaces this one,
    never the machine's, which other processes need."""
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root, and replacing one is what root's writes did")
    path = tmp_path / "null"
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return path


def test_a_device_node_stays_a_device(dev_null: Path) -> None:
    write_json_atomic(dev_null, {"a": 1})
    with AtomicFile(dev_null) as target:
        target.write(b"rows\n")
    with pytest.raises(ValueError), AtomicFile(dev_null) as target:  # an error: nothing to take back, no harm
        target.write(b"half")
        raise ValueError
    assert stat.S_ISCHR(os.stat(dev_null).st_mode)
    assert sorted(p.name for p in dev_null.parent.iterdir()) == ["null"]  # no temporary, no lock file


@pytest.mark.parametrize("command", ["merge", "timings-csv", "timings-json"])
def test_commands_writing_to_a_device_leave_it_a_device(command: str, dev_null: Path, tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"task_index": 0, "rollout_index": 0, "status": "ok", "timings": {"total": 1.0}}) + "\n")
    args = {
        "merge": ["merge-rollouts", str(rows), "-o", str(dev_null)],
        "timings-csv": ["timings", str(rows), "-o", str(dev_null), "--format", "csv"],
        "timings-json": ["timings", str(rows), "-o", str(dev_null), "--format", "json"],
    }[command]
    assert main(args) == 0
    assert stat.S_ISCHR(os.stat(dev_null).st_mode)
    assert not (tmp_path / "null.lock").exists()


@pytest.mark.parametrize("text", [False, True])
def test_a_fifo_is_written_through_to_its_reader(text: bool, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    for _ in range(5000):  # until the reader has it open (before, opening is "nothing reads")
        try:
            target = AtomicFile(fifo, text=text)
            break
        except GymbenchError:
            threading.Event().wait(0.01)
    target.write("row\n" if text else b"row\n")
    assert target.commit() == fifo
    reader.join(timeout=30)
    assert got == [b"row\n"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_fifo_nobody_reads_is_one_clear_error_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(GymbenchError, match="a FIFO that nothing reads; start its reader first"):
        write_json_atomic(fifo, {"a": 1})
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_regular_file_is_still_replaced_atomically(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    target.write_text("old")
    inode = target.stat().st_ino
    write_json_atomic(target, {"a": 1})
    assert json.loads(target.read_text()) == {"a": 1} and target.stat().st_ino != inode
