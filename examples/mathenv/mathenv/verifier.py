"""The ``mathenv-answer`` verifier: the last number in the response against the task's answer."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gymbench import Verdict

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


class AnswerVerifier:
    cost = "cheap"  # a regex and a comparison: run inline on the event loop

    def __init__(self, tolerance: float = 0.0, field: str = "expected_answer") -> None:
        self.tolerance = tolerance
        self.field = field

    def verify(self, row: Mapping[str, Any], response_text: str) -> Verdict:
        expected = row.get(self.field)
        if expected is None:
            return Verdict(0.0, {"reason": f"task has no {self.field!r}"}, failure_kind="no_expected_answer")
        numbers = NUMBER.findall(response_text)
        if not numbers:
            return Verdict(0.0, {"reason": "no number in the response"}, failure_kind="no_answer")
        got, want = float(numbers[-1]), float(expected)
        close = abs(got - want) <= self.tolerance * max(abs(want), 1.0)
        return Verdict(1.0 if close else 0.0, {"expected": want, "got": got})
