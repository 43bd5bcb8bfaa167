"""Over a thousand generated bad inputs and settings: never a traceback, one clear line, nothing lost.

The cases (seeded, so every run tries the same ones) come from the ``bad_*`` modules; what each
outcome must satisfy is in :mod:`.cases`. The full sweep is marked slow; an unmarked quick subset
(every 25th case of each category) runs in every test run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from .bad_command_lines import command_line_and_file_cases
from .bad_processes import all_process_cases
from .bad_pytest import all_pytest_cases
from .bad_records import record_cases
from .bad_resume import all_resume_cases
from .bad_settings import setting_cases
from .bad_tasks import task_file_cases
from .cases import Case, Env, Outcome, run_case

CATEGORIES: dict[str, Callable[[], list[Case]]] = {
    "tasks": task_file_cases,
    "settings": setting_cases,
    "command-lines": command_line_and_file_cases,
    "resume": all_resume_cases,
    "records": record_cases,
    "pytest": all_pytest_cases,
    "processes": all_process_cases,
}
QUICK_EVERY = 25


def sweep(cases: list[Case], tmp_path: Path, env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    def run_pytest(argv: list[str]) -> Outcome:
        """A pytest session in this process. Not ``pytester``: it unloads the modules a session
        imported, and numpy (imported by the gate) cannot be loaded twice in one process."""
        options = ["--import-mode=importlib", "--capture=sys", "-p", "no:cacheprovider", "-p", "no:benchmark",
                   "-p", "no:asyncio", "-p", "no:anyio"]  # fmt: skip
        status = pytest.main([*argv, *options])
        for name, module in list(sys.modules.items()):  # the suite's own modules, which later sessions would clash with
            if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
                del sys.modules[name]
        captured = capsys.readouterr()
        return Outcome(int(status), captured.out, captured.err)

    failures = {}
    for number, case in enumerate(cases):
        problems = run_case(case, tmp_path / str(number), env, capsys, run_pytest)
        if problems:
            failures[case.id] = problems
    report = "\n".join(f"{case_id}: " + "; ".join(problems) for case_id, problems in failures.items())
    assert not failures, f"{len(failures)} of {len(cases)} cases failed:\n{report}"


@pytest.mark.slow
@pytest.mark.parametrize("category", list(CATEGORIES))
def test_every_bad_input_gets_one_clear_line(
    category: str, tmp_path: Path, env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep(CATEGORIES[category](), tmp_path, env, capsys)


@pytest.mark.parametrize("category", list(CATEGORIES))
def test_a_sample_of_the_bad_inputs(
    category: str, tmp_path: Path, env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep(CATEGORIES[category]()[::QUICK_EVERY], tmp_path, env, capsys)


def test_the_sweep_is_large_and_deterministic() -> None:
    counts = {category: len(make()) for category, make in CATEGORIES.items()}
    assert sum(counts.values()) >= 1000 and min(counts.values()) >= 5, counts
    assert [case.id for case in task_file_cases()] == [case.id for case in task_file_cases()]
    ids = [case.id for make in CATEGORIES.values() for case in make()]
    assert len(ids) == len(set(ids)), "case names must be unique"
