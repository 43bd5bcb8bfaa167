"""Settings of the gate's commands (``compare``, ``gate``, ``calibrate``) and the groups the report
commands share with them, each command's flags, ``+key=value`` and ``--config`` keys generated from
one schema. Imported when one of these commands' parser is built (the schemas cost ~20 ms to make),
never by the pytest plugin, which takes the light groups of :mod:`gymbench.gate.settings`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gymbench.gate.ab.settings import ABSettings
from gymbench.gate.settings import MAX_BRACKETS, CompareSettings, TwoRuns, Verdict
from gymbench.settings import Checked, ResultsStore, SaveRecord, at_least, doc, require, with_defaults


@dataclass
class Published(Checked):
    """Where a verdict is shown besides the terminal."""

    markdown: str | None = field(
        default=None, metadata=doc("also write the markdown summary to this file", path=True, metavar="FILE")
    )
    verbose: bool = field(default=False, metadata=doc("list passing metrics too", flags=("-v", "--verbose")))


@dataclass
class BenchSelection(Checked):
    """Which benchmarks of a suite a command runs."""

    keyword: str | None = field(
        default=None, metadata=doc("pytest -k expression selecting benchmarks", flags=("-k",), metavar="EXPR")
    )


@dataclass
class VerdictSettings(CompareSettings, ResultsStore, Verdict, Published):
    """A comparison of stored runs and its verdict (``compare``, ``report``, ``gate``)."""


@dataclass
class Suite(Checked):
    """The benchmark suite a command runs under pytest (``gate``, ``calibrate``)."""

    pytest_args: list[str] = field(
        default_factory=list, metadata=doc("the suite and pytest options (default: benches/)", positional=True)
    )


@dataclass
class CompareCommand(TwoRuns, VerdictSettings, ABSettings, BenchSelection):
    """``gymbench compare BASELINE [CANDIDATE]``, or ``--ab`` with two git refs."""

    ab: bool = field(default=False, metadata=doc("measure two git refs now, interleaved, not stored runs"))
    bench: tuple[str, ...] = field(
        default=(), metadata=doc("with --ab: benchmark files or folders (default: benches)", metavar="PATH")
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.baseline is not None, "baseline", None, "a run to compare with: gymbench compare BASELINE")


@dataclass
class GateCommand(Suite, VerdictSettings, BenchSelection):
    """``gymbench gate --base REF [SUITE ...]``: instruction counts of two commits, then the verdict."""

    base: str | None = field(
        default=None, metadata=doc("the commit to gate against (e.g. the merge base; required)", metavar="REF")
    )
    brackets: int = field(
        default=5, metadata=doc("counted brackets per benchmark (default 5, at least 3 uncalibrated)", metavar="N")
    )
    fail_on_uncounted: bool = field(
        default=False,
        metadata=doc(
            "exit 3 (inconclusive) when a benchmark went uncounted (asyncio, no measure() call); default: "
            "each is named with its timed change and the exit stays what the counts decide"
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.base is not None, "base", None, "a commit to gate against: gymbench gate --base REF")
        at_least("brackets", self.brackets, 1, MAX_BRACKETS)


@dataclass
class CalibrateCommand(Suite, SaveRecord, CompareSettings, ResultsStore, ABSettings, BenchSelection):
    """``gymbench calibrate [SUITE ...]``: reruns (or stored runs, or A/A worker pairs) give the noise."""

    runs: int | None = field(
        default=None, metadata=doc("reruns of the suite (default 5), or A/A worker pairs with --ab (10)", metavar="N")
    )
    source: str | None = field(
        default=None,
        metadata=doc("use stored runs instead (a name glob or git ref)", flags=("--from",), metavar="RUNS"),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("runs", self.runs, 1)


CalibrateCommand = with_defaults(  # type: ignore[misc]
    CalibrateCommand,
    {"save": "save name of the reruns and the calibration (default: calibration)"},
    flags={"save": ("--name",)},
    save="calibration",
)
