"""The pytest plugin end to end, in a separate pytest run (pytester)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from gymbench.record import load_record, results_schema
from gymbench.testing import install_entry_point_plugin

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")


BENCH_FILE = """
import asyncio
import pytest

@pytest.mark.parametrize("n", [10, 100])
def test_sum(gymbench, n):
    assert gymbench.measure(sum, range(n)) == n * (n - 1) // 2
    gymbench.record("items", n, unit="items", direction="higher")

@pytest.mark.gymbench(group="async", min_effect=0.2)
@pytest.mark.asyncio
async def test_sleep(gymbench):
    await gymbench.ameasure(asyncio.sleep, 0)

def test_failing_benchmark_is_not_recorded(gymbench):
    gymbench.measure(lambda: None)
    assert False
"""


def _saved(results_dir: Path) -> list[Path]:
    return sorted(results_dir.glob("*/*.json"))


def test_benchmarks_run_are_saved_and_summarised(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BENCH_FILE)
    result = pytester.runpytest("--gymbench-quick", "--gymbench-save", "first")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*gymbench*",
            "benchmark*metric*median*IQR*unit*n",
            "test_bench.py::test_sum[[]n=10[]]*time*s*",
            "test_bench.py::test_sleep*time*",
            "quick mode*",
            "results record: *first.json",
        ]
    )
    files = _saved(pytester.path / "results")
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    jsonschema.Draft202012Validator(results_schema()).validate(data)
    record = load_record(files[0])
    ids = [bench.id for bench in record.benchmarks]
    assert ids == [
        "test_bench.py::test_sum[n=10]",
        "test_bench.py::test_sum[n=100]",
        "test_bench.py::test_sleep",
    ]
    sleep = record.benchmark("test_bench.py::test_sleep")
    assert sleep.group == "async" and sleep.options == {"min_effect": 0.2}
    assert record.benchmark("test_bench.py::test_sum[n=100]").metrics["items"].value == 100
    assert record.fingerprint["machine"]["key"] in str(files[0])


def test_without_save_nothing_is_written(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BENCH_FILE)
    result = pytester.runpytest("--gymbench-quick", "-k", "sum")
    result.assert_outcomes(passed=2, deselected=2)
    assert not (pytester.path / "results").exists()
    result.stdout.fnmatch_lines(["*gymbench*"])


def test_results_dir_option(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(test_bench=BENCH_FILE)
    out = tmp_path / "elsewhere"
    pytester.runpytest("--gymbench-quick", "--gymbench-save", "x", "--gymbench-results-dir", str(out), "-k", "sleep")
    assert len(_saved(out)) == 1


def test_unsafe_save_name_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BENCH_FILE)
    result = pytester.runpytest("--gymbench-save", "../escape")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gymbench-save*letters, digits*"])


def test_overlong_save_name_is_refused_at_session_start(pytester: pytest.Pytester) -> None:
    """The name follows +run_name's rule (at most 101 characters): refused before any benchmark runs,
    not in every benchmark's teardown."""
    pytester.makepyfile(test_bench=BENCH_FILE)
    result = pytester.runpytest("--gymbench-quick", "--gymbench-save", "n" * 120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gymbench-save*letters, digits*"])
    assert "teardown" not in result.stdout.str()


EVENT_PLUGIN = """
from gymbench import hookimpl

EVENTS = []

@hookimpl
def gymbench_run_start(run):
    EVENTS.append(("start", run.kind))

@hookimpl
def gymbench_update_fingerprint(fingerprint):
    fingerprint["machine"]["cluster"] = "unit-test"

@hookimpl
def gymbench_run_finish(run, record):
    EVENTS.append(("finish", len(record.benchmarks)))
    print("EVENTS", EVENTS)
"""


def test_run_events_and_fingerprint_hook_reach_entry_point_plugins(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = "gymbench_event_plugin"
    install_entry_point_plugin(tmp_path, module, EVENT_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    pytester.makepyfile(test_bench=BENCH_FILE)
    result = pytester.runpytest("--gymbench-quick", "--gymbench-save", "ev", "-k", "sum", "-s")
    sys.modules.pop(module, None)
    result.stdout.fnmatch_lines(["*EVENTS [[]('start', 'pytest'), ('finish', 2)[]]*"])
    record = load_record(_saved(pytester.path / "results")[0])
    assert record.fingerprint["machine"]["cluster"] == "unit-test"


def test_importing_the_plugin_stays_light() -> None:
    code = (
        "import sys, gymbench.pytest.plugin; "
        "print(sorted(m for m in ('torch', 'aiohttp', 'numpy', 'scipy', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _machine_key() -> str:
    from gymbench.fingerprint import machine_info

    return str(machine_info()["key"])


@pytest.mark.hostile
@pytest.mark.parametrize("blocked", ["results_dir", "machine_key_dir", "parent"])
def test_results_dir_that_cannot_hold_the_record_is_refused_at_session_start(
    pytester: pytest.Pytester, tmp_path: Path, blocked: str
) -> None:
    """A file where the results dir, its parent or its machine-key folder should be: one usage line
    before any benchmark runs, not a traceback at save after the whole session."""
    pytester.makepyfile(test_bench=BENCH_FILE)
    results = tmp_path / "results"
    if blocked == "results_dir":
        results.write_text("a file\n")
    elif blocked == "parent":
        tmp_path.joinpath("file").write_text("a file\n")
        results = tmp_path / "file" / "results"
    else:
        results.mkdir()
        (results / _machine_key()).write_text("a file\n")
    result = pytester.runpytest("--gymbench-quick", "--gymbench-save", "x", "--gymbench-results-dir", str(results))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gymbench-results-dir:*cannot write the results record there*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert "passed" not in result.stdout.str()


@pytest.mark.hostile
def test_unwritable_results_dir_is_refused_at_session_start(pytester: pytest.Pytester, tmp_path: Path) -> None:
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes through directory permissions")
    pytester.makepyfile(test_bench=BENCH_FILE)
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o500)
    try:
        result = pytester.runpytest("--gymbench-quick", "--gymbench-save", "x", "--gymbench-results-dir", str(results))
    finally:
        results.chmod(0o700)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gymbench-results-dir:*cannot write the results record there*"])
