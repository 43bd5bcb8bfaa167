"""Running one candidate program in a confined child process, for the ``code`` verifier.

Each run gets a fresh temporary directory (deleted afterwards) holding the program, its stdin and
output files, and an empty ``work/`` directory that is the child's cwd, ``HOME`` and ``TMPDIR``.
The child is ``python -I -S -B`` (isolated: no environment variables, no site-packages, no
bytecode writes) running :mod:`gymbench.builtin.sandbox_bootstrap`, which sets resource limits,
enters a new network namespace where the kernel allows it, and installs an audit hook before the
candidate runs. The parent waits up to the wall-clock limit and then kills the child's whole
process group (it starts in a new session).

Standard output and error go to files, not pipes, so a chatty program cannot fill the parent's
memory or block on a full pipe; ``RLIMIT_FSIZE`` bounds them. This is confinement against
accidents and bad RL samples, not a security boundary: see :mod:`gymbench.builtin.code_verifier`.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gymbench.types import JSONObject

BOOTSTRAP = str(Path(__file__).with_name("sandbox_bootstrap.py"))
STDERR_TAIL_CHARS = 500
KILL_SIGNALS = {-signal.SIGXCPU: "timeout", -signal.SIGKILL: "timeout", -signal.SIGXFSZ: "output_limit"}
"""Deaths by signal the limits cause: CPU soft then hard limit, file-size limit."""


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    file_mb: int = 16

    def for_child(self) -> dict[str, int]:
        return {"cpu_s": self.cpu_s, "memory_bytes": self.memory_mb << 20, "file_bytes": self.file_mb << 20}


@dataclass(frozen=True)
class RunResult:
    """How one confined run ended.

    ``ended`` is ``ok`` (exit status 0, and in test-script mode the tests ran to their end),
    ``failed_tests`` (an assertion of the test script failed), or a failure kind: ``timeout``,
    ``memory_limit``, ``output_limit``, ``runtime_error``, ``sandbox_error``. ``blocked`` lists what
    the audit hook refused, in order (``network_blocked``, ``write_blocked``, ``call_blocked``).
    """

    ended: str
    stdout: str = ""
    stderr_tail: str = ""
    exit_code: int | None = None
    duration_s: float = 0.0
    blocked: tuple[str, ...] = ()
    confinement: dict[str, Any] = field(default_factory=dict)


def run_confined(
    program: str,
    *,
    stdin: str = "",
    tests: str | None = None,
    limits: Limits | None = None,
    python: str,
    tmp_dir: str | None = None,
) -> RunResult:
    """Run ``program`` (then ``tests``, if given, in the same namespace) in a confined child."""
    try:
        root = Path(tempfile.mkdtemp(prefix="gymbench-code-", dir=tmp_dir))
    except OSError as error:
        return RunResult(ended="sandbox_error", stderr_tail=f"could not create a temporary directory: {error}")
    try:
        limits = limits or Limits()
        arguments = write_files(root, program, stdin, tests, limits)
        return run_child(root, arguments, limits, python, script_mode=tests is not None)
    except OSError as error:
        return RunResult(ended="sandbox_error", stderr_tail=f"could not run the sandbox: {error}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_files(root: Path, program: str, stdin: str, tests: str | None, limits: Limits) -> list[str]:
    """Lay out the run's directory; return the bootstrap's arguments."""
    (root / "work").mkdir()
    (root / "solution.py").write_text(program)
    (root / "stdin").write_text(stdin)
    if tests is not None:
        (root / "tests.py").write_text(tests)
    tests_path = str(root / "tests.py") if tests is not None else ""
    numbers = [str(limits.cpu_s), str(limits.memory_mb << 20), str(limits.file_mb << 20)]
    return [str(root / "solution.py"), tests_path, str(root / "work"), str(root / "report"), *numbers]


def run_child(root: Path, arguments: list[str], limits: Limits, python: str, *, script_mode: bool) -> RunResult:
    work = root / "work"
    env = {"PATH": os.defpath, "LANG": "C.UTF-8", "HOME": str(work), "TMPDIR": str(work)}
    started = time.perf_counter()
    with open(root / "stdin", "rb") as stdin, open(root / "stdout", "wb") as out, open(root / "stderr", "wb") as err:
        child = subprocess.Popen(
            [python, "-I", "-S", "-B", BOOTSTRAP, *arguments],
            stdin=stdin, stdout=out, stderr=err, cwd=work, env=env, start_new_session=True, close_fds=True,
        )  # fmt: skip
        timed_out = wait_or_kill(child, limits.wall_s)
    report = read_report(root / "report")
    stderr = (root / "stderr").read_bytes().decode("utf-8", "replace")
    return RunResult(
        ended="timeout" if timed_out else classify(child.returncode, report, stderr, script_mode),
        stdout=(root / "stdout").read_bytes().decode("utf-8", "replace"),
        stderr_tail=stderr[-STDERR_TAIL_CHARS:],
        exit_code=child.returncode,
        duration_s=time.perf_counter() - started,
        blocked=tuple(value.split("\t", 1)[0] for key, value in report if key == "blocked"),
        confinement=confinement(report, timed_out),
    )


def wait_or_kill(child: subprocess.Popen[bytes], wall_s: float) -> bool:
    """Wait for the child; past ``wall_s`` kill its whole process group. True when it was killed.

    The group is killed before the child is reaped, so its id cannot have been reused.
    """
    if exited_within(child, wall_s):
        child.wait()
        return False
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()
    return True


def exited_within(child: subprocess.Popen[bytes], wall_s: float) -> bool:
    """Block until the child exits or ``wall_s`` passes, without reaping it.

    A pidfd wakes up the moment the child exits; ``Popen.wait(timeout)`` polls with sleeps growing
    to 50 ms, which cost most of a short case's time. The polling wait remains where pidfds do not
    exist (Linux before 5.3, other systems).
    """
    try:
        pidfd = os.pidfd_open(child.pid)
    except (AttributeError, OSError):
        try:
            child.wait(timeout=wall_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(wall_s * 1000))
    finally:
        os.close(pidfd)


def read_report(path: Path) -> list[tuple[str, str]]:
    """The child's ``key<TAB>value`` lines, in order."""
    if not path.exists():
        return []
    lines = path.read_text(errors="replace").splitlines()
    return [(key, value) for key, _, value in (line.partition("\t") for line in lines)]


def classify(returncode: int, report: list[tuple[str, str]], stderr: str, script_mode: bool) -> str:
    """Name how the child ended from its exit status, its report and its last words."""
    keys = {key for key, _ in report}
    if returncode in KILL_SIGNALS:
        return KILL_SIGNALS[returncode]
    if "file_limit" in keys or "OSError: [Errno 27]" in stderr:
        return "output_limit"
    if "memory_error" in keys or stderr.rstrip().endswith("MemoryError"):
        return "memory_limit"
    if "started" not in keys:
        return "sandbox_error"
    if returncode == 0 and (not script_mode or "tests_passed" in keys):
        return "ok"
    return "failed_tests" if "tests_failed" in keys else "runtime_error"


def confinement(report: list[tuple[str, str]], timed_out: bool) -> JSONObject:
    """What the child reports it applied, plus what the parent did, for the verdict's details."""
    applied: dict[str, Any] = {"audit_hook": True, "process_group_killed": timed_out, "network": "unknown"}
    for key, value in report:
        if key == "limits":
            applied["limits"] = {name: int(number) for name, _, number in (p.partition("=") for p in value.split(","))}
        elif key == "network":
            applied["network"] = value
    return applied
