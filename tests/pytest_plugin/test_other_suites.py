"""Installing gymbench must not change how a user's other pytest suites behave."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

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
