"""The ``gymbench_nemo_gym_stack`` fixture where NeMo Gym cannot be had: only its tests skip, with the reason."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gymbench.engine import nemo_gym_venv

pytest_plugins = ["pytester"]
INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"

SUITE = """
import pytest

@pytest.mark.real_nemo_gym
def test_needs_nemo_gym(gymbench_nemo_gym_stack):
    assert gymbench_nemo_gym_stack.head_url

def test_does_not():
    pass
"""


def without_python_313(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No venv cached, no Python >= 3.13 on PATH or under ~/.pyenv."""
    empty = tmp_path / "empty-path"
    empty.mkdir(exist_ok=True)
    for name in (nemo_gym_venv.VENV_ENV, nemo_gym_venv.PYTHON_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setitem(sys.modules, "platformdirs", None)


def test_without_python_313_only_the_real_stack_tests_skip_with_the_reason(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_python_313(tmp_path, monkeypatch)
    pytester.makeini(INI)
    pytester.makepyfile(SUITE)
    result = pytester.runpytest_inprocess("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*no real NeMo Gym: NeMo Gym 0.7.0 needs Python >= 3.13 and none was found*"])
    assert not (tmp_path / "cache" / "gymbench" / "nemo-gym-0.7.0").exists()


def test_a_named_venv_without_ng_run_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(nemo_gym_venv.VENV_ENV, str(tmp_path))
    with pytest.raises(nemo_gym_venv.GymbenchError, match="no bin/ng_run there; point it at a venv"):
        nemo_gym_venv.find_venv()


def test_a_killed_build_is_not_taken_for_a_finished_one(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")  # what a build killed before pip finished leaves
    assert not nemo_gym_venv.finished(tmp_path)
    (tmp_path / "build.json").write_text("{}")
    assert nemo_gym_venv.finished(tmp_path)
