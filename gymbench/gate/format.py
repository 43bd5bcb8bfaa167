"""How numbers read in every report, kept in one place so the table, markdown and HTML agree."""

from __future__ import annotations

import math

from gymbench.gate.compare import UNIT_CHANGED, UNMEASURED_PREFIX, MetricComparison, SuiteComparison
from gymbench.units import quantity

VERDICT_MARK = {
    "pass": "pass",
    "regressed": "REGRESSED",
    "improved": "improved",
    "inconclusive": "inconclusive",
    "ungated": "ungated",
}


def percent(fraction: float) -> str:
    """``+20.3%``; a change that rounds to nothing reads ``+0.0%``, never ``-0.0%``."""
    if not math.isfinite(fraction):
        return "n/a"
    return f"{fraction * 100 if round(fraction * 100, 1) else 0.0:+.1f}%"


def value(x: float, unit: str) -> str:
    return quantity(x, unit)


SHIFT_SHOWN = 0.005
"""A change whose shift-corrected ratio differs from its raw one by more than this shows both."""


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

    A pass names no direction, so it reverses nothing: the change column shows raw and corrected."""
    mark = VERDICT_MARK[c.verdict]
    if c.verdict not in ("improved", "regressed") or not reversed_by_shift(c):
        return mark
    raw_way = "up" if c.raw_ratio > 1 else "down"
    return f"{mark} (raw went {raw_way} {percent(c.raw_ratio - 1)}: only after the suite-wide shift is taken out)"


def sentence(text: str) -> str:
    """``text`` as the start of a sentence (after a full stop in markdown and HTML)."""
    return text[:1].upper() + text[1:]


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
    unit_changed = sum(s.why.startswith(UNIT_CHANGED) for s in suite.skipped)
    if unit_changed:
        extra.append(f"{unit_changed} not compared (unit changed)")
    return f"gate: {outcome.upper()} — {head}" + (f" ({verdicts})" if verdicts else "") + "; " + ", ".join(extra)
