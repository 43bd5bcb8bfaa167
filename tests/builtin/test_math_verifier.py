from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor

import pytest

from gymbench.builtin.math_verifier import MathVerifier, signal_timeout
from gymbench.errors import GymbenchError
from gymbench.testing import make_plugins


@pytest.mark.parametrize(
    ("expected", "response", "reward"),
    [
        ("1/2", "We get $x = \\frac{1}{2}$, so the answer is \\boxed{\\frac{1}{2}}.", 1.0),
        ("0.5", "\\boxed{\\dfrac{1}{2}}", 1.0),
        ("2\\pi", "The circumference is $2\\pi$.", 1.0),
        ("\\{1, 2\\}", "The roots are \\boxed{\\{2, 1\\}}", 1.0),
        ("7", "3 + 4 = 7, so the answer is 7.", 1.0),
        ("7", "3 + 4 = 8, so the answer is \\boxed{8}.", 0.0),
        ("\\frac{1}{3}", "\\boxed{0.33}", 0.0),
    ],
)
def test_right_and_wrong_answers(expected: str, response: str, reward: float) -> None:
    verdict = MathVerifier().verify({"expected_answer": expected}, response)
    assert (verdict.reward, verdict.failure_kind) == (reward, None)
    assert verdict.details["got"] is not None


@pytest.mark.parametrize(
    ("row", "response", "kind"),
    [
        ({"question": "?"}, "\\boxed{1}", "no_expected_answer"),
        ({"expected_answer": "\\frac{"}, "\\boxed{1}", "unparseable_expected"),
        ({"expected_answer": ""}, "\\boxed{1}", "unparseable_expected"),
        ({"expected_answer": "3"}, "I am not sure how to solve this.", "no_answer"),
    ],
)
def test_malformed_answers_are_failures(row: dict, response: str, kind: str) -> None:
    verdict = MathVerifier().verify(row, response)
    assert (verdict.reward, verdict.failure_kind) == (0.0, kind)


def test_threads_run_without_signals_and_agree_with_the_main_thread() -> None:
    verifier = make_plugins().verifier("math", {"timeout_s": 3})
    rows = [({"expected_answer": str(n)}, f"so \\boxed{{{n if n % 2 else n + 1}}}") for n in range(8)]
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(lambda pair: verifier.verify(*pair).reward, rows))
        assert pool.submit(signal_timeout, 3).result() is None
    assert threaded == [verifier.verify(*pair).reward for pair in rows] == [n % 2 for n in range(8)]
    assert signal_timeout(3) == 3


def test_pickles_and_other_field_by_config() -> None:
    verifier = pickle.loads(pickle.dumps(make_plugins().verifier("math", {"field": "gold", "strict": False})))
    assert verifier.verify({"gold": "4"}, "\\boxed{4}").reward == 1.0


@pytest.mark.parametrize("config", [{"timeout_s": 0}, {"strict": "maybe"}, {"float_rounding": 1.5}, {"fields": "x"}])
def test_bad_config_is_a_clear_error(config: dict) -> None:
    with pytest.raises(GymbenchError, match="verifier 'math'"):
        make_plugins().verifier("math", config)
