"""Instruction counts under callgrind: proportional to the work, equal across runs, honest without valgrind."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from gymbench import load_record
from gymbench.fingerprint import valgrind_version
from gymbench.gate.callgrind import (
    COUNTING_ENV,
    CountingUnavailable,
    InstructionCounter,
    callgrind_command,
)
from gymbench.gate.instructions import NOT_COUNTED_ASYNC, unavailable_note
from gymbench.measure import MeasureSettings, Recorder, instruction_metric

LOOP_BENCH = """
import pytest


def loop(n):
    total = 0
    for i in range(n):
        total += i & 7
    return total


@pytest.mark.parametrize("n", {sizes})
def test_loop(gymbench, n):
    gymbench.measure(loop, n)


@pytest.mark.gymbench(instructions=False)
def test_not_counted(gymbench):
    gymbench.measure(loop, 10)


@pytest.mark.asyncio
async def test_async_is_timed_only(gymbench):
    async def tick():
        return 1

    await gymbench.ameasure(tick)
"""
needs_valgrind = pytest.mark.skipif(valgrind_version() is None, reason="valgrind is not installed")


def counts(pytester: pytest.Pytester, sizes: list[int], name: str) -> dict[str, tuple[float, ...]]:
    """Run the loop benchmarks with ``--gymbench-instructions``; instruction samples by benchmark id."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_loop=LOOP_BENCH.format(sizes=sizes))
    result = pytester.runpytest(
        "--gymbench-instructions", "--gymbench-quick", "--gymbench-save", name,
        "--gymbench-results-dir", str(pytester.path / "results"), "--gymbench-instructions-timeout", "600",
    )  # fmt: skip
    result.assert_outcomes(passed=len(sizes) + 2)
    (saved,) = (pytester.path / "results").glob(f"*/*_{name}.json")
    record = load_record(saved)
    assert record.fingerprint["software"]["valgrind"] == valgrind_version()
    found = {b.id: b.metrics["instructions"].samples for b in record.benchmarks if "instructions" in b.metrics}
    assert {b.id for b in record.benchmarks} - set(found) == {"test_loop.py::test_not_counted",
                                                            "test_loop.py::test_async_is_timed_only"}  # fmt: skip
    return found


@needs_valgrind
@pytest.mark.slow
def test_counts_are_proportional_to_the_work(pytester: pytest.Pytester) -> None:
    """Through pytest: one session, whose callgrind child (the slow part) counts both sizes.

    Medians of the five brackets: a one-off in one bracket of the ten (seen once on a loaded
    machine, min ÷ max 1.954) is not the work; the brackets' spread is what
    :func:`test_two_equal_runs_count_within_half_a_percent` bounds.
    """
    found = counts(pytester, [20_000, 40_000], "first")
    small, large = found["test_loop.py::test_loop[n=20000]"], found["test_loop.py::test_loop[n=40000]"]
    assert 1.98 < statistics.median(large) / statistics.median(small) < 2.02, (small, large)


COUNT_IN_A_PROCESS = """
import sys
from pathlib import Path

from gymbench.gate.callgrind import InstructionCounter


def loop(n):
    total = 0
    for i in range(n):
        total += i & 7
    return total


counter = InstructionCounter(Path(sys.argv[1]))
print(*(counter.count(lambda: loop(20_000), sample) for sample in range(3)))
"""


def counted_in_a_fresh_process(out: Path) -> list[int]:
    """Three brackets in a new process under callgrind, without pytest (whose start-up is the slow part)."""
    out.mkdir()
    argv = callgrind_command(out, [sys.executable, "-c", COUNT_IN_A_PROCESS, str(out)])
    done = subprocess.run(argv, env={**os.environ, **COUNTING_ENV}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return [int(count) for count in done.stdout.split()]


@needs_valgrind
@pytest.mark.slow
def test_two_equal_runs_count_within_half_a_percent(tmp_path: Path) -> None:
    first, again = counted_in_a_fresh_process(tmp_path / "first"), counted_in_a_fresh_process(tmp_path / "again")
    assert min(first + again) > 20_000  # at least an instruction per iteration: the bracket saw the loop
    assert max(first + again) / min(first + again) < 1.005


COUNT_BESIDE_A_THREAD = """
import sys
import threading
from pathlib import Path

from gymbench.gate.callgrind import InstructionCounter


def loop(n):
    total = 0
    for i in range(n):
        total += i & 7
    return total


counter = InstructionCounter(Path(sys.argv[1]))
alone = [counter.count(lambda: loop(20_000), sample) for sample in range(3)]
stop = threading.Event()


def spin():
    spins = 0
    while not stop.is_set():
        spins += 1


threading.Thread(target=spin, daemon=True).start()
beside = [counter.count(lambda: loop(20_000), sample) for sample in range(3)]
stop.set()
print(*alone, *beside)
"""


@needs_valgrind
@pytest.mark.slow
def test_a_busy_second_thread_does_not_change_the_count(tmp_path: Path) -> None:
    """Another Python thread wanting the GIL made the measured thread hand it over every 5 ms of
    wall time, and each handover counted: counts grew with the bracket's duration, i.e. the load."""
    out = tmp_path / "out"
    out.mkdir()
    argv = callgrind_command(out, [sys.executable, "-c", COUNT_BESIDE_A_THREAD, str(out)])
    done = subprocess.run(argv, env={**os.environ, **COUNTING_ENV}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    counts = [int(count) for count in done.stdout.split()]
    alone, beside = counts[:3], counts[3:]
    assert max(beside) / min(alone) < 1.0002, (alone, beside)  # before: +0.08-0.12 %, varying with the load


def test_without_valgrind_the_metric_is_absent_with_a_note(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(pytester.path))  # no valgrind on it
    valgrind_version.cache_clear()
    try:
        assert unavailable_note() is not None
        pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
        pytester.makepyfile(test_loop=LOOP_BENCH.format(sizes=[100]))
        result = pytester.runpytest(
            "--gymbench-instructions", "--gymbench-quick", "--gymbench-save", "plain",
            "--gymbench-results-dir", str(pytester.path / "results"),
        )  # fmt: skip
    finally:
        valgrind_version.cache_clear()
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["gymbench: instruction counts not recorded: valgrind is not installed*"])
    (saved,) = (pytester.path / "results").glob("*/*_plain.json")
    record = load_record(saved)
    assert record.fingerprint["software"]["valgrind"] is None
    assert all(set(b.metrics) == {"time", "time_cpu"} for b in record.benchmarks)
    why = {b.name.split("::")[-1]: b.extra["instructions"] for b in record.benchmarks}
    assert why["test_async_is_timed_only"] == NOT_COUNTED_ASYNC
    assert why["test_not_counted"] == "not counted: marked @pytest.mark.gymbench(instructions=False)"
    assert why["test_loop"].startswith("not counted (instruction counts not recorded: valgrind is not installed")
    assert record.fingerprint["code"]["root"] == str(pytester.path.resolve())  # which code it measured


def test_the_marker_asks_for_counts_without_the_flag(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``instructions=True`` on one benchmark counts it (here: says valgrind is missing); others are not asked."""
    monkeypatch.setenv("PATH", str(pytester.path))
    valgrind_version.cache_clear()
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_marked="""
import pytest


@pytest.mark.gymbench(instructions=True)
def test_marked(gymbench):
    gymbench.measure(sum, range(10))
"""
    )
    try:
        marked = pytester.runpytest("--gymbench-quick")
        pytester.makepyfile(test_marked="def test_plain(gymbench):\n    gymbench.measure(sum, range(10))\n")
        plain = pytester.runpytest("--gymbench-quick")
    finally:
        valgrind_version.cache_clear()
    marked.assert_outcomes(passed=1)
    marked.stdout.fnmatch_lines(["gymbench: instruction counts not recorded: valgrind is not installed*"])
    plain.assert_outcomes(passed=1)
    assert "instruction counts" not in plain.stdout.str()


@needs_valgrind
def test_a_callgrind_child_past_its_time_is_stopped_with_a_note(pytester: pytest.Pytester) -> None:
    """Bounded: pytest alone takes seconds to start under callgrind, far more than the 0.2 s allowed."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_loop=LOOP_BENCH.format(sizes=[100]))
    result = pytester.runpytest(
        "--gymbench-instructions", "--gymbench-quick", "--gymbench-save", "stopped",
        "--gymbench-results-dir", str(pytester.path / "results"), "--gymbench-instructions-timeout", "0.2",
    )  # fmt: skip
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["gymbench: instruction counts: callgrind stopped after 0.2 s*0 of 1 benchmarks*"])
    (saved,) = (pytester.path / "results").glob("*/*_stopped.json")
    assert all(set(b.metrics) == {"time", "time_cpu"} for b in load_record(saved).benchmarks)


def test_outside_callgrind_counting_is_refused_not_zero(tmp_path: Path) -> None:
    counter = InstructionCounter(tmp_path)
    with pytest.raises(CountingUnavailable, match="no instructions"):
        counter.count(lambda: None)
    recorder = Recorder(MeasureSettings(), counter=counter)
    with pytest.raises(CountingUnavailable):
        recorder.measure(sum, [1, 2])
    assert "instructions" not in recorder.metrics


def test_instruction_metric_names() -> None:
    assert instruction_metric("time") == "instructions"
    assert instruction_metric("step") == "step_instructions"
