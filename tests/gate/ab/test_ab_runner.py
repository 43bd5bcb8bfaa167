"""The interleaved A/B gate against two real commits of a throwaway git repository.

The repository holds a tiny package and a benchmark of it (and a 256 x 256 numpy matmul, the one
benchmark whose verdict says threads were forced to 1); one commit makes the package do eight
times the work. The commands run for real (git worktrees, worker processes pinned to one CPU, the
CLI's and pytest's exit codes). The minimum effect is 30 %, but a metric whose A/A calibration is
noisier than that is judged against its minimum detectable effect instead, and on a 2-core machine
at load 8-30 that was 136 %: a 100 % slowdown then passed. The slowdown is 700 %, five times that
noise, so the verdicts hold on a machine loaded well past its core count.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = """
def work(n=20000):
    total = 0
    for _ in range({passes}):
        for i in range(n):
            total += i % 7
    return total
"""
BENCH = """
import numpy as np
import slowpkg

MATRIX = np.ones((256, 256))


def test_work(gymbench):
    gymbench.measure(slowpkg.work)


def test_record_only(gymbench):
    gymbench.record("answer", 42.0, "count", "higher")


def test_matmul(gymbench):
    gymbench.measure(np.dot, MATRIX, MATRIX)
"""
PYPROJECT = """
[tool.gymbench.compare]
min_effect = 0.3

[tool.pytest.ini_options]
asyncio_default_fixture_loop_scope = "function"
"""
AB_ARGS = ["--rounds", "6", "--round-time-s", "0.01"]
pytestmark = pytest.mark.slow


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit(repo: Path, message: str, files: dict[str, str]) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    git(repo, "tag", message)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tags ``base``, ``slow`` (eight times the work, one more benchmark) and ``broken`` (off ``base``)."""
    root = tmp_path_factory.mktemp("abrepo")
    git(root, "init", "-q")
    git(root, "config", "user.email", "ab@example.com")
    git(root, "config", "user.name", "ab")
    package = PACKAGE.format(passes=1)
    commit(root, "base", {"pyproject.toml": PYPROJECT, "slowpkg/__init__.py": package, "benches/test_work.py": BENCH})
    git(root, "checkout", "-q", "-b", "side")
    commit(root, "broken", {"benches/test_work.py": BENCH + "\ndef broken(:\n"})
    git(root, "checkout", "-q", "-")
    extra = "\n\ndef test_new(gymbench):\n    gymbench.measure(slowpkg.work, 10)\n"
    commit(root, "slow", {"slowpkg/__init__.py": PACKAGE.format(passes=8), "benches/test_work.py": BENCH + extra})
    return root


def run(repo: Path, *command: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(command), cwd=repo, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=600
    )


def gymbench(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run(repo, str(Path(sys.executable).parent / "gymbench"), *args, env=env)


@pytest.fixture(scope="module")
def results(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An A/B calibration from three A/A worker pairs of ``base``."""
    store = tmp_path_factory.mktemp("results")
    done = gymbench(repo, "calibrate", "--ab", "base", "--runs", "3", *AB_ARGS, "--results-dir", str(store), "benches")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "A/B calibration from 3 A/A worker pairs saved" in done.stdout
    assert "not measured: benches/test_work.py::test_record_only" in done.stdout
    return store


def test_an_injected_slowdown_is_found(repo: Path, results: Path, tmp_path: Path) -> None:
    markdown = tmp_path / "summary.md"
    done = gymbench(
        repo, "compare", "--ab", "base", "slow", *AB_ARGS, "--results-dir", str(results), "--markdown", str(markdown)
    )
    assert done.returncode == 1, done.stdout + done.stderr  # 1: regression
    print(done.stdout)  # the ratio and the calibration's minimum detectable effect, for a run under load
    text = markdown.read_text()
    work_row = next(line for line in text.splitlines() if "test_work.py::test_work |" in line)
    assert "REGRESSED" in work_row
    assert "- `benches/test_work.py::test_new`" in text  # new: listed, not compared
    assert "`benches/test_work.py::test_record_only`: no gymbench.measure() call" in text
    assert "interleaved rounds (ABBA)" in text
    # the matmul splits over OpenBLAS's pool when the probe lifts the forced limit; the loop does not
    assert "how measured: benches/test_work.py::test_matmul: threads forced to 1 (this benchmark uses BLAS" in (
        done.stdout
    )
    assert "how measured (1 benchmarks): interleaved" in done.stdout and "test_work: threads forced" not in done.stdout
    assert git(repo, "worktree", "list").count("\n") == 0  # the checkouts are gone


def test_an_aa_pair_passes_from_pytest(repo: Path, results: Path, tmp_path: Path) -> None:
    """The working tree (at ``slow``) against ``slow``; the node id selects one benchmark."""
    summary = tmp_path / "step-summary.md"
    done = run(
        repo, sys.executable, "-m", "pytest", "benches/test_work.py::test_work", "-p", "no:cacheprovider",
        "--gymbench-ab", "slow", "--gymbench-ab-repeats", "2", "--gymbench-fail-on", "regression",
        "--gymbench-results-dir", str(results), env={"GITHUB_STEP_SUMMARY": str(summary)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # time_cpu, gated where the calibration's MDE is under 30 %; on a loaded machine three A/A pairs
    # put it at 40-140 %, and then it is ungated and the headline says nothing was gated (not a pass)
    headline = re.search(r"gate: (PASS|INCONCLUSIVE) — .*; 0 new, 0 missing, 0 renamed", done.stdout)
    assert headline is not None, done.stdout
    assert headline.group(0).split("; ")[0] in (
        "gate: PASS — 1 gated, 0 ungated (1 pass)",
        "gate: INCONCLUSIVE — 0 gated, 1 ungated: nothing was gated (1 ungated)",
    )
    assert "candidate: candidate: working tree" in done.stdout
    assert "test_record_only" not in done.stdout  # not selected
    assert "## gymbench comparison" in summary.read_text()


def test_unknown_ref_and_uncollectable_side_are_one_line_errors(repo: Path, results: Path) -> None:
    done = gymbench(repo, "compare", "--ab", "no-such-ref", "--results-dir", str(results))
    assert done.returncode == 2
    assert "'no-such-ref' is not a commit" in done.stderr and "Traceback" not in done.stderr
    done = gymbench(repo, "compare", "--ab", "broken", "--results-dir", str(results))
    assert done.returncode == 2
    assert "collecting the benchmarks failed" in done.stderr and "Traceback" not in done.stderr
