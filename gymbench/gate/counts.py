"""When two runs' instruction counts may be compared: measured by the same Python and valgrind.

A new interpreter executes a different number of instructions for the same code, and a new
valgrind may present a different CPU (other SIMD paths in numpy); either moves every count at
once. A baseline taken with another version is therefore flagged and its counts left out, never
compared as if the code had changed.
"""

from __future__ import annotations

from collections.abc import Sequence

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
        return None
    return (
        f"instruction counts not compared: the baseline was measured with {_describe(base)}, "
        f"the candidate with {_describe(cand)}; save a new baseline with this Python and valgrind"
    )


def _has_counts(records: Sequence[ResultsRecord]) -> bool:
    return any(m.unit == INSTRUCTIONS_UNIT for r in records for b in r.benchmarks for m in b.metrics.values())


def _describe(found: set[tuple[str | None, ...]]) -> str:
    return " / ".join(f"Python {python}, valgrind {valgrind or 'none'}" for python, valgrind in sorted(found, key=str))
