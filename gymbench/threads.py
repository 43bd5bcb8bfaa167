"""Which benchmarks run on more threads than the caller's (a BLAS or OpenMP pool, their own threads).

Both gates force one BLAS/OpenMP thread (``OPENBLAS_NUM_THREADS=1`` and the like): callgrind
counts only the calling thread, and two A/B workers share one CPU. For a benchmark whose work
goes to a thread pool that hides a change in thread count or parallel speed-up, so its verdict
has to say so, and only its verdict: a note on every row would be ignored, and one per suite
(what the gates said before) named no benchmark. :class:`ThreadWatch` reads each thread's CPU
time (``/proc/self/task/*/schedstat``, nanoseconds) around the calls and counts the other
threads that did a real share of the work; :func:`lifted` raises the pools' limits for a probe in
a process that was started with them forced.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

THREADS_EXTRA = "threads"
"""The key in a benchmark's ``extra``: how many threads besides the caller worked during its calls."""
MIN_SHARE = 0.1
"""A thread counts when it used at least this share of the calling thread's CPU time: a BLAS
pool's threads do about as much as the caller, a bookkeeping thread (a progress bar, a server
idling) next to nothing."""
MIN_NS = 1_000_000
"""...and at least 1 ms: below that a thread's CPU time is the scheduler's rounding."""


def thread_cpu_ns() -> dict[int, int]:
    """CPU nanoseconds of each thread of this process, by native thread id (empty where unknown)."""
    tasks = Path("/proc/self/task")
    times = {}
    try:
        names = os.listdir(tasks)
    except OSError:
        return _psutil_thread_cpu_ns()
    for name in names:
        try:
            times[int(name)] = int((tasks / name / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile, or the kernel has no schedstat
    return times or _psutil_thread_cpu_ns()


def _psutil_thread_cpu_ns() -> dict[int, int]:
    """The portable fallback: clock ticks (10 ms), enough for a measurement's whole run."""
    import psutil

    try:
        return {t.id: int((t.user_time + t.system_time) * 1e9) for t in psutil.Process().threads()}
    except (psutil.Error, OSError):
        return {}


class ThreadWatch:
    """``with ThreadWatch() as watch: calls()``; then ``watch.helpers``: other threads that worked."""

    def __init__(self) -> None:
        self.helpers = 0
        self._caller = threading.get_native_id()
        self._before: dict[int, int] = {}

    def __enter__(self) -> ThreadWatch:
        self._before = thread_cpu_ns()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        after = thread_cpu_ns()
        gains = {tid: ns - self._before.get(tid, 0) for tid, ns in after.items()}
        mine = gains.pop(self._caller, 0)
        floor = max(MIN_NS, MIN_SHARE * mine)
        self.helpers = sum(gain >= floor for gain in gains.values())


SETTLE_STEP_S = 0.005
SETTLE_MAX_S = 0.5


def busy_threads() -> set[int] | None:
    """Other threads of this process that are running or waiting for a CPU (state ``R``).

    ``None`` where ``/proc`` is not there. A pool thread spinning for work is ``R`` however little
    CPU a loaded machine gives it; one that went to sleep is ``S``.
    """
    tasks = Path("/proc/self/task")
    caller = threading.get_native_id()
    try:
        names = os.listdir(tasks)
    except OSError:
        return None
    busy = set()
    for name in names:
        try:
            stat = (tasks / name / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        if int(name) != caller and stat[stat.rindex(")") + 2 :].startswith("R"):
            busy.add(int(name))
    return busy


def settle() -> None:
    """Wait (at most :data:`SETTLE_MAX_S`) until no other thread of this process is running.

    A BLAS pool's threads spin for about 0.1 s after their last job, and after the pool is
    started (97 ms of CPU in 0.3 s idle, measured with numpy's OpenBLAS): left alone they would
    be counted as the next benchmark's helpers, and next to a worker pinned to one CPU they would
    take its rounds' time. Judged by thread state, not CPU time: on a loaded machine a spinning
    thread may get almost no CPU in a short window and still spin through the next one. A
    benchmark's own busy threads make this wait the full 0.5 s.
    """
    deadline = time.monotonic() + SETTLE_MAX_S
    while (busy := busy_threads()) is None or busy:
        if busy is None:
            _settle_by_cpu(deadline)
            return
        if time.monotonic() >= deadline:
            return
        time.sleep(SETTLE_STEP_S)


def _settle_by_cpu(deadline: float) -> None:
    """Without ``/proc``: until a step passes in which no other thread used 1 ms of CPU."""
    caller = threading.get_native_id()
    while time.monotonic() < deadline:
        before = thread_cpu_ns()
        time.sleep(SETTLE_STEP_S * 2)
        after = thread_cpu_ns()
        if all(ns - before.get(tid, 0) < MIN_NS for tid, ns in after.items() if tid != caller):
            return


@contextlib.contextmanager
def lifted() -> Iterator[None]:
    """BLAS/OpenMP pools allowed every CPU of the machine inside, restored after (threadpoolctl).

    Used for one probe in a process started with the pools forced to one thread, where otherwise
    no benchmark would show its threads. Without threadpoolctl nothing is lifted.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=os.cpu_count() or 1):
        yield


def forced_note(helpers: int, where: str) -> str:
    """What a verdict says on the row of a benchmark that ran on ``helpers`` more threads ``where``."""
    return (
        f"threads forced to 1 (this benchmark uses BLAS/OpenMP or threads of its own: {helpers} more "
        f"{'thread' if helpers == 1 else 'threads'} worked during its calls {where}); a change in its "
        "thread count or parallel speed-up is invisible here"
    )
