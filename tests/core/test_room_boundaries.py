"""Rooms import one way: the core → builtin, rollout, sim, engine, train, gate → collect, tune, report → pytest, CLI.

The middle rooms never import each other; a record type from the core is how data crosses.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gymbench

PACKAGE = Path(gymbench.__file__).parent
CORE = {
    "gymbench",
    "gymbench.types",
    "gymbench.hookspecs",
    "gymbench.record",
    "gymbench.errors",
    "gymbench.measure",
    "gymbench.fingerprint",
    "gymbench.gate.measured_code",
    "gymbench.settings",
    "gymbench.jsonio",
    "gymbench.rollouts_file",
    "gymbench.secrets",
    "gymbench.plugins",
    "gymbench.run",
    "gymbench.tune.curves",
    "gymbench.gate.callgrind",
    "gymbench.threads",
    "gymbench.gate.instructions",
    "gymbench.tune.rates",
    "gymbench.tune.knee_search",
    "gymbench.tune.search_settings",
    "gymbench.lazy",
    "gymbench.units",
    "gymbench.engine_metrics",
    "gymbench.server_instances",
    "gymbench.client_cycles",
    "gymbench.console",
    "gymbench.labels",
    "gymbench.replica_figures",
}
ROOMS = ("builtin", "rollout", "sim", "train", "gate", "engine")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("room", ROOMS)
def test_a_room_imports_only_the_core_and_itself(room: str) -> None:
    own = f"gymbench.{room}"
    for path in sorted((PACKAGE / room).glob("*.py")):
        for name in imported_modules(path):
            if name.startswith("gymbench") and not (name == own or name.startswith(own + ".")):
                assert name in CORE, f"gymbench/{room}/{path.name} imports {name}, outside the core"


def test_the_core_imports_no_room() -> None:
    for module in CORE - {"gymbench"}:
        path = PACKAGE / (module.removeprefix("gymbench.").replace(".", "/") + ".py")
        for name in imported_modules(path):
            if name.startswith("gymbench"):
                assert name in CORE, f"{path.name} (core) imports {name}"


def _cycles_under(*rooms: str) -> list[list[str]]:
    from gymbench.devtools.structure import cycles, load_modules

    found = cycles(load_modules(), deferred=True)
    prefixes = tuple(f"gymbench.{room}." for room in rooms)
    return [group for group in found if not rooms or any(name.startswith(prefixes) for name in group)]


def test_collect_and_pytest_have_no_import_cycles_deferred_imports_counted() -> None:
    assert _cycles_under("collect", "pytest") == []


def test_no_two_files_import_each_other_deferred_imports_counted() -> None:
    """Zero import cycles between files: a cycle, even through an import inside a function, means
    two modules that cannot be understood (or moved) one without the other."""
    assert _cycles_under() == []
