"""``gymbench gate --base REF``: count the base commit and this checkout, then gate on the counts.

Following the instruction recipe by hand, a base run in a worktree of the base commit imported
the pull request's package (an editable install points at the pull request's tree; a
``PYTHONPATH="$PWD"`` misses ``src/``), so every regression passed. Here the base is a git
worktree in a temporary directory, run with this environment's Python and ``PYTHONPATH`` set to
the worktree's root and its ``src/`` first (:func:`gymbench.gate.ab.sides.code_path`), which
comes before site-packages and an editable install's finder: no second virtual environment to
build. Both runs record which code they imported (:mod:`gymbench.gate.measured_code`), in the timed
session and in the callgrind child; a package imported from outside its own checkout stops the
gate with one line instead of comparing the pull request with itself.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gymbench.errors import GymbenchError
from gymbench.fingerprint import machine_info
from gymbench.gate.ab.sides import Checkouts, Side
from gymbench.gate.gate import GateResult, noise_for, run_gate
from gymbench.gate.measured_code import foreign_imports
from gymbench.gate.settings import CompareSettings
from gymbench.gate.store import BaselineStore, Selection
from gymbench.measure import INSTRUCTIONS_UNIT

SAVE_NAMES = ("base", "pr")


@dataclass(frozen=True)
class CountedRun:
    """What one side's pytest session saved, and how long it took (wall seconds)."""

    selection: Selection
    seconds: float
    import_check: str = ""
    """The proof that the run measured its own checkout, in one line (:func:`import_check_line`)."""


def gate_against_base(
    start: Path,
    base_ref: str,
    pytest_args: Sequence[str],
    settings: CompareSettings,
    fail_on: str,
    results_dir: Path | None = None,
    calibration: str | None = None,
) -> tuple[GateResult, list[CountedRun]]:
    """Count ``base_ref`` and the working tree with ``pytest_args``, compare instruction counts."""
    settings = settings if settings.metrics else _counts_only(settings)
    with Checkouts(start) as checkouts, tempfile.TemporaryDirectory(prefix="gymbench-gate-") as tmp:
        store_dir = (results_dir or Path(tmp)).resolve()
        base = checkouts.side("base", base_ref)
        cand = checkouts.side("candidate", None)
        runs = [
            _count_side(side, name, pytest_args, store_dir) for side, name in zip((base, cand), SAVE_NAMES, strict=True)
        ]
        noise = noise_for(store_dir, machine_info()["key"], calibration)
        result = run_gate(runs[0].selection, runs[1].selection, settings, noise, fail_on)
    return result, runs


def _counts_only(settings: CompareSettings) -> CompareSettings:
    from dataclasses import replace

    return replace(settings, metrics=(INSTRUCTIONS_UNIT,))


def _count_side(side: Side, name: str, pytest_args: Sequence[str], store_dir: Path) -> CountedRun:
    import time

    command = [sys.executable, "-m", "pytest", *pytest_args, "-q", "-p", "no:cacheprovider", "--gymbench-quick"]
    command += ["--gymbench-instructions", "--gymbench-save", name, "--gymbench-results-dir", str(store_dir)]
    print(f"gymbench: counting {side.label} ({' '.join(pytest_args)}) ...", file=sys.stderr, flush=True)
    started = time.monotonic()
    done = subprocess.run(command, cwd=side.cwd, env=side.environment(), capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
        raise GymbenchError(f"the {name} run ({side.label}) failed: pytest exit {done.returncode} ({tail})")
    selection = BaselineStore(store_dir).select(name, machine_info()["key"])
    _check_measured_own_code(selection, side, name)
    code = selection.records[-1].fingerprint["code"]
    checked = import_check_line(side, code["imported"], code.get("counted") or {})
    return CountedRun(Selection(selection.records[-1:], side.label, selection.paths[-1:]), seconds, checked)


def import_check_line(side: Side, timed: dict[str, str], counted: dict[str, str]) -> str:
    """What :func:`_check_measured_own_code` proved, for the console: the record alone held it, and a
    reader of ``counted base: 5ebd347f59 in 57 s`` had to trust that the base measured the base."""
    where = ", ".join(f"{package} from {directory}" for package, directory in sorted(timed.items()))
    commit = f"commit {side.commit[:10]}" if side.commit else "the working tree"
    child = "; the callgrind child too" if counted and counted == timed else ""
    if counted and counted != timed:  # another directory of the same checkout (a src/ copy): both said
        child = "; the callgrind child " + ", ".join(f"{p} from {d}" for p, d in sorted(counted.items()))
    return f"{side.label.split(':')[0]} run imported {where} ({commit}){child}: checked"


def _check_measured_own_code(selection: Selection, side: Side, name: str) -> None:
    """Both the timed session and the callgrind child imported the side's own packages."""
    code = selection.records[-1].fingerprint.get("code")
    if not code or not code.get("imported"):
        raise GymbenchError(
            f"the {name} run ({side.label}) recorded no package of its checkout {side.root} as imported: "
            "nothing proves which code it measured (does the suite import the project's package?)"
        )
    for session, imported in (("timed session", code), ("callgrind child", {"imported": code.get("counted", {})})):
        foreign = foreign_imports(imported, side.root)
        if foreign:
            where = ", ".join(f"{n} from {p}" for n, p in sorted(foreign.items()))
            raise GymbenchError(
                f"the {name} run's {session} imported {where}, not from its checkout {side.root}: "
                "a module of that name shadows the checkout's (a .pth file or sys.path change in conftest?)"
            )
