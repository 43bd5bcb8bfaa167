"""The ``regex`` verifier: reward 1 when a regular expression matches the response.

The pattern comes from the task row (``expected_pattern`` unless configured) or, for every row,
from the configuration. With ``group`` set, the matched group is the answer and is compared with
the row's ``expected_answer`` after the same normalisation as ``exact-match``; this is how a
"final answer: X" format is checked and its X graded in one step. ``mode: fullmatch`` asks the
whole response, stripped of surrounding white space, to match; ``search`` (the default) any part.

Patterns are compiled with the standard library's :mod:`re` and cached (per process, by pattern
and flags), so a dataset that repeats patterns compiles each once. :mod:`re` cannot be interrupted:
a catastrophically backtracking pattern stalls its worker. Guarding against that is left to the
task author and to the engine's per-row timeout, rather than adding a dependency (the ``regex``
package) whose syntax differs slightly from :mod:`re`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from gymbench.builtin.exact_match import normalise
from gymbench.builtin.verifying import missing_field, unjudged
from gymbench.errors import GymbenchError
from gymbench.types import Verdict

NAME = "regex"
FLAG_LETTERS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE, "a": re.ASCII}


@lru_cache(maxsize=4096)
def compile_pattern(pattern: str, flags: int) -> re.Pattern[str]:
    """Compile once per distinct pattern; ``lru_cache`` is thread-safe and keeps the verifier picklable."""
    return re.compile(pattern, flags)


def parse_flags(letters: str) -> int:
    unknown = sorted(set(letters) - set(FLAG_LETTERS))
    if unknown:
        raise GymbenchError(
            f"verifier {NAME!r}: unknown flag letter(s) {''.join(unknown)!r}; use any of {''.join(FLAG_LETTERS)!r}"
        )
    flags = 0
    for letter in letters:
        flags |= FLAG_LETTERS[letter]
    return flags


class RegexVerifier:
    cost = "cheap"  # runs inline on the event loop; counts as cheap for fast mode

    def __init__(
        self,
        pattern: str | None = None,
        pattern_field: str = "expected_pattern",
        mode: str = "search",
        flags: int = 0,
        group: int | str | None = None,
        answer_field: str = "expected_answer",
    ) -> None:
        self.pattern = pattern
        self.pattern_field = pattern_field
        self.fullmatch = mode == "fullmatch"
        self.flags = flags
        self.group = group
        self.answer_field = answer_field

    def verify(self, row: Mapping[str, Any], response_text: str) -> Verdict:
        pattern = self.pattern if self.pattern is not None else row.get(self.pattern_field)
        if pattern is None:
            return unjudged("no_pattern", f"task has no {self.pattern_field!r} field and the config gives no pattern")
        try:
            compiled = compile_pattern(str(pattern), self.flags)
        except re.error as error:
            return unjudged("invalid_pattern", f"pattern does not compile: {error}", pattern=str(pattern))
        if self.group is not None and missing_field(row, self.answer_field):
            return unjudged("no_expected_answer", f"task has no {self.answer_field!r} field to compare the group with")
        text = response_text.strip() if self.fullmatch else response_text
        match = compiled.fullmatch(text) if self.fullmatch else compiled.search(text)
        if match is None or self.group is None:
            return Verdict(
                reward=float(match is not None), details={"pattern": compiled.pattern, "matched": bool(match)}
            )
        return self._compare_group(match, row)

    def _compare_group(self, match: re.Match[str], row: Mapping[str, Any]) -> Verdict:
        try:
            answer = match.group(self.group)  # type: ignore[arg-type]
        except IndexError as error:  # an unknown group number or name
            return unjudged(
                "invalid_pattern", f"pattern has no group {self.group!r}: {error}", pattern=match.re.pattern
            )
        expected = normalise(str(row[self.answer_field]))
        got = normalise(answer) if answer is not None else None
        return Verdict(
            reward=float(got == expected),
            details={"pattern": match.re.pattern, "matched": True, "expected": expected, "got": got},
        )
