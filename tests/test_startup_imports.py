"""``gymbench --version``, ``--help`` and every ``COMMAND --help`` import nothing heavy.

Each case runs in a fresh interpreter, as the console script does, so one case's imports cannot
hide another's. What is checked is which modules load, never how long they take
(``benches/startup_cpu.py`` measures the CPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gymbench
from gymbench.plugins import Plugins, get_plugin_manager

HEAVY = (
    "numpy",
    "scipy",
    "aiohttp",
    "torch",
    "psutil",
    "matplotlib",
    "pandas",
    "yaml",
    "sympy",
    "transformers",
    "pynvml",
    "ray",
)
"""Packages that take tens to thousands of milliseconds to import; only running a command may need them."""

CHILD = """
import contextlib, io, json, sys
from gymbench.cli import main

out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(sys.argv[2:])
    except SystemExit as exit:
        code = exit.code
heavy = json.loads(sys.argv[1])
loaded = sorted(name for name in sys.modules if name.split(".")[0] in heavy)
print(json.dumps({"code": code, "out": out.getvalue(), "loaded": loaded}))
"""

BUILTIN_COMMANDS = sorted(Plugins(get_plugin_manager(load_entry_points=False)).commands)


def run_cli(*argv: str) -> dict[str, object]:
    """``gymbench ARGV`` in a fresh interpreter that runs this checkout's code."""
    checkout = str(Path(gymbench.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [checkout, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(HEAVY), *argv], capture_output=True, text=True, env=env, check=True
    )
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_every_builtin_command_is_checked() -> None:
    assert {"collect", "tune", "train", "sim-server", "compare", "plugins"} <= set(BUILTIN_COMMANDS)


@pytest.mark.parametrize(
    "argv",
    [("--version",), ("--help",)] + [(name, "--help") for name in BUILTIN_COMMANDS],
    ids=lambda argv: " ".join(argv),
)
def test_help_and_version_import_nothing_heavy(argv: tuple[str, ...]) -> None:
    result = run_cli(*argv)
    assert result["code"] == 0
    assert str(result["out"]).startswith("gymbench " if argv == ("--version",) else "usage: gymbench")
    assert result["loaded"] == [], f"gymbench {' '.join(argv)} imported {result['loaded']}"
