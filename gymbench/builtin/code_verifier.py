"""The ``code`` verifier: run the response's Python program against the task's tests, confined.

**Program.** The last fenced block labelled ``python``/``py``/``python3`` in the response, else the
last unlabelled fenced block, else (when the response has no fence at all) the whole text. A block
cut off by the token limit runs to the end of the text.

**Tests** (row field ``tests`` unless configured), in one of three shapes:

* a list of cases ``[{"input": "<stdin>", "output": "<expected stdout>"}, ...]``; each case is a
  separate run of the program as ``__main__``;
* a dict ``{"inputs": [...], "outputs": [...]}`` (the APPS / CodeContests layout), read as above;
* a string: an ``assert``-style test script, run once after the program in the same namespace
  (the program runs with ``__name__ == "solution"``, so its ``if __name__ == "__main__"`` block is
  skipped). It passes when the script runs to its end.

Outputs are compared line by line ignoring trailing white space (``compare: lines``), or as
white-space separated tokens (``tokens``), or byte for byte (``exact``). The reward is the fraction
of cases passed (``scoring: fraction``) or 1 only when all pass (``all_or_nothing``).

**Outcomes.** Each case ends ``passed``, judged wrong (``wrong_output``, ``failed_assertion``),
``skipped`` (after a timeout, when ``stop_after_timeout``), or broken down: ``timeout``,
``memory_limit``, ``output_limit``, ``runtime_error``, ``network_blocked``, ``write_blocked``,
``call_blocked``, ``sandbox_error``. A blocked call names the case's outcome when the case did not
pass. Following :mod:`gymbench.builtin.verifying`, the verdict carries a failure kind only when its
reward is 0 and some case broke down (the first such kind), or when there is nothing to run:
``no_tests`` / ``invalid_tests`` (task), ``no_code`` / ``syntax_error`` (response).

**Confinement, and its limits.** See :mod:`gymbench.builtin.code_sandbox` for how a run is set up.
Enforced by the kernel: CPU time (``RLIMIT_CPU``), address space (``RLIMIT_AS``: allocations past it
raise ``MemoryError``), file size (``RLIMIT_FSIZE``, which also bounds stdout/stderr), no core
dumps, the wall-clock kill of the process group, and, where ``unshare`` is permitted (root, or
unprivileged user namespaces), a new network namespace with no usable interface. Enforced only by
a Python audit hook: no writes, deletions or renames outside the run's ``work/`` directory, no
sockets (the only network guard where namespaces are unavailable), no new processes, no ctypes.
Not prevented: reading any file the user can read; native code that skips audit events (an
already-imported C module such as ``_posixsubprocess``) escaping the hook; a program inspecting
the test script's frames in test-script mode. ``RLIMIT_NPROC`` is not set: it counts threads
(which competitive-programming solutions use for deep recursion) and root ignores it. This guards
against accidents and bad RL samples; it is **not** a security boundary against a hostile
program. For that, run the verifier inside a container or VM without credentials.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gymbench.builtin.code_sandbox import Limits, RunResult, run_confined
from gymbench.builtin.verifying import unjudged
from gymbench.types import JSONObject, Verdict

NAME = "code"
FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
PYTHON_LABELS = {"python", "py", "python3"}
NOT_BROKEN = {"passed", "wrong_output", "failed_assertion", "skipped"}
SHOWN_OUTPUT_CHARS = 200


@dataclass(frozen=True)
class Case:
    """One stdin/stdout case, or (``script`` set) the task's test script."""

    stdin: str = ""
    expected: str | None = None
    script: str | None = None


def extract_program(response_text: str) -> tuple[str, str]:
    """The program to run and where it came from (``fence`` or ``whole_text``)."""
    blocks = [(label.lower(), body) for label, body in FENCE.findall(response_text)]
    for wanted in (PYTHON_LABELS, {""}):
        chosen = [body for label, body in blocks if label in wanted]
        if chosen:
            return chosen[-1], "fence"
    return ("", "fence") if blocks else (response_text, "whole_text")


def read_cases(tests: Any) -> list[Case] | str:
    """The task's tests as cases, or a reason why they cannot be used."""
    if isinstance(tests, str):
        return [Case(script=tests)] if tests.strip() else "the test script is empty"
    if isinstance(tests, Mapping) and {"inputs", "outputs"} <= set(tests):
        if len(tests["inputs"]) != len(tests["outputs"]):
            return "'inputs' and 'outputs' differ in length"
        tests = [{"input": i, "output": o} for i, o in zip(tests["inputs"], tests["outputs"], strict=True)]
    if not isinstance(tests, list) or not all(isinstance(case, Mapping) and "output" in case for case in tests):
        return "expected a test script, a list of {'input', 'output'} cases, or {'inputs', 'outputs'}"
    return [Case(stdin=str(case.get("input") or ""), expected=str(case["output"])) for case in tests]


def same_output(got: str, expected: str, compare: str) -> bool:
    if compare == "exact":
        return got == expected
    if compare == "tokens":
        return got.split() == expected.split()
    return [line.rstrip() for line in got.rstrip().splitlines()] == [
        line.rstrip() for line in expected.rstrip().splitlines()
    ]


def case_outcome(run: RunResult, case: Case, compare: str) -> str:
    if run.ended == "ok" and (case.script is not None or same_output(run.stdout, case.expected or "", compare)):
        return "passed"
    if run.blocked and run.ended in ("ok", "runtime_error", "failed_tests"):
        return run.blocked[0]
    return {"ok": "wrong_output", "failed_tests": "failed_assertion"}.get(run.ended, run.ended)


def case_details(outcome: str, run: RunResult) -> JSONObject:
    details: dict[str, Any] = {"outcome": outcome, "duration_s": round(run.duration_s, 4), "exit_code": run.exit_code}
    if outcome != "passed":
        details["stderr"] = run.stderr_tail
    if outcome == "wrong_output":
        details["got"] = run.stdout[:SHOWN_OUTPUT_CHARS]
    return details


class CodeVerifier:
    def __init__(
        self,
        tests_field: str = "tests",
        limits: Limits | None = None,
        scoring: str = "fraction",
        compare: str = "lines",
        stop_after_timeout: bool = True,
        python: str = sys.executable,
        tmp_dir: str | None = None,
    ) -> None:
        self.tests_field = tests_field
        self.limits = limits or Limits()
        self.scoring = scoring
        self.compare = compare
        self.stop_after_timeout = stop_after_timeout
        self.python = python
        self.tmp_dir = tmp_dir

    def verify(self, row: Mapping[str, Any], response_text: str) -> Verdict:
        if row.get(self.tests_field) is None:
            return unjudged("no_tests", f"task has no {self.tests_field!r} field")
        cases = read_cases(row[self.tests_field])
        if isinstance(cases, str):
            return unjudged("invalid_tests", f"task field {self.tests_field!r}: {cases}")
        if not cases:
            return unjudged("no_tests", f"task field {self.tests_field!r} holds no cases")
        program, source = extract_program(response_text)
        if not program.strip():
            return unjudged("no_code", "the response holds no Python program", program_source=source)
        try:
            compile(program, "solution.py", "exec")
        except (SyntaxError, ValueError, RecursionError) as error:  # ValueError: NUL bytes
            return unjudged("syntax_error", f"the program does not compile: {error}", program_source=source)
        return self._score(self._run_cases(program, cases), source)

    def _run_cases(self, program: str, cases: list[Case]) -> list[tuple[str, RunResult | None]]:
        """Run case after case; after a timeout the rest are skipped, since a hang usually repeats."""
        results: list[tuple[str, RunResult | None]] = []
        stop = False
        for case in cases:
            if stop:
                results.append(("skipped", None))
                continue
            run = run_confined(
                program,
                stdin=case.stdin,
                tests=case.script,
                limits=self.limits,
                python=self.python,
                tmp_dir=self.tmp_dir,
            )
            outcome = case_outcome(run, case, self.compare)
            results.append((outcome, run))
            stop = self.stop_after_timeout and outcome == "timeout"
        return results

    def _score(self, results: list[tuple[str, RunResult | None]], source: str) -> Verdict:
        outcomes = [outcome for outcome, _ in results]
        passed = outcomes.count("passed")
        all_passed = passed == len(outcomes)
        reward = passed / len(outcomes) if self.scoring == "fraction" else float(all_passed)
        runs = [run for _, run in results if run is not None]
        details = {
            "passed": passed,
            "total": len(outcomes),
            "program_source": source,
            "cases": [case_details(o, r) if r is not None else {"outcome": o} for o, r in results],
            "confinement": runs[0].confinement if runs else {},
        }
        broken = [outcome for outcome in outcomes if outcome not in NOT_BROKEN]
        if reward == 0.0 and broken:
            return Verdict(reward=0.0, details=details, failure_kind=broken[0])
        return Verdict(reward=reward, details=details)
