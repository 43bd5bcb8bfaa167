"""What the built-in verifiers share: the rule for failure kinds.

The rule every built-in verifier follows, so that rows can be counted by ``failure_kind``:

* ``reward 0.0`` with ``failure_kind=None`` means *judged, and wrong*: the response's answer was
  found and compared with the task's expectation, and they differ.
* ``failure_kind`` is set (always with ``reward 0.0``) when the zero is not such a judgement. Where
  the cause lies is in :data:`FAILURE_SOURCES`: the **task** cannot be judged against (no expected
  answer, an invalid pattern ...), the **response** holds no answer in the form the verifier needs
  (no final answer, no program, a program that hangs or crashes), or the **verifier** itself broke
  down (its own timeout, the sandbox failing to start). Training treats them all as reward 0; a
  report can leave task and verifier failures out of the accuracy and count response failures as
  format errors.
* The ``none`` verifier is the one exception: it skips judging on purpose and says so in
  ``details`` without a failure kind, so a run that only collects rollouts is not all failures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gymbench.types import Verdict

FAILURE_SOURCES: dict[str, str] = {
    "no_expected_answer": "task",
    "no_pattern": "task",
    "invalid_pattern": "task",
    "unparseable_expected": "task",
    "no_tests": "task",
    "invalid_tests": "task",
    "no_answer": "response",
    "no_code": "response",
    "syntax_error": "response",
    "timeout": "response",
    "memory_limit": "response",
    "output_limit": "response",
    "runtime_error": "response",
    "network_blocked": "response",
    "write_blocked": "response",
    "call_blocked": "response",
    "verifier_timeout": "verifier",
    "verifier_error": "verifier",
    "sandbox_error": "verifier",
}
"""Every failure kind a built-in verifier sets, and where its cause lies: task, response or verifier."""


def unjudged(kind: str, reason: str, **details: Any) -> Verdict:
    """A verdict for a response that could not be judged: reward 0.0 and the failure kind."""
    return Verdict(reward=0.0, details={"reason": reason, **details}, failure_kind=kind)


def missing_field(row: Mapping[str, Any], field: str) -> bool:
    return row.get(field) is None
