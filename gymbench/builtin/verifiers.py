"""The built-in verifiers' plugin: ``exact-match``, ``regex``, ``math``, ``code`` and ``none``.

Each verifier's options are a dataclass checked by :mod:`gymbench.settings` (a misspelt option
is an error naming the verifier, never silently ignored). The verifiers themselves are imported
when a run creates one: ``math`` pulls in sympy, which takes half a second to import.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from dataclasses import dataclass
from typing import Any

from gymbench.errors import GymbenchError
from gymbench.hookspecs import hookimpl
from gymbench.settings import at_least, doc, one_of, require
from gymbench.types import Component, Verifier

REGEX_FLAG_LETTERS = "imsxa"


@dataclass
class ExactMatchSettings:
    field: str = dataclasses.field(default="expected_answer", metadata=doc("the row field holding the expected answer"))


@dataclass
class RegexSettings:
    pattern: str | None = dataclasses.field(
        default=None, metadata=doc("one pattern for every row (default: the row's)")
    )
    pattern_field: str = dataclasses.field(
        default="expected_pattern", metadata=doc("the row field holding the pattern")
    )
    mode: str = dataclasses.field(default="search", metadata=doc("search (anywhere) or fullmatch (the whole response)"))
    flags: str = dataclasses.field(default="", metadata=doc(f"flag letters, any of {REGEX_FLAG_LETTERS!r}"))
    group: Any = dataclasses.field(default=None, metadata=doc("a group number or name whose match is graded"))
    answer_field: str = dataclasses.field(default="expected_answer", metadata=doc("what the graded group must equal"))

    def __post_init__(self) -> None:
        one_of("mode", self.mode, ("search", "fullmatch"))
        unknown = sorted(set(self.flags) - set(REGEX_FLAG_LETTERS))
        require(not unknown, "flags", self.flags, f"letters from {REGEX_FLAG_LETTERS!r}")
        require(
            self.group is None or (isinstance(self.group, (int, str)) and not isinstance(self.group, bool)),
            "group",
            self.group,
            "a group number or name",
        )
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as error:
                raise GymbenchError(f"verifier 'regex': setting 'pattern' does not compile: {error}") from None


@dataclass
class MathSettings(ExactMatchSettings):
    timeout_s: int = dataclasses.field(default=5, metadata=doc("seconds math-verify may spend on one response"))
    float_rounding: int = dataclasses.field(default=6, metadata=doc("decimal places floats are rounded to"))
    numeric_precision: int = dataclasses.field(default=15, metadata=doc("significant digits compared"))
    strict: bool = dataclasses.field(default=True, metadata=doc("math-verify's strict mode"))

    def __post_init__(self) -> None:
        at_least("timeout_s", self.timeout_s, 1)
        at_least("float_rounding", self.float_rounding, 0)
        at_least("numeric_precision", self.numeric_precision, 1)


@dataclass
class CodeSettings:
    tests_field: str = dataclasses.field(default="tests", metadata=doc("the row field holding the tests"))
    timeout_s: float = dataclasses.field(default=10.0, metadata=doc("wall-clock seconds per program run"))
    cpu_s: int | None = dataclasses.field(
        default=None, metadata=doc("CPU seconds per run (default: timeout_s rounded up)")
    )
    memory_mb: int = dataclasses.field(default=1024, metadata=doc("address-space limit per run"))
    file_mb: int = dataclasses.field(default=16, metadata=doc("largest file a run may write"))
    scoring: str = dataclasses.field(default="fraction", metadata=doc("fraction (of tests passed) or all_or_nothing"))
    compare: str = dataclasses.field(default="lines", metadata=doc("lines, tokens or exact output comparison"))
    stop_after_timeout: bool = dataclasses.field(
        default=True, metadata=doc("skip a task's later tests after a timeout")
    )
    python: str | None = dataclasses.field(
        default=None, metadata=doc("interpreter that runs programs (default: this one)")
    )
    tmp_dir: str | None = dataclasses.field(default=None, metadata=doc("where sandboxes are created"))

    def __post_init__(self) -> None:
        at_least("timeout_s", self.timeout_s, 0.1)
        at_least("cpu_s", self.cpu_s, 1)
        at_least("memory_mb", self.memory_mb, 64)
        at_least("file_mb", self.file_mb, 1)
        one_of("scoring", self.scoring, ("fraction", "all_or_nothing"))
        one_of("compare", self.compare, ("lines", "tokens", "exact"))


@dataclass
class NoneSettings:
    reward: float = dataclasses.field(default=0.0, metadata=doc("the constant reward every row gets"))


def make_exact_match(settings: ExactMatchSettings) -> Verifier:
    from gymbench.builtin.exact_match import ExactMatchVerifier

    return ExactMatchVerifier(field=settings.field)


def make_regex(settings: RegexSettings) -> Verifier:
    from gymbench.builtin.regex_verifier import RegexVerifier, parse_flags

    return RegexVerifier(
        pattern=settings.pattern,
        pattern_field=settings.pattern_field,
        mode=settings.mode,
        flags=parse_flags(settings.flags),
        group=settings.group,
        answer_field=settings.answer_field,
    )


def make_math(settings: MathSettings) -> Verifier:
    from gymbench.builtin.math_verifier import MathVerifier

    return MathVerifier(
        field=settings.field,
        timeout_s=settings.timeout_s,
        float_rounding=settings.float_rounding,
        numeric_precision=settings.numeric_precision,
        strict=settings.strict,
    )


def make_code(settings: CodeSettings) -> Verifier:
    from gymbench.builtin.code_sandbox import Limits
    from gymbench.builtin.code_verifier import CodeVerifier

    limits = Limits(
        wall_s=settings.timeout_s,
        cpu_s=settings.cpu_s if settings.cpu_s is not None else max(1, math.ceil(settings.timeout_s)),
        memory_mb=settings.memory_mb,
        file_mb=settings.file_mb,
    )
    return CodeVerifier(
        tests_field=settings.tests_field,
        limits=limits,
        scoring=settings.scoring,
        compare=settings.compare,
        stop_after_timeout=settings.stop_after_timeout,
        python=settings.python or sys.executable,
        tmp_dir=settings.tmp_dir,
    )


def make_none(settings: NoneSettings) -> Verifier:
    from gymbench.builtin.none_verifier import NoneVerifier

    return NoneVerifier(reward=settings.reward)


@hookimpl
def gymbench_register_verifiers() -> list[Component]:
    return [
        Component(
            "exact-match",
            make_exact_match,
            "reward 1 if the normalised answer equals the task's expected_answer",
            settings=ExactMatchSettings,
        ),
        Component(
            "regex",
            make_regex,
            "reward 1 if the task's (or config's) regular expression matches; optionally grade a captured group",
            settings=RegexSettings,
        ),
        Component(
            "math",
            make_math,
            "reward 1 if the final answer (\\boxed{} or last expression) equals expected_answer (math-verify)",
            settings=MathSettings,
        ),
        Component(
            "code",
            make_code,
            "run the response's Python program against the task's tests in a confined subprocess",
            settings=CodeSettings,
        ),
        Component(
            "none", make_none, "skip verification: a constant reward (0.0 unless configured)", settings=NoneSettings
        ),
    ]
