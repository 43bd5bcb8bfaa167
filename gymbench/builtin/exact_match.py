"""The ``exact-match`` verifier: reward 1 when the response's answer equals ``expected_answer``.

Comparison is on normalised text (case, surrounding white space and punctuation, inner runs of
white space), and the response's last line counts as its answer when the whole text does not
match, because chat models tend to explain before answering.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Mapping
from typing import Any

from gymbench.types import Verdict

_EDGE_PUNCTUATION = string.punctuation.replace("-", "").replace("+", "")
_EDGES = _EDGE_PUNCTUATION + " "


@functools.lru_cache(maxsize=4096)
def _normalised_expected(text: str) -> str:
    """The expected answers of a dataset repeat (every rollout of a task, and small answer sets):
    normalised once each."""
    return normalise(text)


def normalise(text: str) -> str:
    """``str.split()`` splits on exactly the characters ``\\s`` matches (``str.isspace``), so the
    join is the regex's collapse and strip in one pass, at a fraction of the cost."""
    return " ".join(text.split()).casefold().strip(_EDGES)


def _last_line(text: str) -> str | None:
    """The last line with more than white space in it, or None when there is none."""
    for line in reversed(text.strip().splitlines()):
        if line.strip():
            return line
    return None


class ExactMatchVerifier:
    cost = "cheap"

    def __init__(self, field: str = "expected_answer") -> None:
        self.field = field

    def verify(self, row: Mapping[str, Any], response_text: str) -> Verdict:
        if self.field not in row or row[self.field] is None:
            return Verdict(
                reward=0.0,
                details={"reason": f"task has no {self.field!r} field"},
                failure_kind="no_expected_answer",
            )
        expected = _normalised_expected(str(row[self.field]))
        whole = normalise(response_text)
        line = _last_line(response_text)
        # a one-line answer is its own last line: normalise strips the same white space, so the
        # second normalisation would give ``whole`` again
        last_line = "" if line is None else whole if line == response_text.strip() else normalise(line)
        matched = expected in (whole, last_line)
        return Verdict(
            reward=1.0 if matched else 0.0,
            details={"expected": expected, "got": last_line if line is not None else whole},
        )
