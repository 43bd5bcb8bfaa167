"""The ``math`` verifier: reward 1 when the response's final answer equals the task's, mathematically.

Parsing and comparison are Hugging Face's ``math-verify`` (LaTeX and plain expressions through
sympy): ``\\boxed{…}`` wins over other candidates in the response, then "final answer" phrasings,
then the last expression; ``1/2``, ``0.5`` and ``\\frac{1}{2}`` are equal, and so are sets,
intervals and equations that sympy can compare. The gold answer is wrapped in ``$…$`` before
parsing (math-verify's advice for gold strings), so ``2\\pi`` reads as 2π, not 2.

Thread safety. math-verify bounds its own work with ``signal.alarm``, which only works in the main
thread of the main interpreter and is process-wide. This verifier therefore passes its timeout only
when it runs in the main thread (a plain loop, or a process-pool worker, where tasks run on the
main thread); from any other thread it turns math-verify's timeouts off, so concurrent calls never
touch signals. An expression that takes sympy very long then blocks its worker thread: run this
verifier in a process pool with a per-row timeout when the data holds pathological answers.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from math_verify import parse, verify
from math_verify.errors import TimeoutException

from gymbench.builtin.verifying import missing_field, unjudged
from gymbench.types import Verdict

NAME = "math"


def signal_timeout(seconds: int) -> int | None:
    """math-verify's timeout where signals work (the main thread), else ``None`` (no signals)."""
    return seconds if threading.current_thread() is threading.main_thread() else None


def parse_gold(gold: str, timeout: int | None) -> list[Any]:
    """Parse the expected answer as LaTeX math first, then as it stands (it may already hold ``$``)."""
    wrapped = gold if "$" in gold or "\\boxed" in gold else f"${gold}$"
    parsed = parse(wrapped, parsing_timeout=timeout, raise_on_error=True)
    return parsed or parse(gold, parsing_timeout=timeout, raise_on_error=True)


def shown(parsed: list[Any]) -> str | None:
    """The text math-verify extracted (its last item), for the verdict's details."""
    return str(parsed[-1]) if parsed else None


class MathVerifier:
    def __init__(
        self,
        field: str = "expected_answer",
        timeout_s: int = 5,
        float_rounding: int = 6,
        numeric_precision: int = 15,
        strict: bool = True,
    ) -> None:
        self.field = field
        self.timeout_s = timeout_s
        self.float_rounding = float_rounding
        self.numeric_precision = numeric_precision
        self.strict = strict

    def verify(self, row: Mapping[str, Any], response_text: str) -> Verdict:
        if missing_field(row, self.field):
            return unjudged("no_expected_answer", f"task has no {self.field!r} field")
        timeout = signal_timeout(self.timeout_s)
        try:
            return self._judge(str(row[self.field]), response_text, timeout)
        except TimeoutException:
            return unjudged("verifier_timeout", f"math-verify gave up after {self.timeout_s} s")

    def _judge(self, expected: str, response_text: str, timeout: int | None) -> Verdict:
        try:
            gold = parse_gold(expected, timeout)
        except TimeoutException:
            raise
        except Exception as error:  # math-verify and sympy raise many types on odd input
            return unjudged("unparseable_expected", f"math-verify failed on the expected answer: {error!r}")
        if not any(not isinstance(item, str) for item in gold):  # only math-verify's raw-text fallback
            return unjudged("unparseable_expected", "math-verify cannot read the expected answer", expected=expected)
        try:
            answer = parse(response_text, parsing_timeout=timeout, raise_on_error=True)
            if not answer:
                return unjudged("no_answer", "no final answer found in the response", expected=shown(gold))
            equal = self._equal(gold, answer, timeout)
        except TimeoutException:
            raise
        except Exception as error:
            return unjudged("verifier_error", f"math-verify failed on the response: {error!r}", expected=shown(gold))
        return Verdict(reward=float(equal), details={"expected": shown(gold), "got": shown(answer)})

    def _equal(self, gold: list[Any], answer: list[Any], timeout: int | None) -> bool:
        return verify(
            gold,
            answer,
            float_rounding=self.float_rounding,
            numeric_precision=self.numeric_precision,
            strict=self.strict,
            timeout_seconds=timeout,
            raise_on_error=True,
        )
