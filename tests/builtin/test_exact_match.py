from __future__ import annotations

import pytest

from gymbench.builtin.exact_match import ExactMatchVerifier, normalise


@pytest.mark.parametrize(
    ("expected", "response", "reward"),
    [
        ("42", "42", 1.0),
        ("42", "  42.\n", 1.0),
        ("Paris", "The capital is:\nparis", 1.0),
        ("-3", "-3", 1.0),
        ("42", "43", 0.0),
        ("42", "I think 42 or 43", 0.0),
        ("new  york", "New York", 1.0),
    ],
)
def test_right_and_wrong_answers(expected: str, response: str, reward: float) -> None:
    verdict = ExactMatchVerifier().verify({"expected_answer": expected}, response)
    assert verdict.reward == reward
    assert verdict.failure_kind is None


def test_task_without_expected_answer_is_a_failure_not_a_zero() -> None:
    verdict = ExactMatchVerifier().verify({"question": "?"}, "42")
    assert verdict.reward == 0.0
    assert verdict.failure_kind == "no_expected_answer"


def test_other_field_by_config() -> None:
    from gymbench.testing import make_plugins

    verifier = make_plugins().verifier("exact-match", {"field": "gold"})
    assert verifier.verify({"gold": "x"}, "X").reward == 1.0


def test_normalise_keeps_signs() -> None:
    assert normalise("  +5. ") == "+5"


def test_normalise_is_the_regex_collapse_it_replaced() -> None:
    """normalise splits on str.isspace instead of re's \\s: the same characters, so the same text
    (every Unicode white space, runs of them, at the edges and inside, beside punctuation)."""
    import re
    import string
    import sys

    spaces = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    assert spaces == [c for c in map(chr, range(sys.maxunicode + 1)) if re.fullmatch(r"\s", c)]
    edges = string.punctuation.replace("-", "").replace("+", "") + " "

    def by_regex(text: str) -> str:
        return re.sub(r"\s+", " ", text).strip().casefold().strip(edges)

    samples = ["", " ", "  42.\n", "New\u00a0\u2003York", "\x1c4\x1f2\x85", "a\u2028b\u2029 c!", "ß  ẞ\tİ"]
    samples += ["-3 ", "+ 4 +"]
    samples += [f"{space}x{space}{space}y{space}." for space in spaces]
    for text in samples:
        assert normalise(text) == by_regex(text), repr(text)
