"""Records a comparison must not take at their word: a metric whose unit changed between the sides,
or between the runs of one side; records that are not regular files."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gymbench.gate.compare import compare_runs
from gymbench.gate.gate import Outcome, outcome_of
from gymbench.record import Metric, ResultsRecord
from tests.gate.synthetic import save_run, suite


def in_furlongs(record: ResultsRecord) -> ResultsRecord:
    def changed(metric: Metric) -> Metric:
        return replace(metric, unit="furlongs")

    benches = [replace(b, metrics={k: changed(m) for k, m in b.metrics.items()}) for b in record.benchmarks]
    return replace(record, benchmarks=benches)


@pytest.mark.parametrize("furlongs_on", ["baseline", "candidate"])
def test_a_metric_whose_unit_changed_is_not_compared_in_either_direction(furlongs_on: str) -> None:
    """It compared as PASS one way and gated 10 regressions the other."""
    base, cand = suite(1, benchmarks=10), suite(2, benchmarks=10, factor=3.0)
    if furlongs_on == "baseline":
        base = in_furlongs(base)
    else:
        cand = in_furlongs(cand)
    result = compare_runs([base], [cand])
    assert result.comparisons == []
    said = [s for s in result.skipped if "its unit changed" in s.why]
    assert len(said) == 10 and all(s.inconclusive for s in said)
    assert ("s -> furlongs" if furlongs_on == "candidate" else "furlongs -> s") in said[0].why
    assert outcome_of(result) is Outcome.INCONCLUSIVE


def test_a_comparison_that_compared_nothing_is_no_pass() -> None:
    """An A/B run whose benchmarks had nothing to interleave said "gate: PASS — 0 gated, 0 ungated"."""
    from gymbench.gate.format import summary_line

    empty = replace(suite(1, benchmarks=1), benchmarks=[])
    result = compare_runs([empty], [replace(suite(2, benchmarks=1), benchmarks=[])])
    assert result.comparisons == [] and outcome_of(result) is Outcome.INCONCLUSIVE
    assert "0 gated, 0 ungated: nothing was compared" in summary_line(result, outcome_of(result).value)


def test_a_side_whose_runs_disagree_on_a_unit_is_not_compared() -> None:
    """Several runs a side (a name glob): the last run's unit stood for the side, so a baseline of
    one run in furlongs and one in seconds pooled both against the candidate's seconds."""
    base = [in_furlongs(suite(1, benchmarks=3)), suite(3, benchmarks=3)]
    result = compare_runs(base, [suite(2, benchmarks=3, factor=3.0)])
    assert result.comparisons == [] and outcome_of(result) is Outcome.INCONCLUSIVE
    assert {s.why.split(";")[0] for s in result.skipped} == {"its unit changed (furlongs/s -> s)"}


@pytest.mark.parametrize("direction", ["s to furlongs", "furlongs to s"])
def test_compare_says_each_unit_change_once_and_counts_it_in_either_direction(tmp_path: Path, direction: str) -> None:
    """Through the CLI: exit 3 (inconclusive) both ways, a line per metric, the count in the gate's
    line, and no second note per benchmark (it read "has no any metric on both sides")."""
    seconds = save_run(tmp_path, suite(1, benchmarks=4), "20260101T000000")
    furlongs = save_run(tmp_path, in_furlongs(suite(2, benchmarks=4)), "20260102T000000")
    base, cand = (seconds, furlongs) if direction == "s to furlongs" else (furlongs, seconds)
    done = subprocess.run([sys.executable, "-m", "gymbench.cli", "compare", str(base), str(cand)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    units = "s -> furlongs" if direction == "s to furlongs" else "furlongs -> s"
    assert done.stdout.count(f"time: its unit changed ({units}); a ratio across units means nothing") == 4
    assert "4 not compared (unit changed)" in done.stdout.splitlines()[-1]
    assert "on both sides" not in done.stdout, done.stdout


def special_file(tmp_path: Path, kind: str) -> Path:
    """A FIFO (with and without ``.json``; nobody writes to it), a socket, or a device."""
    import os
    import stat

    if kind == "device":
        return Path("/dev/zero")
    path = tmp_path / {"fifo.json": "record.json", "fifo": "record", "socket": "record.sock"}[kind]
    os.mknod(path, 0o600 | (stat.S_IFSOCK if kind == "socket" else stat.S_IFIFO))  # no privilege needed
    return path


SAID = {"fifo.json": "is a FIFO", "fifo": "is a FIFO", "socket": "is a socket", "device": "is a device"}


@pytest.mark.parametrize("kind", ["fifo.json", "fifo", "socket", "device"])
@pytest.mark.parametrize("where", ["baseline", "candidate", "--calibration"])
def test_a_record_or_calibration_that_is_not_a_regular_file_is_refused_before_it_is_opened(
    tmp_path: Path, kind: str, where: str
) -> None:
    """A FIFO as ``--calibration`` blocked forever; as a record ``.json`` it waited 30 s for a writer
    (and a gymbench record is read twice, which a pipe cannot give); named without ``.json`` it was
    'no baseline', as if it did not exist. Now one line, before anything is opened."""
    record = save_run(tmp_path, suite(1, benchmarks=2), "20260101T000000")
    other = save_run(tmp_path, suite(2, benchmarks=2), "20260102T000000")
    odd = special_file(tmp_path, kind)
    words = {"baseline": [odd, other], "candidate": [record, odd], "--calibration": [record, other, where, odd]}
    done = subprocess.run([sys.executable, "-m", "gymbench.cli", "compare", *map(str, words[where])],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    what = "calibration" if where == "--calibration" else "results"
    assert done.stderr.splitlines() == [
        f"gymbench: error: {odd}: {SAID[kind]}{' (a named pipe, or <(...))' if 'fifo' in kind else ''}, "
        f"not a {what} file; pass a regular file (save what a pipe writes to a file first)"
    ], done.stderr


@pytest.mark.parametrize("where", ["baseline", "--calibration"])
def test_a_huge_record_or_calibration_is_refused_by_its_size_before_it_is_read(tmp_path: Path, where: str) -> None:
    """A sparse 300 MiB file: no disk used, and refused from its size (a calibration was read whole)."""
    from gymbench.jsonio import MAX_JSON_FILE_BYTES, MiB

    huge = tmp_path / "huge.json"
    with huge.open("wb") as handle:
        handle.truncate(MAX_JSON_FILE_BYTES + 44 * MiB)
    record = save_run(tmp_path, suite(1, benchmarks=2), "20260101T000000")
    other = save_run(tmp_path, suite(2, benchmarks=2), "20260102T000000")
    words = [huge, record] if where == "baseline" else [record, other, where, huge]
    done = subprocess.run([sys.executable, "-m", "gymbench.cli", "compare", *map(str, words)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"gymbench: error: {huge}: 300 MiB, larger than any ") and "check the path" in line, line


def pytest_benchmark_file(path: Path, fullnames: list[str]) -> Path:
    import json

    stats = {"min": 0.9, "max": 1.1, "mean": 1.0, "median": 1.0, "stddev": 0.1, "rounds": 3, "iterations": 1,
             "data": [1.0, 1.1, 0.9]}  # fmt: skip
    benches = [{"name": n.split("::")[-1], "fullname": n, "group": None, "params": None, "param": None,
                "options": {}, "extra_info": {}, "stats": {**stats, "data": [x * (i + 1) for x in stats["data"]]}}
               for i, n in enumerate(fullnames)]  # fmt: skip
    machine = {"node": "n", "processor": "p", "machine": "x86_64", "python_version": "3.11", "release": "r",
               "system": "Linux", "cpu": {"brand_raw": "cpu", "count": 2}}  # fmt: skip
    data = {"machine_info": machine, "commit_info": {}, "benchmarks": benches, "datetime": "2026-01-01T00:00:00"}
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("kind", "command"),
    [
        (kind, side)
        for kind in ("gymbench record", "pytest-benchmark")
        for side in ("compare-baseline", "compare-candidate")
    ]
    + [("pytest-benchmark", "import")],  # import reads pytest-benchmark files only
)
def test_a_benchmark_listed_twice_is_refused_naming_it_and_the_file(tmp_path: Path, kind: str, command: str) -> None:
    """Read as one or the other, a repeated entry compared silently; a pytest-benchmark file's
    repeats were compared and imported (the store then held a record no command could read)."""
    if kind == "gymbench record":
        good = save_run(tmp_path, suite(1, benchmarks=3), "20260101T000000")
        record = suite(2, benchmarks=3)
        bad = save_run(tmp_path, replace(record, benchmarks=[*record.benchmarks, record.benchmarks[1]]), "20260102T0")
    else:
        good = pytest_benchmark_file(tmp_path / "good.json", ["t.py::test_a", "t.py::test_b"])
        bad = pytest_benchmark_file(tmp_path / "bad.json", ["t.py::test_a", "t.py::test_b", "t.py::test_a"])
    words = {"compare-baseline": ["compare", bad, good], "compare-candidate": ["compare", good, bad],
             "import": ["import", bad, "--results-dir", tmp_path / "store"]}[command]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "gymbench.cli", *map(str, words)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    name = "t.py::test_a" if kind == "pytest-benchmark" else "bench.py::test_1"
    assert line.startswith(f"gymbench: error: {bad}: benchmark {name!r} is listed twice (entries "), line
    assert not (tmp_path / "store").exists()
