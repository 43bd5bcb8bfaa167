"""Round trip through a JSON file written by real pytest-benchmark, and its own tooling reading ours."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gymbench.cli import main
from gymbench.errors import ResultsFileError
from gymbench.gate.pytest_benchmark import (
    load_pytest_benchmark,
    record_from_pytest_benchmark,
    to_pytest_benchmark,
)

pytest_plugins = ["pytester"]

SUITE = """
import pytest

@pytest.mark.parametrize("n", [10, 1000])
def test_sum(benchmark, n):
    benchmark(sum, range(n))

def test_sorted(benchmark):
    benchmark.extra_info["note"] = "kept"
    benchmark(sorted, list(range(100, 0, -1)))
"""


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Run real pytest-benchmark: ``--benchmark-json`` (raw data included) and a plain save (none)."""
    folder = tmp_path_factory.mktemp("pb")
    (folder / "test_pb.py").write_text(SUITE)
    command = [sys.executable, "-m", "pytest", "-p", "no:gymbench", "-p", "no:cacheprovider", "-q"]
    command += ["--benchmark-max-time=0.02", "test_pb.py", f"--benchmark-json={folder / 'with_data.json'}"]
    command += ["--benchmark-save=summary", f"--benchmark-storage=file://{folder / 'store'}"]
    subprocess.run(command, cwd=folder, check=True, capture_output=True)
    shutil.copyfile(folder / "with_data.json", folder / "with_data_copy.json")  # compare refuses a run with itself
    return {"data": folder / "with_data.json", "copy": folder / "with_data_copy.json",
            "summary": next((folder / "store").glob("*/*_summary.json"))}  # fmt: skip


def test_import_keeps_every_sample(written: dict[str, Path]) -> None:
    original = json.loads(written["data"].read_text())
    record = load_pytest_benchmark(written["data"])
    assert [b.id for b in record.benchmarks] == [
        "test_pb.py::test_sum[n=10]",
        "test_pb.py::test_sum[n=1000]",
        "test_pb.py::test_sorted",
    ]
    for bench, entry in zip(record.benchmarks, original["benchmarks"], strict=True):
        time = bench.metrics["time"]
        assert list(time.samples) == entry["stats"]["data"]
        assert time.value == pytest.approx(entry["stats"]["median"])
    assert record.kind == "pytest-benchmark"


def test_export_round_trip_reproduces_pytest_benchmarks_stats(written: dict[str, Path]) -> None:
    original = json.loads(written["data"].read_text())
    exported = to_pytest_benchmark(load_pytest_benchmark(written["data"]))
    for before, after in zip(original["benchmarks"], exported["benchmarks"], strict=True):
        numbers_after = {k: v for k, v in after["stats"].items() if k != "data"}
        numbers_before = {k: v for k, v in before["stats"].items() if k != "data"}
        assert after["stats"]["data"] == before["stats"]["data"]
        assert numbers_after == pytest.approx(numbers_before)
        for key in ("name", "fullname", "params", "param", "group", "extra_info", "options"):
            assert after[key] == before[key], key
    again = record_from_pytest_benchmark(json.loads(json.dumps(exported)), "again.json")
    assert again.benchmarks == load_pytest_benchmark(written["data"]).benchmarks


def test_pytest_benchmark_compare_reads_our_export(written: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "exported.json"
    target.write_text("an older export\n")
    assert main(["export", str(written["data"]), "-o", str(target)]) == 0
    assert list(tmp_path.glob(".exported.json*")) == []  # written beside it, then renamed over it
    tool = shutil.which("pytest-benchmark")
    assert tool is not None
    done = subprocess.run([tool, "compare", str(target)], capture_output=True, text=True, check=True)
    assert "test_sum[10]" in done.stdout and "test_sorted" in done.stdout


def test_compare_gates_pytest_benchmark_files_directly(
    written: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", str(written["data"]), str(written["copy"]), "--results-dir", "nowhere"]) == 3
    assert "gate: INCONCLUSIVE — 0 gated, 3 ungated: nothing was gated" in capsys.readouterr().out
    args = [
        "compare",
        str(written["data"]),
        str(written["copy"]),
        "--results-dir",
        "nowhere",
        "--fail-on",
        "regression",
    ]
    assert main(args) == 0


def test_summary_only_files_import_as_single_values(written: dict[str, Path]) -> None:
    record = load_pytest_benchmark(written["summary"])
    stats = json.loads(written["summary"].read_text())["benchmarks"][0]["stats"]
    assert record.benchmarks[0].metrics["time"].samples == (stats["median"],)
    exported = to_pytest_benchmark(record)["benchmarks"][0]["stats"]
    assert exported == stats


def test_import_command_saves_into_the_store(written: dict[str, Path], tmp_path: Path) -> None:
    assert main(["import", str(written["data"]), "--results-dir", str(tmp_path), "--name", "pb"]) == 0
    assert len(list(tmp_path.glob("*/*_pb.json"))) == 1


def test_broken_pytest_benchmark_files_are_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "pb.json"
    path.write_text(json.dumps({"machine_info": {}, "benchmarks": [{"stats": {}}]}))
    with pytest.raises(ResultsFileError, match=r"pb.json: benchmarks\[0\] has no 'median'"):
        load_pytest_benchmark(path)
    path.write_text(json.dumps({"benchmarks": []}))
    with pytest.raises(ResultsFileError, match="not a pytest-benchmark JSON file"):
        load_pytest_benchmark(path)


def test_a_file_written_on_this_machine_is_this_machines(
    written: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gymbench.fingerprint import machine_info

    assert load_pytest_benchmark(written["data"]).fingerprint["machine"]["key"] == machine_info()["key"]
    args = ["compare", str(written["data"]), str(written["copy"]), "--results-dir", str(tmp_path)]
    assert main([*args, "--fail-on", "regression"]) == 0
    assert "was measured on machine" not in capsys.readouterr().out
    assert main(["import", str(written["data"]), "--results-dir", str(tmp_path), "--name", "pb"]) == 0
    capsys.readouterr()
    assert main(["baselines", "--results-dir", str(tmp_path)]) == 0
    listing = capsys.readouterr().out
    assert "no saved runs" not in listing and f"{machine_info()['key']}/" in listing and "_pb.json" in listing


def test_a_file_from_another_host_keeps_a_foreign_key(written: dict[str, Path]) -> None:
    from gymbench.fingerprint import machine_info

    data = json.loads(written["data"].read_text())
    data["machine_info"]["node"] = "another-host"
    assert record_from_pytest_benchmark(data, "x.json").fingerprint["machine"]["key"] != machine_info()["key"]


def test_export_says_what_it_left_out_and_fails_when_nothing_is_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gymbench.record import BenchmarkResult, Metric, ResultsRecord, save_record
    from tests.gate.synthetic import fingerprint

    timed = BenchmarkResult("a.py::test_timed", {}, {"time": Metric.from_samples([1.0, 2.0], "s", "lower")})
    rate = BenchmarkResult("a.py::test_rate", {}, {"rollouts_per_s": Metric(5.0, "1/s", "higher")})
    path = save_record(
        ResultsRecord("r", [timed, rate], fingerprint(), "2026-01-01T00:00:00+00:00"), tmp_path / "r.json"
    )
    assert main(["export", str(path), "-o", str(tmp_path / "x.json")]) == 0
    captured = capsys.readouterr()
    assert "left out a.py::test_rate: no 'time' metric; it has rollouts_per_s (export one with --metric" in captured.err
    assert "exported 1 benchmarks" in captured.out and "left out 1" in captured.out
    only_rate = save_record(ResultsRecord("s", [rate], fingerprint(), "2026-01-01T00:00:00+00:00"), tmp_path / "s.json")
    assert main(["export", str(only_rate), "-o", str(tmp_path / "y.json")]) == 2
    assert "nothing was exported; choose one of its metrics with --metric (rollouts_per_s)" in capsys.readouterr().err
    assert not (tmp_path / "y.json").exists()
    assert main(["export", str(only_rate), "-o", str(tmp_path / "y.json"), "--metric", "rollouts_per_s"]) == 0
