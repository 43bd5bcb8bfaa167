"""A user's project, end to end: ``gymbench.tune()`` in their ``benches/`` starts from
``[tool.gymbench.collect]`` of their pyproject.toml (the task file and verifier written once), and
``[tool.gymbench.tune]`` holds only tuning's own settings.

The unit test of the layering is ``test_job_layers.py``; this one runs the user's suite in a
subprocess against the embedded simulator, as the user runs it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gymbench import load_record

EXAMPLES = Path(__file__).resolve().parents[2] / "gymbench" / "data" / "example_tasks.jsonl"

SIM = {"step_base_s": 0.002, "step_per_seq_s": 0, "output_tokens_mean": 4, "max_num_seqs": 8}
QUICK_TUNE = {
    "start": 2,
    "max_parallelism": 8,
    "target_precision": 0.25,
    "min_batches": 2,
    "max_batches": 3,
    "sample_size": 16,
}

CONFTEST = """
from pathlib import Path

from gymbench import Component, Verdict, hookimpl

SCORED = Path(__file__).parent / "scored.txt"


class CountingVerifier:
    cost = "cheap"

    def verify(self, row, response_text):
        with SCORED.open("a") as out:
            out.write(row["task_id"] + "\\n")
        return Verdict(1.0)


def make_counting(config):
    return CountingVerifier()


@hookimpl
def gymbench_register_verifiers():
    return [Component("my-counting", make_counting, "counts what it scores")]
"""

BENCH = """
def test_knee_of_my_env(gymbench):
    outcome = gymbench.tune()  # no task file, no verifier: [tool.gymbench.collect] has them
    assert 1 <= outcome.recommended <= 8
"""


def table(name: str, settings: dict[str, object]) -> str:
    return f"[tool.gymbench.{name}]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())


def project(root: Path, *, collect: bool) -> None:
    """The user's project: tasks under data/, a verifier in conftest.py, a bench calling tune()."""
    (root / "data").mkdir()
    shutil.copy(EXAMPLES, root / "data" / "tasks.jsonl")
    collect_table = {"input_jsonl_fpath": "data/tasks.jsonl", "verifier": "my-counting", "num_samples_in_parallel": 4}
    text = table("sim", SIM) + "\n" + table("tune", QUICK_TUNE)
    (root / "pyproject.toml").write_text(text + ("\n" + table("collect", collect_table) if collect else ""))
    (root / "conftest.py").write_text(CONFTEST)
    (root / "benches").mkdir()
    (root / "benches" / "test_tune_env.py").write_text(BENCH)


def run(pytester: pytest.Pytester) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "benches")


def test_tune_starts_from_the_projects_collection_settings(pytester: pytest.Pytester) -> None:
    project(pytester.path, collect=True)
    outcome = run(pytester)
    outcome.assert_outcomes(passed=1)
    scored = (pytester.path / "scored.txt").read_text().split()
    assert scored and all(task.startswith("arith-") for task in scored)  # collect's verifier, collect's tasks


def test_without_the_collection_table_the_task_file_is_missing_in_one_line(pytester: pytest.Pytester) -> None:
    project(pytester.path, collect=False)
    outcome = run(pytester)
    outcome.assert_outcomes(failed=1)
    text = outcome.stdout.str()
    assert "gymbench: error: needs +input_jsonl_fpath=TASKS.jsonl" in text
    assert "Traceback" not in text and not (pytester.path / "scored.txt").exists()


def tune_command(root: Path, *settings: str) -> subprocess.CompletedProcess[str]:
    """``gymbench tune`` in the project's folder, as the user types it there."""
    sim = [f"+sim.{key}={value}" for key, value in SIM.items()]
    return subprocess.run(
        [sys.executable, "-m", "gymbench.cli", "tune", "+plot=", "+progress=false", *sim, *settings],
        cwd=root, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def command_project(root: Path, **collect: object) -> None:
    (root / "data").mkdir(exist_ok=True)
    shutil.copy(EXAMPLES, root / "data" / "tasks.jsonl")
    text = table("tune", QUICK_TUNE) + ("\n" + table("collect", collect) if collect else "")
    (root / "pyproject.toml").write_text(text)


def test_the_tune_command_in_the_project_folder_layers_the_same_way(tmp_path: Path) -> None:
    command_project(tmp_path, input_jsonl_fpath="data/tasks.jsonl", verifier="none", num_samples_in_parallel=4)
    done = tune_command(tmp_path, f"+results_dir={tmp_path / 'results'}")
    assert done.returncode == 0, done.stderr
    assert "recommended num_samples_in_parallel=" in done.stdout
    params = load_record(next((tmp_path / "results").glob("*/*_tune.json"))).benchmarks[0].params
    assert params["input"] == "tasks.jsonl"

    (tmp_path / "pyproject.toml").write_text(table("collect", {"input_jsonl_fpath": "data/tasks.jsonl",
                                                               "verifier": "not-a-verifier"}))  # fmt: skip
    refused = tune_command(tmp_path)  # the verifier comes from [tool.gymbench.collect] too
    assert refused.returncode == 2 and "not-a-verifier" in refused.stderr and "Traceback" not in refused.stderr


def test_the_tune_command_without_the_collection_table_needs_the_task_file(tmp_path: Path) -> None:
    command_project(tmp_path)
    done = tune_command(tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "gymbench: error: needs +input_jsonl_fpath=TASKS.jsonl (the sample every probe uses)"
    ]


def test_a_bad_setting_in_the_projects_table_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(table("tune", {"max_paralelism": 8}))
    done = tune_command(tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "pyproject.toml [tool.gymbench.tune]: unknown setting 'max_paralelism'" in done.stderr
