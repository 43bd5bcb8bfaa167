"""The fuzz harness: what a bad-input case is, how it runs, and what every outcome must satisfy.

A case builds its files in a fresh directory and returns the command line to run. It runs in this
process (``gymbench.cli.main``, fast) or, for a few, as a real ``gymbench`` process. Whatever the
input, the outcome must hold these properties:

* no Python traceback (nor asyncio's "never retrieved" or aiohttp's "Unclosed" noise);
* an exit status the command documents (usage/input error: 2);
* on a usage/input error, one error line (``gymbench: error: ...``, or argparse's
  ``gymbench CMD: error: ...`` for a malformed command line) that is the last thing printed and
  names the file and line at fault; multi-line only where it lists items;
* an input error is found before any server starts (stderr never says "no server set");
* nothing lost: every file that existed is byte-identical afterwards, except the outputs the case
  names, which keep every completed row.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gymbench.cli import main

NOISE = ("Traceback (most recent call last)", "Task exception was never retrieved", "Unclosed client session",
         "Unclosed connector", "RecursionError")  # fmt: skip
ERROR_LINE = re.compile(r"^gymbench(?: [\w-]+)?: error: ")


@dataclass
class Env:
    """What cases share: the simulator every server-needing case talks to (started once)."""

    base_url: str = ""
    urls: Callable[[str], str] | None = None
    """A hostile server mode -> its base URL (the client-path contracts)."""


@dataclass
class Prepared:
    argv: list[str]
    mentions: list[str] = field(default_factory=list)
    """Text the error must contain: the file, ``file:line``, the setting's name."""
    outputs: list[Path] = field(default_factory=list)
    """Files the command may change; every completed row in them must survive."""
    feed: Callable[[], None] | None = None
    """Run in a thread while the command runs (the writer of a FIFO)."""
    check: Callable[[int | None, str, str], str | None] | None = None
    """A property particular to the case: given status, stdout, stderr, a problem or None."""
    stdin: bytes = b""
    """What a real process reads on its standard input."""


@dataclass(frozen=True)
class Case:
    category: str
    name: str
    build: Callable[[Path, Env], Prepared]
    statuses: tuple[int, ...] = (2,)
    listing: bool = False
    """The error may list items on further lines (the resume-difference list)."""
    in_subprocess: bool = False
    pytest_run: bool = False
    """Runs pytest on a suite (``--gymbench-compare``): statuses are pytest's, output is pytest's."""

    @property
    def id(self) -> str:
        return f"{self.category}/{self.name}"


@dataclass
class Outcome:
    status: int | None
    out: str
    err: str


def run_case(case: Case, workdir: Path, env: Env, capsys: pytest.CaptureFixture[str], runner: Any = None) -> list[str]:
    """Run one case in ``workdir``; return what went wrong (empty when every property holds)."""
    workdir.mkdir(parents=True, exist_ok=True)
    previous = os.getcwd()
    os.chdir(workdir)
    try:
        prepared = case.build(workdir, env)
        before = snapshot(workdir)
        rows_before = {path: completed_rows(path) for path in prepared.outputs}
        feeder = threading.Thread(target=prepared.feed, daemon=True) if prepared.feed else None
        if feeder is not None:
            feeder.start()
        if case.in_subprocess:
            outcome = run_subprocess(prepared.argv, workdir, prepared.stdin)
        elif case.pytest_run:
            outcome = runner(prepared.argv)
        else:
            outcome = run_in_process(prepared.argv, capsys)
        if feeder is not None:
            feeder.join(10)
    finally:
        os.chdir(previous)
    problems = outcome_problems(case, prepared, outcome)
    problems += lost_data(workdir, before, rows_before, prepared.outputs)
    return problems


def run_in_process(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Outcome:
    status: int | None
    crash = ""
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's usage errors, --help
        status = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - a bug: keep the traceback for the report
        status, crash = None, traceback.format_exc()
    captured = capsys.readouterr()
    return Outcome(status, captured.out, captured.err + crash)


def run_subprocess(argv: list[str], workdir: Path, stdin: bytes = b"") -> Outcome:
    done = subprocess.run(
        [sys.executable, "-m", "gymbench.cli", *argv], cwd=workdir, capture_output=True, input=stdin, timeout=120
    )
    decode = lambda data: data.decode("utf-8", "backslashreplace")  # noqa: E731
    return Outcome(done.returncode, decode(done.stdout), decode(done.stderr))


def outcome_problems(case: Case, prepared: Prepared, outcome: Outcome) -> list[str]:
    problems = [f"{noise!r} in the output" for noise in NOISE if noise in outcome.out + outcome.err]
    if outcome.status not in case.statuses:
        problems.append(f"exit status {outcome.status}, expected one of {case.statuses}")
    if outcome.status in (2, 4) and not problems:
        problems += error_problems(case, prepared, outcome)
    if prepared.check is not None and not problems:
        found = prepared.check(outcome.status, outcome.out, outcome.err)
        if found:
            problems.append(found)
    if problems:
        problems.append("stderr ends: " + outcome.err[-600:].replace("\n", "\\n"))
    return problems


def error_problems(case: Case, prepared: Prepared, outcome: Outcome) -> list[str]:
    """One error line, last, naming what it must; found before any server started.

    pytest reports a usage error its own way (``ERROR: ...``): there the output must name it.
    """
    if case.pytest_run:
        return [f"the output does not name {m!r}" for m in prepared.mentions if m not in outcome.out + outcome.err]
    text = outcome.err
    lines = [line for line in text.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if ERROR_LINE.match(line)]
    if not starts:
        return ["no 'gymbench: error:' line"]
    problems = []
    if len(starts) > 1:
        problems.append(f"{len(starts)} error lines")
    if not case.listing and starts[-1] != len(lines) - 1:
        problems.append("the error line is not the last line")
    message = "\n".join(lines[starts[-1] :]) if case.listing else lines[starts[-1]]
    problems += [f"the error does not name {m!r}" for m in prepared.mentions if m not in message]
    if "no server set" in outcome.err:
        problems.append("a server was started before the input error was found")
    return problems


def snapshot(root: Path) -> dict[Path, bytes]:
    """Every regular file under ``root`` (FIFOs and sockets are left alone: reading them blocks)."""
    found = {}
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            found[path] = path.read_bytes()
    return found


def completed_rows(path: Path) -> set[bytes]:
    """The first complete row of each (task, rollout) pair that is done: ``ok``, or written by another tool."""
    if not path.is_file():
        return set()
    kept, pairs = set(), set()
    for raw in path.read_bytes().splitlines(keepends=True):
        try:
            row = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if not raw.endswith(b"\n") or not isinstance(row, dict) or row.get("status", "ok") != "ok":
            continue
        pair = repr(
            (row.get("task_index", row.get("_ng_task_index")), row.get("rollout_index", row.get("_ng_rollout_index")))
        )
        if pair not in pairs:
            pairs.add(pair)
            kept.add(raw.rstrip(b"\r\n"))
    return kept


def lost_data(
    root: Path, before: dict[Path, bytes], rows_before: dict[Path, set[bytes]], outputs: list[Path]
) -> list[str]:
    problems = []
    for path, content in before.items():
        if path in outputs:
            continue
        if not path.is_file():
            problems.append(f"{path.name} was removed")
        elif path.read_bytes() != content:
            problems.append(f"{path.name} was changed")
    for path, rows in rows_before.items():
        now = {line.rstrip(b"\r") for line in path.read_bytes().split(b"\n")} if path.is_file() else set()
        lost = rows - now
        if lost:
            problems.append(f"{path.name} lost {len(lost)} completed rows")
    return problems
