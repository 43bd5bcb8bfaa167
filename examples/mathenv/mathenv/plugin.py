"""mathenv's gymbench plugin: registers the ``mathenv-answer`` verifier.

Found through the ``gymbench`` entry point in pyproject.toml once the package is installed
(``pip install -e examples/mathenv``). Registration is cheap: the verifier is imported when used.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gymbench import Component, GymbenchError, hookimpl


@dataclass
class AnswerOptions:
    tolerance: float = field(default=0.0, metadata={"help": "relative tolerance for a numeric answer"})
    field: str = field(default="expected_answer", metadata={"help": "the row field holding the answer"})

    def __post_init__(self) -> None:
        if not 0 <= self.tolerance < 1:
            raise GymbenchError(f"setting 'tolerance': got {self.tolerance}, expected a share in [0, 1)")


def make_verifier(options: AnswerOptions) -> object:
    from mathenv.verifier import AnswerVerifier

    return AnswerVerifier(options.tolerance, options.field)


@hookimpl
def gymbench_register_verifiers() -> list[Component]:
    return [
        Component(
            "mathenv-answer",
            make_verifier,
            "mathenv: the last number in the response equals the expected answer (within a tolerance)",
            settings=AnswerOptions,
        )
    ]
