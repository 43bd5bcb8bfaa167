"""Which benchmarks the two sides share, and which are new, missing or probably renamed.

Nothing unmatched is passed silently: every benchmark id on only one side is listed, and pairs
that look like one benchmark under a new name are listed as renamed (not compared, because a
rename can hide a change of what is measured).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field

from gymbench.record import ResultsRecord

RENAME_SIMILARITY = 0.8
WORK_KEY = "work"
"""The parameter holding the digest of everything that defines a benchmark's work (``gymbench train``
sets it; the pytest API keeps each job's parameters in ``extra[job]``)."""


@dataclass(frozen=True)
class SuiteMatch:
    common: list[str]
    new: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)
    """(baseline id, candidate id) pairs that look like the same benchmark renamed."""


def benchmark_ids(records: Sequence[ResultsRecord]) -> dict[str, frozenset[str]]:
    """Every benchmark id in the records, with its metric names (ids keep first-seen order)."""
    found: dict[str, set[str]] = {}
    for record in records:
        for bench in record.benchmarks:
            found.setdefault(bench.id, set()).update(bench.metrics)
    return {bench_id: frozenset(names) for bench_id, names in found.items()}


def match_benchmarks(baseline: Sequence[ResultsRecord], candidate: Sequence[ResultsRecord]) -> SuiteMatch:
    base, cand = benchmark_ids(baseline), benchmark_ids(candidate)
    common = [bench_id for bench_id in cand if bench_id in base]
    missing = [bench_id for bench_id in base if bench_id not in cand]
    new = [bench_id for bench_id in cand if bench_id not in base]
    renamed = _renames(missing, new, base, cand)
    paired_old = {old for old, _ in renamed}
    paired_new = {new_id for _, new_id in renamed}
    return SuiteMatch(
        common=common,
        new=[b for b in new if b not in paired_new],
        missing=[b for b in missing if b not in paired_old],
        renamed=renamed,
    )


def unlike_work(
    baseline: Sequence[ResultsRecord], candidate: Sequence[ResultsRecord], common: Sequence[str]
) -> dict[str, str]:
    """Shared ids whose work differs between the sides (a pytest benchmark whose settings changed
    keeps its test id), each with why: comparing them would measure the change of settings."""
    base, cand = _work_digests(baseline), _work_digests(candidate)
    unlike = {}
    for bench_id in common:
        before, after = base.get(bench_id, set()), cand.get(bench_id, set())
        if before and after and before != after:
            unlike[bench_id] = (
                f"not compared: its work differs (work digest {', '.join(sorted(before))} in the baseline, "
                f"{', '.join(sorted(after))} in the candidate); a setting that changes the step changed. "
                "Save a new baseline for these settings"
            )
    return unlike


def _work_digests(records: Sequence[ResultsRecord]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for record in records:
        for bench in record.benchmarks:
            params = [bench.params] + [
                job["params"]
                for jobs in bench.extra.values()
                if isinstance(jobs, list)
                for job in jobs
                if isinstance(job, dict) and isinstance(job.get("params"), dict)
            ]
            digests = {str(p[WORK_KEY]) for p in params if WORK_KEY in p}
            if digests:
                found.setdefault(bench.id, set()).update(digests)
    return found


def _renames(
    missing: list[str], new: list[str], base: dict[str, frozenset[str]], cand: dict[str, frozenset[str]]
) -> list[tuple[str, str]]:
    """Greedy pairing, most similar first, of ids with the same metrics and similar names."""
    scored = sorted(
        ((_similarity(old, new_id), old, new_id) for old in missing for new_id in new if base[old] == cand[new_id]),
        reverse=True,
    )
    pairs: list[tuple[str, str]] = []
    used: set[str] = set()
    for score, old, new_id in scored:
        if score >= RENAME_SIMILARITY and old not in used and new_id not in used:
            pairs.append((old, new_id))
            used.update((old, new_id))
    return sorted(pairs)


def _similarity(old: str, new: str) -> float:
    """Same test function and parameters in a moved file counts as a rename outright."""
    if _tail(old) == _tail(new):
        return 1.0
    return difflib.SequenceMatcher(None, old, new).ratio()


def _tail(bench_id: str) -> str:
    return bench_id.rsplit("::", 1)[-1]
