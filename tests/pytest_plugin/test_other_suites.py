"""Installing gymbench must not change how a user's other pytest suites behave."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
ALLOWED_PYTEST_PLUGINS = {"pytest-benchmark"}
"""Runtime dependencies that load into every pytest run: pytest-benchmark's interop needs it, and it
only adds a fixture and options (no warnings, no changed collection)."""


def runtime_requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [re.split(r"[<>=!~; \[]", requirement, maxsplit=1)[0] for requirement in project["dependencies"]]


def ships_pytest_plugin(name: str) -> bool:
    try:
        return any(ep.group == "pytest11" for ep in metadata.distribution(name).entry_points)
    except metadata.PackageNotFoundError:
        return False


def test_no_runtime_dependency_brings_a_pytest_plugin_into_other_suites() -> None:
    plugins = {name for name in runtime_requirements() if ships_pytest_plugin(name)}
    assert plugins <= ALLOWED_PYTEST_PLUGINS, (
        f"{sorted(plugins - ALLOWED_PYTEST_PLUGINS)} would load into every pytest run of an environment "
        "with gymbench (pytest-asyncio warns there): make it an optional extra"
    )
    assert "pytest-benchmark" in plugins  # the check sees entry points at all


pytest_plugins = ["pytester"]


def test_a_plain_suite_runs_warning_free_with_gymbench_loaded(pytester: pytest.Pytester) -> None:
    """With pytest-asyncio absent (as in a user's environment now), gymbench's own plugin adds no
    warning and no failure to a plain pytest-benchmark suite, even with warnings as errors."""
    pytester.makepyfile("def test_sum(benchmark):\n    benchmark(sum, range(10))\n")
    result = pytester.runpytest_subprocess("-p", "no:asyncio", "-p", "no:cacheprovider", "-W", "error",
                                           "--benchmark-disable")  # fmt: skip
    result.assert_outcomes(passed=1)
    assert "Warning" not in result.stdout.str()
