"""Simulated time for asyncio: an event loop whose clock jumps to the next timer instead of sleeping.

Tests of timing (how many requests a queue admits, what throughput an engine reaches, where a
tuner puts the knee) must give the same answer on an idle laptop and on a CI machine at load 10.
On :class:`VirtualTimeLoop`, ``loop.time()`` is simulated seconds starting at 0. When no callback
is ready, no I/O is ready and no executor job is running, the loop moves its clock to the next
timer at once instead of waiting for it, so ``await asyncio.sleep(10)`` returns immediately in
wall time and exactly 10 simulated seconds later. Code on the loop costs no simulated time:
time passes only through timers, which makes every timed outcome a function of the program alone.

Limits, by design:

* In-process only. Real sockets to another process do not mix: the loop does not wait for a
  peer that has not answered yet, it jumps to the next timer (a client timeout, say). Drive the
  simulator through :class:`gymbench.sim.inprocess.InProcessBackend`, not over HTTP.
* Jobs for the default executor (``asyncio.to_thread``: a read of a server's counters, a file
  write) run inline, at the moment they are handed over, so what they read is the loop's state at
  that moment. In a thread, other callbacks of the same simulated instant ran while it read, as
  many as the machine's load allowed: a tune in simulated time read a different queue and stopped
  at a different level on a busy CI runner. Such a job must not wait for the loop.
* Jobs for an explicit executor (a verifier's process pool) run in real time while the simulated
  clock stands still; such a job must finish without waiting for simulated time.
* ``time.monotonic()`` / ``time.perf_counter()`` stay real: code under test must read the loop's
  clock (the rollout collector and prober take a ``clock=``).

``looptime`` (PyPI) does this and more, but is a pytest plugin needing Python 3.11+ (gymbench
supports 3.10), registers three ``pytest11`` entry points in every run of the environment, and
spends 1,100 lines on features this needs none of; this module has one rule and no globals.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, TypeVar

T = TypeVar("T")


class _FastForwardSelector(selectors.DefaultSelector):
    """The loop's selector: polls real I/O, and instead of blocking on a timer, hands the wait back."""

    def __init__(self, skip: Callable[[float], bool]) -> None:
        super().__init__()
        self._skip = skip

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0 or (timeout is not None and self._skip(timeout)):
            return ready
        # Nothing scheduled (waiting on real I/O) or an executor job running: wait in real time.
        return super().select(timeout)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop on simulated time (see the module's documentation)."""

    def __init__(self) -> None:
        self._now = 0.0
        self._executor_jobs: set[asyncio.Future[Any]] = set()
        super().__init__(selector=_FastForwardSelector(self._skip))

    def time(self) -> float:
        return self._now

    def run_in_executor(self, executor: Executor | None, func: Callable[..., T], *args: object) -> asyncio.Future[T]:
        """The default executor's jobs run inline (see the module's documentation); an explicit
        executor's are tracked, so the clock stands still until the job is back instead of jumping
        past it."""
        if executor is None:
            done: asyncio.Future[T] = self.create_future()
            try:
                done.set_result(func(*args))
            except Exception as exc:  # the caller's await raises it, as from a thread
                done.set_exception(exc)
            return done
        job = super().run_in_executor(executor, func, *args)
        self._executor_jobs.add(job)
        job.add_done_callback(self._executor_jobs.discard)
        return job

    def _skip(self, seconds: float) -> bool:
        """Advance the clock by ``seconds`` (the wait until the next timer) unless a job runs."""
        if self._executor_jobs:
            return False
        self._now += seconds
        return True


def run_in_simulated_time(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on a fresh :class:`VirtualTimeLoop` and close it, as :func:`asyncio.run` does."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            _cancel_leftovers(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    leftovers = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in leftovers:
        task.cancel()
    if leftovers:
        loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
