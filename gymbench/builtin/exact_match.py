"""The ``exact-match`` verifier: reward 1 when the response's answer equals ``expected_answer``.

Comparison is on normalised text (case, surrounding white space and punctuation, inner runs of
white space), and the response's last line counts as its answer when the whole text does not
match, because chat models tend to explain before answering.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any

from gymbench.types import Verdict

_SPACES = re.compile(r"\s+")
_EDGE_PUNCTUATION = string.punctuation.replace("-", "").replace("+", "")


def normalise(text: str) -> str:
    collapsed = _SPACES.sub(" ", text).strip().casefold()
    return collapsed.strip(_EDGE_PUNCTUATION + " ")


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
        expected = normalise(str(row[self.field]))
        whole = normalise(response_text)
        lines = [line for line in response_text.strip().splitlines() if line.strip()]
        last_line = normalise(lines[-1]) if lines else ""
        matched = expected in (whole, last_line)
        return Verdict(
            reward=1.0 if matched else 0.0,
            details={"expected": expected, "got": last_line if lines else whole},
        )
