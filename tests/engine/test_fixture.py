"""The ``gymbench_llama_server`` fixture where no engine can be had: only its tests skip, with the reason."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"

SUITE = """
import pytest

@pytest.mark.real_engine
def test_needs_the_engine(gymbench_llama_server):
    assert gymbench_llama_server.base_url

def test_does_not():
    pass
"""


def test_without_a_compiler_only_the_real_engine_tests_skip_with_the_reason(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.delenv("GYMBENCH_LLAMA_SERVER", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setitem(sys.modules, "platformdirs", None)
    monkeypatch.setattr(sys, "executable", str(empty / "python"))
    pytester.makeini(INI)
    pytester.makepyfile(SUITE)
    result = pytester.runpytest_inprocess("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*no real engine: cannot build llama.cpp's llama-server: cmake, ninja*"])


def test_the_marker_is_registered(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    result = pytester.runpytest_inprocess("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.real_engine: needs the real llama.cpp engine*"])
