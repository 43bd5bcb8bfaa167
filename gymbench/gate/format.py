"""How numbers read in every report, kept in one place so the table, markdown and HTML agree."""

from __future__ import annotations

import math
import re

from gymbench.gate.compare import UNMEASURED_PREFIX, MetricComparison, SuiteComparison
from gymbench.units import quantity

VERDICT_MARK = {
    "pass": "pass",
    "regressed": "REGRESSED",
    "improved": "improved",
    "inconclusive": "inconclusive",
    "ungated": "ungated",
}
HEADERS = ("benchmark", "metric", "baseline", "candidate", "ratio", "interval", "min effect", "q", "verdict")


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with every control character shown as its escape (``\\x1b``): benchmark names and
    notes come from records anyone can write, and a name holding ``\\x1b[2J`` cleared the terminal
    the comparison printed to (and reached ``--markdown`` raw)."""
    return _CONTROL.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), text)


def percent(fraction: float) -> str:
    return f"{fraction * 100:+.1f}%" if math.isfinite(fraction) else "n/a"


def value(x: float, unit: str) -> str:
    return quantity(x, unit)


SHIFT_SHOWN = 0.005
"""A candidate whose corrected value differs from its raw one by more than this shows both."""


def candidate(c: MetricComparison) -> str:
    """The raw candidate value and, where the ratio column (suite-shift corrected, a ratio of
    bootstrapped medians) differs from raw / baseline, the value it implies: columns that agree."""
    raw = value(c.cand_value, c.unit)
    corrected = c.base_value * c.ratio
    if not (math.isfinite(corrected) and c.cand_value) or abs(corrected / c.cand_value - 1) <= SHIFT_SHOWN:
        return raw
    return f"{raw} (corrected {value(corrected, c.unit)})"


def interval(c: MetricComparison) -> str:
    low, high = c.interval
    if not (math.isfinite(low) and math.isfinite(high)):
        return "too few samples"
    return f"[{low:.3f}, {high:.3f}]"


def min_effect(c: MetricComparison) -> str:
    text = f"{c.min_effect:.0%}"
    if not c.gated and c.mde is not None:
        text += f" (ungated: MDE {c.mde:.0%})"
    return text


def row(c: MetricComparison) -> tuple[str, ...]:
    return (
        c.benchmark,
        c.metric,
        value(c.base_value, c.unit),
        candidate(c),
        ratio(c),
        interval(c),
        min_effect(c),
        f"{c.q:.2g}",
        verdict(c),
    )


def ratio(c: MetricComparison) -> str:
    """The corrected ratio, with the raw one beside it wherever the suite-wide shift moved it."""
    raw, corrected = c.raw_ratio, c.ratio
    if not (math.isfinite(raw) and raw) or abs(corrected / raw - 1) <= SHIFT_SHOWN:
        return f"{corrected:.3f}"
    return f"{raw:.3f} raw, {corrected:.3f} corrected"


def reversed_by_shift(c: MetricComparison) -> bool:
    """The raw change and the shift-corrected one point opposite ways (each beyond rounding)."""
    raw, corrected = c.raw_ratio, c.ratio
    return (
        math.isfinite(raw)
        and abs(raw - 1) > SHIFT_SHOWN
        and abs(corrected - 1) > SHIFT_SHOWN
        and ((raw > 1) != (corrected > 1))
    )


def verdict(c: MetricComparison) -> str:
    """The verdict; a change that the shift correction turned against the raw change says so.

    A pass names no direction, so it reverses nothing: the ratio column shows raw and corrected."""
    mark = VERDICT_MARK[c.verdict]
    if c.verdict not in ("improved", "regressed") or not reversed_by_shift(c):
        return mark
    raw_way = "up" if c.raw_ratio > 1 else "down"
    return f"{mark} (raw went {raw_way} {percent(c.raw_ratio - 1)}: only after the suite-wide shift is taken out)"


def ordered(suite: SuiteComparison) -> list[MetricComparison]:
    """Worst first: regressions, then inconclusive, ungated, improvements, passes."""
    rank = {"regressed": 0, "inconclusive": 1, "ungated": 2, "improved": 3, "pass": 4}
    return sorted(suite.comparisons, key=lambda c: (rank[c.verdict], -c.badness))


def shift_line(suite: SuiteComparison) -> str:
    shift = suite.shift
    if suite.method == "ab":
        return "interleaved A/B: both commits measured round by round on one CPU, no suite-wide shift to take out"
    if shift.metrics < 5:
        return f"suite-wide shift: not estimated ({shift.metrics} speed metrics, need 5)"
    state = "taken out of every speed metric" if shift.applied else "not corrected"
    return (
        f"suite-wide shift: the candidate's runner is {percent(shift.ratio - 1)} "
        f"(± {shift.se * 100:.1f}%) on {shift.metrics} speed metrics; {state}"
    )


def summary_line(suite: SuiteComparison, outcome: str) -> str:
    """Gated and ungated counted apart, so a suite nobody could gate never reads as a green pass."""
    gated, total = suite.gated, len(suite.comparisons)
    nothing = ": nothing was gated" if suite.nothing_gated else (": nothing was compared" if not total else "")
    head = f"{gated} gated, {total - gated} ungated" + nothing
    verdicts = ", ".join(f"{n} {name}" for name, n in suite.counts.items() if n)
    match = suite.match
    extra = [f"{len(match.new)} new", f"{len(match.missing)} missing", f"{len(match.renamed)} renamed"]
    unmeasured = sum(not s.inconclusive and s.what.startswith(UNMEASURED_PREFIX) for s in suite.skipped)
    if unmeasured:
        extra.append(f"{unmeasured} not measured")
    return f"gate: {outcome.upper()} — {head}" + (f" ({verdicts})" if verdicts else "") + "; " + ", ".join(extra)
