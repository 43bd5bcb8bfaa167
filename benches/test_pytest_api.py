"""What running gymbench's jobs inside pytest costs, against the same jobs on the command line.

``gymbench.collect(...)`` in a benchmark and ``gymbench collect`` both run one
:class:`~gymbench.collect.collection.Collection`; this measures whether the pytest path adds
anything. Each side runs in a fresh process (a one-test pytest suite, or the command), alternated,
against one zero-latency simulator in its own process; both report the client CPU per rollout
measured around the collection itself (their results records' ``client_cpu_per_rollout``), so
interpreter start-up is not part of either. Target: pytest ÷ command line ≤ 1.05 (medians).

``gymbench.train_step(...)`` against ``gymbench train`` likewise: the same settings, fresh processes
alternated, the median step time each reports. Target: ≤ 1.02.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gymbench import Recorder, load_record

PARALLELISM = 64
TASKS = Path(__file__).resolve().parents[1] / "gymbench" / "data" / "example_tasks.jsonl"  # 200 tasks


def cli_cpu_per_rollout(server: Any, repeats: int, workdir: Path, verifier: str = "exact-match") -> float:
    results = workdir / "cli-results"
    command = [
        sys.executable, "-m", "gymbench.cli", "collect", "+backend=openai", f"+base_url={server.base_url}",
        "+model=gymbench-sim", f"+input_jsonl_fpath={TASKS}", f"+num_repeats={repeats}",
        f"+output_jsonl_fpath={workdir / 'cli.jsonl'}", f"+num_samples_in_parallel={PARALLELISM}",
        "+overwrite=true", "+progress=false", f"+results_dir={results}", f"+verifier={verifier}",
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=900)
    return newest_metric(results, "client_cpu_per_rollout")


def pytest_cpu_per_rollout(server: Any, repeats: int, workdir: Path, verifier: str = "exact-match") -> float:
    suite = workdir / "suite"
    suite.mkdir(exist_ok=True)
    (suite / "test_api.py").write_text(
        textwrap.dedent(
            f"""
            def test_collect(gymbench):
                gymbench.collect(backend="openai", base_url={server.base_url!r}, model="gymbench-sim",
                                 input_jsonl_fpath={str(TASKS)!r}, num_repeats={repeats},
                                 num_samples_in_parallel={PARALLELISM}, verifier={verifier!r})
            """
        )
    )
    results = workdir / "pytest-results"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite), "--rootdir", str(suite),
         "--gymbench-save", "api", "--gymbench-results-dir", str(results), "--gymbench-quick"],
        check=True, capture_output=True, timeout=900,
    )  # fmt: skip
    return newest_metric(results, "client_cpu_per_rollout")


def newest_metric(results: Path, name: str) -> float:
    newest = max(results.glob("*/*.json"), key=lambda path: path.stat().st_mtime)
    return load_record(newest).benchmarks[0].metrics[name].value


@pytest.mark.parametrize("verifier", ["exact-match", "math"])
def test_collect_in_pytest_versus_the_command_line(
    gymbench: Recorder, tmp_path: Path, gymbench_sim_factory: Callable[..., Any], verifier: str
) -> None:
    repeats = 10 if gymbench.quick else 100  # 200 tasks each: 2,000 or 20,000 rollouts
    pairs = 1 if gymbench.quick else 5
    server = gymbench_sim_factory("zero-latency")
    cpu: dict[str, list[float]] = {"cli": [], "pytest": []}
    for _ in range(pairs):
        cpu["cli"].append(cli_cpu_per_rollout(server, repeats, tmp_path, verifier) * 1e6)
        cpu["pytest"].append(pytest_cpu_per_rollout(server, repeats, tmp_path, verifier) * 1e6)
    record_pairs(gymbench, cpu, "cpu_per_rollout", "µs", "")


def record_pairs(gymbench: Recorder, pairs: dict[str, list[float]], metric: str, unit: str, prefix: str) -> None:
    """Both sides' samples, the per-pair ratios, and the ratio of the medians (the headline)."""
    gymbench.record(f"cli_{metric}", pairs["cli"], unit, "lower")
    gymbench.record(f"pytest_{metric}", pairs["pytest"], unit, "lower")
    ratios = [p / c for p, c in zip(pairs["pytest"], pairs["cli"], strict=True)]
    gymbench.record(f"{prefix}pytest_over_cli_per_pair", ratios, "ratio", "lower")
    headline = statistics.median(pairs["pytest"]) / statistics.median(pairs["cli"])
    gymbench.record(f"{prefix}pytest_over_cli", headline, "ratio", "lower")


TRAIN = {"model": "transformer", "size": "small", "batch": 4, "seq_len": 64, "warmup": 2, "memory": False, "threads": 1}
QUICK_TRAIN = {**TRAIN, "size": "tiny", "warmup": 1}


def cli_step_time(train: dict[str, Any], steps: int, workdir: Path) -> float:
    results = workdir / "cli-train-results"
    settings = [f"+{key}={str(value).lower()}" for key, value in {**train, "steps": steps}.items()]
    command = [sys.executable, "-m", "gymbench.cli", "train", *settings, "+save=cli", f"+results_dir={results}",
               "+progress=false"]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=900)
    return newest_metric(results, "step_time")


def pytest_step_time(train: dict[str, Any], steps: int, workdir: Path) -> float:
    suite = workdir / "train-suite"
    suite.mkdir(exist_ok=True)
    test = f"def test_step(gymbench):\n    gymbench.train_step({train!r}, steps={steps})\n"
    (suite / "test_train.py").write_text(test)
    results = workdir / "pytest-train-results"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite), "--rootdir", str(suite),
         "--gymbench-save", "api", "--gymbench-results-dir", str(results)],
        check=True, capture_output=True, timeout=900,
    )  # fmt: skip
    return newest_metric(results, "step_time")


def test_train_step_in_pytest_versus_the_command_line(gymbench: Recorder, tmp_path: Path) -> None:
    train, steps = (QUICK_TRAIN, 3) if gymbench.quick else (TRAIN, 20)
    pairs = 1 if gymbench.quick else 5
    times: dict[str, list[float]] = {"cli": [], "pytest": []}
    for _ in range(pairs):
        times["cli"].append(cli_step_time(train, steps, tmp_path))
        times["pytest"].append(pytest_step_time(train, steps, tmp_path))
    record_pairs(gymbench, times, "step_time", "s", "train_")
