"""How many rows per second each built-in verifier judges, on one thread, on a small realistic sample.

The text verifiers judge chain-of-thought style responses (a paragraph of reasoning, then the
answer); the code verifier runs stdin/stdout programs with three cases per row, each case a fresh
confined interpreter. ``confined_case_ms`` against ``bare_python_ms`` shows what the confinement
(temporary directory, limits, network namespace, audit hook) adds to a plain interpreter start.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from gymbench import Recorder
from gymbench.builtin.code_sandbox import Limits, run_confined
from gymbench.testing import make_plugins

REASONING = "Let us work through the problem step by step. First we simplify the expression, then we check it. "
ADD_PROGRAM = "```python\nimport sys\nnums = list(map(int, sys.stdin.read().split()))\nprint(sum(nums))\n```"
WRONG_PROGRAM = "```python\nprint(0)\n```"
CODE_CASES = [{"input": "1 2", "output": "3"}, {"input": "5 5 5", "output": "15"}, {"input": "0", "output": "0"}]


def gold_and_answer(n: int) -> tuple[str, str]:
    """A distinct pair per ``n`` (math-verify and sympy cache, so repeated rows would flatter them);
    every fourth answer is wrong, and the forms differ the way model answers do."""
    a, b = n % 97 + 1, n % 89 + 2
    pairs = [
        (f"\\frac{{{a}}}{{{b}}}", f"\\dfrac{{{a * 2}}}{{{b * 2}}}"),
        (str(a * b), str(a * b)),
        (f"{a}\\sqrt{{{b}}}", f"\\sqrt{{{a * a * b}}}"),
        (f"{a}\\pi", f"{a + 1}\\pi"),
    ]
    return pairs[n % len(pairs)]


def text_rows(count: int, start: int) -> list[tuple[Mapping[str, Any], str]]:
    rows = []
    for n in range(start, start + count):
        gold, answer = gold_and_answer(n)
        row = {"expected_answer": gold, "expected_pattern": r"\\boxed\{(.+)\}"}
        rows.append((row, f"{REASONING * 3}So the final answer is $\\boxed{{{answer}}}$."))
    return rows


def code_rows(count: int, start: int) -> list[tuple[Mapping[str, Any], str]]:
    return [({"tests": CODE_CASES}, WRONG_PROGRAM if n % 4 == 3 else ADD_PROGRAM) for n in range(start, start + count)]


class FreshRows:
    """Hands each measured call rows it has not seen before."""

    def __init__(self, make: Callable[[int, int], list[tuple[Mapping[str, Any], str]]], count: int) -> None:
        self.make, self.count, self.start = make, count, 0

    def __call__(self) -> list[tuple[Mapping[str, Any], str]]:
        self.start += self.count
        return self.make(self.count, self.start)


def judge_all(verify: Callable[[Mapping[str, Any], str], Any], fresh: FreshRows) -> None:
    for row, text in fresh():
        verify(row, text)


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("none", {}),
        ("exact-match", {}),
        ("regex", {"group": 1}),
        ("math", {}),
        ("code", {"timeout_s": 5}),
    ],
)
def test_verifier_rows_per_s(gymbench: Recorder, name: str, config: dict[str, Any]) -> None:
    verifier = make_plugins().verifier(name, config)
    if name == "code":
        fresh = FreshRows(code_rows, 2 if gymbench.quick else 8)
    else:
        fresh = FreshRows(text_rows, 8 if gymbench.quick else 64)
    gymbench.measure(judge_all, verifier.verify, fresh)
    gymbench.record("rows_per_s", fresh.count / gymbench.metrics["time"].value, "rows/s", "higher")
    gymbench.extra.update(rows_per_call=fresh.count, cases_per_row=len(CODE_CASES) if name == "code" else None)


def bare_python() -> None:
    subprocess.run([sys.executable, "-I", "-S", "-c", "print(3)"], input=b"1 2", capture_output=True, check=True)


def confined_case() -> None:
    program = ADD_PROGRAM.split("\n", 1)[1].rsplit("```", 1)[0]
    assert run_confined(program, stdin="1 2", limits=Limits(wall_s=60, cpu_s=5), python=sys.executable).ended == "ok"


def test_confinement_cost(gymbench: Recorder) -> None:
    gymbench.measure(bare_python, metric="bare_python")
    gymbench.measure(confined_case, metric="confined_case")
    bare, confined = gymbench.metrics["bare_python"].value, gymbench.metrics["confined_case"].value
    gymbench.record("bare_python_ms", bare * 1e3, "ms", "lower")
    gymbench.record("confined_case_ms", confined * 1e3, "ms", "lower")
    gymbench.record("confined_over_bare", confined / bare, "ratio", "lower")
