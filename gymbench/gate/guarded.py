"""A comparison whose numbers the statistics cannot handle ends in one clear line, not a traceback.

A record can hold values that are valid JSON numbers yet break the arithmetic of a comparison (a
median of 1e308s overflows to infinity, a ratio of 1e-320 to 1e10 underflows to zero, whose log is
undefined). Such files come from broken tools or hand edits; the user needs to know which runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from gymbench.errors import GymbenchError
from gymbench.gate.store import Selection

T = TypeVar("T")


def gate_or_explain(compare: Callable[[], T], baseline: Selection, candidate: Selection) -> T:
    try:
        return compare()
    except (ArithmeticError, ValueError) as exc:
        raise GymbenchError(
            f"cannot compare {_named(baseline)} with {_named(candidate)}: a metric's values are beyond what the "
            f"statistics can handle ({exc}); look for absurd values in those results files"
        ) from None


def _named(selection: Selection) -> str:
    return ", ".join(str(path) for path in selection.paths) or selection.label
