"""The garbage collector's share of a collection's CPU, cut without changing what is collected.

Measured on the driver overhead bench (``benches/test_collect.py``, zero-latency simulator,
parallelism 64): CPython's cyclic collector took 30-40 µs of client CPU per rollout, about a fifth
of a minimal aiohttp loop's whole cost. Two things make it expensive during a run: every full
collection walks every object the process made before the run (its imported modules: tens of
thousands of objects that will never be garbage), and the rollouts in flight outlive the young
generations' collections, so they are promoted and trigger those full collections often.

So while a run is on, :func:`hold_gc` moves everything that existed before it into the permanent
generation (``gc.freeze``: never scanned, never freed, as if referenced from outside) and raises
the youngest generation's threshold to :data:`YOUNG_THRESHOLD` allocations; both are undone when
the run ends (nested or overlapping runs: when the last one ends). Nothing that is garbage stays
garbage: cycles made during the run are still collected, and what was frozen is scanned again
afterwards. A process that turned the collector off (``gc.disable()``) is left as it is.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000
"""Allocations (net of frees) between young collections while a run is on; CPython's default is 700."""

_held = 0
_saved_thresholds: tuple[int, int, int] | None = None


class GcHold:
    """One run's hold; :meth:`release` ends it (once, however often it is called)."""

    def __init__(self) -> None:
        global _held, _saved_thresholds
        self._active = gc.isenabled()
        if not self._active:
            return
        _held += 1
        if _held == 1:
            young, middle, old = gc.get_threshold()
            _saved_thresholds = (young, middle, old)
            gc.freeze()
            gc.set_threshold(max(young, YOUNG_THRESHOLD), middle, old)

    def release(self) -> None:
        global _held, _saved_thresholds
        if not self._active:
            return
        self._active = False
        _held -= 1
        if _held == 0:
            if _saved_thresholds is not None:
                gc.set_threshold(*_saved_thresholds)
                _saved_thresholds = None
            gc.unfreeze()


def hold_gc() -> GcHold:
    """Hold the collector lean until the returned hold's :meth:`~GcHold.release`."""
    return GcHold()
