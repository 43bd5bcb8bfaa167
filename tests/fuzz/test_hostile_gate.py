"""Issue 24's hostile cases for the gate and the smaller things: each one its own test.

Each runs as the sweep of :mod:`.test_no_tracebacks` runs its cases (:func:`.cases.run_case`):
no traceback, a documented exit status, one clear error line naming what it must, nothing lost.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .bad_gate_inputs import KNOWN_DEFECTS, gate_input_cases
from .cases import Case, Env, Outcome, run_case

CASES = gate_input_cases()


def _run_pytest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> object:
    def run(argv: list[str]) -> Outcome:
        options = ["--import-mode=importlib", "--capture=sys", "-p", "no:cacheprovider", "-p", "no:benchmark",
                   "-p", "no:asyncio", "-p", "no:anyio"]  # fmt: skip
        status = pytest.main([*argv, *options])
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
                del sys.modules[name]
        captured = capsys.readouterr()
        return Outcome(int(status), captured.out, captured.err)

    return run


@pytest.mark.hostile
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, marks=pytest.mark.xfail(reason=KNOWN_DEFECTS[case.id], strict=True))
        if case.id in KNOWN_DEFECTS
        else case
        for case in CASES
    ],
    ids=[case.id for case in CASES],
)
def test_hostile_gate_input(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    problems = run_case(case, tmp_path / "case", Env(), capsys, _run_pytest(tmp_path, capsys))
    assert not problems, "; ".join(problems)


def test_the_cases_are_many_seeded_and_unique() -> None:
    ids = [case.id for case in gate_input_cases()]
    assert len(ids) >= 60 and len(ids) == len(set(ids))
    assert ids == [case.id for case in CASES]
