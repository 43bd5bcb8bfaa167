"""When two runs' instruction counts may be compared: the same Python, valgrind and allocator.

A new interpreter executes a different number of instructions for the same code, and a new
valgrind may present a different CPU (other SIMD paths in numpy); either moves every count at
once. A baseline taken with another version is therefore flagged and its counts left out, never
compared as if the code had changed. So is a baseline counted under Python's own allocator
(gymbench before 2026-11-28) against one counted under the C library's: allocation-heavy code
counts ~30 % apart between the two (:data:`gymbench.gate.callgrind.COUNTING_ENV`).
"""

from __future__ import annotations

from collections.abc import Sequence

from gymbench.gate.callgrind import ALLOCATOR_HOW
from gymbench.gate.instructions import COUNTS_EXTRA
from gymbench.measure import INSTRUCTIONS_UNIT
from gymbench.record import ResultsRecord

VERSIONED = ("python", "valgrind")


def versions(records: Sequence[ResultsRecord]) -> set[tuple[str | None, ...]]:
    """The (Python, valgrind) versions the runs were measured with."""
    return {tuple(r.fingerprint.get("software", {}).get(name) for name in VERSIONED) for r in records}


def counts_mismatch(baseline: Sequence[ResultsRecord], candidate: Sequence[ResultsRecord]) -> str | None:
    """Why instruction counts of these runs cannot be compared, or ``None`` when they can."""
    if not _has_counts(baseline) or not _has_counts(candidate):
        return None
    base, cand = versions(baseline), versions(candidate)
    if base == cand and len(base) == 1:
        return _allocators_differ(baseline, candidate)
    return (
        f"instruction counts not compared: the baseline was measured with {_describe(base)}, "
        f"the candidate with {_describe(cand)}; save a new baseline with this Python and valgrind"
    )


def _has_counts(records: Sequence[ResultsRecord]) -> bool:
    return any(m.unit == INSTRUCTIONS_UNIT for r in records for b in r.benchmarks for m in b.metrics.values())


def _describe(found: set[tuple[str | None, ...]]) -> str:
    return " / ".join(f"Python {python}, valgrind {valgrind or 'none'}" for python, valgrind in sorted(found, key=str))


def _allocators_differ(baseline: Sequence[ResultsRecord], candidate: Sequence[ResultsRecord]) -> str | None:
    sides = {"baseline": _c_allocator(baseline), "candidate": _c_allocator(candidate)}
    if len(set(sides.values())) == 1 and None not in sides.values():
        return None
    older = " and ".join(side for side, c_allocator in sides.items() if c_allocator is not True)
    return (
        f"instruction counts not compared: the {older} was counted under Python's own allocator (gymbench "
        f"before 2026-11-28) or a mix, the other under {ALLOCATOR_HOW}; count the {older} again with this gymbench"
    )


def _c_allocator(records: Sequence[ResultsRecord]) -> bool | None:
    """Whether every counted benchmark says it was counted under the C library's allocator (``None``: a mix)."""
    said = {
        ALLOCATOR_HOW in str(b.extra.get(COUNTS_EXTRA, ""))
        for r in records
        for b in r.benchmarks
        if any(m.unit == INSTRUCTIONS_UNIT for m in b.metrics.values())
    }
    return said.pop() if len(said) == 1 else None
