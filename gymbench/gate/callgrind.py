"""Instruction counts under valgrind's callgrind: a speed metric a busy, shared CI runner cannot blur.

Wall and CPU time of one process on a shared 2-core VM move by 10–150 % from run to run; the
number of instructions the same code executes moves by 0.001–0.1 %. Callgrind counts them. It
runs the whole process on a simulated CPU, so only the measured calls may be counted, not the
interpreter's start-up or pytest's collection: collection starts switched off
(``--collect-atstart=no``) and is toggled on while a known C function is on the stack
(``--toggle-collect``), which is how iai-callgrind brackets a benchmark. CodSpeed's pytest
plugin brackets with callgrind's client requests instead, which needs a compiled helper; here the
bracket is a ctypes call (libffi's exported ``ffi_call``) around the measured calls, with
``sys.call_tracing`` (``_PyEval_CallTracing``, found where the interpreter keeps its symbol
table) as the fallback, so nothing needs a compiler. ``--dump-after`` writes the counts when the
bracket returns; :class:`InstructionCounter` reads and deletes those dumps.

This module runs *inside* the valgrind process; :mod:`gymbench.gate.instructions` starts it.
"""

from __future__ import annotations

import functools
import gc
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

NO_FORCED_SWITCH_S = 1.0
"""The interpreter's switch interval while a bracket runs. With another Python thread alive (a
server, a monitor), the measured thread otherwise hands the GIL over every 5 ms of *wall* time,
and each handover's instructions land in its count: the count grew with the bracket's duration,
that is with the machine's load. Blocking calls still release the GIL as always."""


def _without_forced_switches(calls: Callable[[], None]) -> None:
    """``calls()`` with no time-driven GIL handover. Set inside the bracket's callback, where this
    thread holds the GIL: set before it, a thread that took the GIL while ctypes released it
    would keep it for the whole interval."""
    switch = sys.getswitchinterval()
    sys.setswitchinterval(NO_FORCED_SWITCH_S)
    try:
        calls()
    finally:
        sys.setswitchinterval(switch)


BRACKETS = ("ffi_call", "_PyEval_CallTracing")
"""C functions whose time on the stack is counted: libffi's (ctypes) and sys.call_tracing's."""
DETERMINISTIC_ENV: Mapping[str, str] = {
    "PYTHONHASHSEED": "0",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "BLIS_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
}
"""A fixed hash seed (set and dict order, so the work done, repeat) and one BLAS thread: callgrind
counts only the thread that entered the bracket, so work handed to a BLAS thread would vanish."""
COUNTING_ENV: Mapping[str, str] = {**DETERMINISTIC_ENV, "PYTHONMALLOC": "malloc"}
"""The callgrind child's environment: :data:`DETERMINISTIC_ENV` and the C library's allocator.

Under Python's own allocator (pymalloc) the instructions an allocation takes depend on where its
pool stands: a loop that frees one int and allocates the next costs 28 instructions more per turn
when the pool it uses sits one block from full (the pool leaves and rejoins the list of pools in
use every turn). Which pool state a benchmark meets depends on everything the process allocated
before, so a change anywhere (a longer docstring in an imported module) moved the same loop's
count by 1.6 % and a parse's by 0.4 %, sample after sample, and the gate called unchanged code
improved. glibc's allocator serves a freed block's size from its per-thread cache at the same
cost whatever the heap holds: the same loop counts the same to the instruction in both trees and
in every bracket (docs/baselines.md, "Which allocator"). Allocation-heavy code counts up to ~30 %
more than under pymalloc; both sides of a comparison are counted the same way."""
ALLOCATOR_HOW = "the C library's allocator (PYTHONMALLOC=malloc)"
"""Said in every counted benchmark's record: counts taken under another allocator do not compare."""
DUMP_PREFIX = "callgrind.out"
_SUMMARY = re.compile(rb"^(?:summary|totals):\s*(\d+)", re.MULTILINE)


def callgrind_command(out_dir: Path, argv: list[str]) -> list[str]:
    """``argv`` under callgrind, counting only inside :data:`BRACKETS`, dumping as each returns.

    ``--fair-sched=yes``: valgrind runs one thread at a time, and its default lock is not fair. A
    thread spinning in Python (a busy server, a monitor) kept it while the measured thread waited
    for the GIL: three counts beside such a thread took 75-130 s instead of 1 s, and a CI run
    timed out at 600 s. Fair scheduling hands the lock over in order.
    """
    executable = shutil.which("valgrind") or "valgrind"
    options = [f"--toggle-collect={name}" for name in BRACKETS] + [f"--dump-after={name}" for name in BRACKETS]
    return [
        executable, "--tool=callgrind", "--quiet", "--fair-sched=yes", "--collect-atstart=no", *options,
        "--dump-line=no",
        f"--callgrind-out-file={out_dir / DUMP_PREFIX}.%p", *argv,
    ]  # fmt: skip


class CountingUnavailable(RuntimeError):
    """Callgrind saw no instructions inside either bracket: the counts would be a silent 0."""


class InstructionCounter:
    """Counts the instructions of calls made in this process, which callgrind runs.

    The first use probes both brackets with an empty call; one that callgrind cannot see (its
    symbol is stripped from this build) reads 0 and the other is used. The probe's count is the
    bracket's own cost, taken off every measurement.
    """

    def __init__(self, out_dir: Path, brackets: int = 5) -> None:
        self.out_dir = out_dir
        self.brackets = brackets
        """Counted brackets per benchmark (``--gymbench-instructions-brackets``)."""
        self._bracket: Callable[[Callable[[], None]], None] | None = None
        self.overhead = 0

    def count(self, calls: Callable[[], None], sample: int = 0) -> int:
        """Instructions ``calls()`` executes, less the bracket's own cost.

        ``sample`` numbers the measurement: each number lays the heap out differently first
        (:func:`heap_padding`), the same way in every process.
        """
        if self._bracket is None:
            self.prepare()
        assert self._bracket is not None
        padding = heap_padding(sample)
        gc.collect()  # the collector's thresholds then depend on this call alone, not on earlier tests
        self._collect_dumps()
        self._bracket(functools.partial(_without_forced_switches, calls))
        del padding
        return max(self._collect_dumps() - self.overhead, 0)

    def prepare(self) -> None:
        """Choose the bracket callgrind can see; raise :class:`CountingUnavailable` when neither."""
        for bracket in (_ctypes_bracket, _call_tracing_bracket):
            self._collect_dumps()
            bracket(_nothing)
            seen = self._collect_dumps()
            if seen > 0:
                self._bracket, self.overhead = bracket, seen
                return
        raise CountingUnavailable(
            "callgrind counted no instructions inside ffi_call or _PyEval_CallTracing: this Python "
            "build hides both symbols (a stripped interpreter with ctypes linked statically)"
        )

    def _collect_dumps(self) -> int:
        """Sum and delete this process's dumps: a nested bracket may have split one measurement."""
        total = 0
        for path in self.out_dir.glob(f"{DUMP_PREFIX}.{os.getpid()}.*"):
            total += sum(int(found) for found in _SUMMARY.findall(path.read_bytes())[:1])
            path.unlink()
        return total


def heap_padding(sample: int) -> list[bytes | bytearray]:
    """Objects kept alive during one measurement: sample ``n`` finds the allocator in state ``n``.

    How many instructions an allocation or a ``realloc`` takes depends on what the heap already
    holds (a free block of the right size, room to grow in place), so the same code counts up to
    ~5 % apart in two processes whose earlier allocations differed, as they do after any change
    elsewhere in the code. Measuring each sample after a different, seeded layout puts that
    spread inside one run, where the comparison's interval sees it, instead of between runs.
    """
    import random

    rng = random.Random(sample)
    small = [bytes(rng.randrange(1, 512)) for _ in range(rng.randrange(4096))]
    large = [bytearray(rng.randrange(1 << 10, 1 << 17)) for _ in range(rng.randrange(1, 16))]
    return small + large


def _nothing() -> None:
    return None


def _ctypes_bracket(calls: Callable[[], None]) -> None:
    """``calls()`` inside ``ffi_call``; ctypes would print and drop an exception, so carry it out."""
    import ctypes

    failures: list[BaseException] = []

    def run() -> None:
        try:
            calls()
        except BaseException as exc:  # re-raised below, outside the callback
            failures.append(exc)

    ctypes.CFUNCTYPE(None)(run)()
    if failures:
        raise failures[0]


def _call_tracing_bracket(calls: Callable[[], None]) -> None:
    sys.call_tracing(calls, ())
