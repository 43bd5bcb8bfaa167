"""How one generated contract case runs and what its outcome must satisfy, by class.

Whatever the hostile value, file or server answer: no traceback, an exit the command documents
(a non-zero one with one ``gymbench: error:`` line, printed last), within a deadline (a hang is a
case still running after :data:`HANG_S`, far past any work it has), no file left behind after a
failure (nor a ``*.tmp``/``*.lock`` ever), and the API key nowhere in the output or in a file.
Each problem is filed under one class, so the sweep can be counted: ``traceback``, ``hang``,
``files-left``, ``secret``, ``unclear`` (any other property).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .cases import ERROR_LINE, NOISE, Env
from .reach import SECRET, known_defect

HANG_S = 60.0
"""A deadline far past what any case does (a hung case is a defect; a slow machine is not)."""
MEMORY_CAP = 4 << 30
"""How much more address space an in-process case may take (far past any real need)."""
CLASSES = ("traceback", "hang", "files-left", "secret", "unclear")


class Hung(BaseException):
    """Raised in the main thread when a case has run past :data:`HANG_S`."""


@dataclass(frozen=True)
class ContractCase:
    id: str
    build: Callable[[Path, Env], list[str]]
    statuses: tuple[int, ...] = (2,)
    mention: str | None = None
    """Text the error line must hold (the setting's name, for a value of the wrong type)."""
    outputs: tuple[str, ...] = ()
    """Names a failed run may leave (the output a partial run wrote)."""
    in_subprocess: bool = False
    environ: tuple[tuple[str, str], ...] = ()


@dataclass
class Result:
    status: int | None
    out: str
    err: str
    hung: bool = False
    problems: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, problem: str) -> None:
        self.problems.setdefault(kind, []).append(problem)

    def summary(self) -> str:
        found = "; ".join(f"{kind}: {', '.join(found)}" for kind, found in self.problems.items())
        return f"{found}; exit {self.status}; stderr ends: " + self.err[-500:].replace("\n", "\\n")


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[list[bool]]:
    fired = [False]

    def alarm(signum: int, frame: Any) -> None:
        fired[0] = True
        raise Hung

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def memory_cap(extra: int = MEMORY_CAP) -> Iterator[None]:
    """At most ``extra`` more address space for the case: a reader that reads ``/dev/zero`` whole ends
    in a MemoryError (a traceback, counted), not in the kernel's OOM killer ending the test run."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    used = (
        int(
            next(
                line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmSize:")
            ).split()[1]
        )
        * 1024
    )
    cap = used + extra if hard == resource.RLIM_INFINITY else min(used + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def in_process(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Result:
    from gymbench.cli import main

    crash, status = "", None
    with deadline(HANG_S) as fired, memory_cap():
        try:
            status = main(argv)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
        except Hung:
            pass
        except BaseException:  # noqa: BLE001 - a defect: keep the traceback for the report
            crash = traceback.format_exc()
    captured = capsys.readouterr()
    return Result(None if fired[0] else status, captured.out, captured.err + crash, hung=fired[0])


def in_subprocess(argv: list[str], cwd: Path, environ: dict[str, str]) -> Result:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gymbench.cli", *argv],
            cwd=cwd,
            capture_output=True,
            timeout=HANG_S,
            env=environ,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        decode = lambda data: (data or b"").decode("utf-8", "backslashreplace")  # noqa: E731
        return Result(None, decode(exc.stdout), decode(exc.stderr), hung=True)
    text = lambda data: data.decode("utf-8", "backslashreplace")  # noqa: E731
    return Result(done.returncode, text(done.stdout), text(done.stderr))


def feed_fifos(root: Path) -> list[threading.Thread]:
    """A writer of garbage for every FIFO a case made (a reader then reads it, not a pipe without end)."""
    feeders = []
    for fifo in [path for path in root.rglob("*") if path.is_fifo()]:

        def feed(fifo: Path = fifo) -> None:
            with contextlib.suppress(OSError):
                with open(fifo, "wb") as handle:
                    handle.write(b"garbage \xff\n" * 100)

        feeders.append(threading.Thread(target=feed, daemon=True))
        feeders[-1].start()
    return feeders


def unstick(root: Path) -> None:
    """Let a feeder whose FIFO nobody read finish (it waits in ``open`` for a reader)."""
    for fifo in [path for path in root.rglob("*") if path.is_fifo()]:
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))


def listing(root: Path) -> set[Path]:
    return {path for path in root.rglob("*")}


def run_contract(
    case: ContractCase, root: Path, env: Env, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Result:
    """Run one case in ``root`` (its command in ``root/cwd/deep``, so ``../../x`` stays inside)."""
    cwd = root / "cwd" / "deep"
    cwd.mkdir(parents=True)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    for name, value in case.environ:
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(cwd)
    argv = case.build(root, env)
    before = listing(root)
    feeders = feed_fifos(root)
    try:
        result = in_subprocess(argv, cwd, dict(os.environ)) if case.in_subprocess else in_process(argv, capsys)
    finally:
        unstick(root)
        for feeder in feeders:
            feeder.join(5)
    judge(case, result, root, before)
    return result


def judge(case: ContractCase, result: Result, root: Path, before: set[Path]) -> None:
    text = result.out + result.err
    for noise in NOISE:
        if noise in text:
            result.add("traceback", noise)
    if result.hung:
        result.add("hang", f"still running after {HANG_S:.0f} s")
    if SECRET in text:
        result.add("secret", "the API key in the output")
    after = listing(root)
    for path in sorted(after - before):
        if path.is_file() and not path.is_symlink() and SECRET.encode() in path.read_bytes():
            result.add("secret", f"the API key in {path.name}")
        named = any(part in case.outputs for part in path.relative_to(root).parts)
        if path.name.endswith((".tmp", ".lock")) or (result.status not in (0, None) and not named):
            result.add("files-left", str(path.relative_to(root))[:80])
    if result.status not in case.statuses and not result.hung:
        result.add("unclear", f"exit {result.status}, expected one of {case.statuses}")
    if result.status not in (0, None) and "traceback" not in result.problems:
        lines = [line for line in result.err.splitlines() if line.strip()]
        errors = [i for i, line in enumerate(lines) if ERROR_LINE.match(line)]
        if not errors:
            result.add("unclear", "no 'gymbench: error:' line")
        elif len(errors) > 1 or errors[-1] != len(lines) - 1:
            result.add("unclear", "not one error line, printed last")
        elif case.mention and case.mention not in lines[errors[-1]]:
            result.add("unclear", f"the error does not name {case.mention!r}")


def tally(case: ContractCase, result: Result) -> None:
    """With ``GYMBENCH_FUZZ_TALLY=FILE``, one JSON line per case: its id and its problems' classes."""
    path = os.environ.get("GYMBENCH_FUZZ_TALLY")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(
                json.dumps({"id": case.id, "classes": sorted(result.problems), "status": result.status}) + "\n"
            )


FULL = os.environ.get("GYMBENCH_FUZZ_FULL") == "1"
FULL_ONLY = [pytest.mark.slow, pytest.mark.skipif(not FULL, reason="the full sweep: GYMBENCH_FUZZ_FULL=1")]
"""The marks of a case outside the default sample."""


def as_params(cases: list[ContractCase], sampled: list[ContractCase]) -> list[Any]:
    """Each case a ``pytest.param``, once: those in ``sampled`` run by default, the others are
    :data:`FULL_ONLY`; marked ``xfail(strict=False)`` where a defect known today makes one fail
    (:data:`.reach.KNOWN_DEFECTS`, the one table of them)."""
    found = []
    in_sample = {case.id for case in sampled}
    for case in cases:
        reason = known_defect(case.id)
        marks = [pytest.mark.xfail(strict=False, reason=reason)] if reason else []
        marks += [] if case.id in in_sample else FULL_ONLY
        found.append(pytest.param(case, id=case.id.encode("ascii", "backslashreplace").decode(), marks=marks))
    return found
