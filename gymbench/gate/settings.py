"""How a comparison decides: the minimum effect that matters, error rates, shift correction."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gymbench.errors import GymbenchError
from gymbench.measure import INSTRUCTIONS_UNIT
from gymbench.settings import (
    Checked,
    doc,
    one_of,
)

FAIL_ON = ("none", "regression", "inconclusive")
MAX_BRACKETS = 20
"""The most counted brackets per benchmark (``gate --brackets``, ``--gymbench-instructions-brackets``):
each costs a round of calls under callgrind."""
TIME_UNITS = frozenset({"s", "ms", "us", "µs", "ns"})


def is_speed_unit(unit: str) -> bool:
    """Timings and rates move together when the whole runner slows down; counts and sizes do not."""
    return unit in TIME_UNITS or unit.endswith("/s")


@dataclass
class CompareSettings(Checked):
    """How a comparison decides: every command that compares (``compare``, ``gate``, ``report``,
    ``calibrate``) offers these, and ``[tool.gymbench.compare]`` may set those of :data:`PYPROJECT_KEYS`."""

    min_effect: float = field(
        default=0.05,
        metadata=doc(
            "smallest relative change that matters, 0.05 = 5% (default 0.05), unless a benchmark sets its own"
        ),
    )
    instructions_min_effect: float = field(
        default=0.01,
        metadata=doc("the same for instruction counts, whose run-to-run noise is ~0.1% at most (default 0.01)"),
    )
    per_benchmark: dict[str, float] = field(
        default_factory=dict,
        metadata=doc("benchmark-id glob -> minimum effect; beats the marker and the default"),
    )
    alpha: float = field(
        default=0.01,
        metadata=doc(
            "false-discovery rate across the suite (Benjamini-Hochberg; default 0.01); intervals at 1 - alpha"
        ),
    )
    power: float = field(default=0.8, metadata=doc("power at which a benchmark's minimum detectable effect is stated"))
    correct_shift: bool = field(
        default=True,
        metadata=doc("correct a suite-wide shift of speed metrics (--no-shift-correction: report it only)",
                     flags=("--shift-correction",)),
    )  # fmt: skip
    metrics: tuple[str, ...] = field(
        default=(),
        metadata=doc("compare only this metric (repeatable); default: every metric both sides have",
                     flags=("--metric",), metavar="NAME"),
    )  # fmt: skip
    resamples: int = field(default=2000, metadata=doc("bootstrap resamples of an effect's interval"))
    seed: int = field(default=0, metadata=doc("seed of the bootstrap resampling"))

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.alpha < 1:
            raise GymbenchError(f"alpha must be between 0 and 1, got {self.alpha}")
        for name in ("min_effect", "instructions_min_effect"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise GymbenchError(f"{name} must be positive (0.05 = 5 %), got {value}")
        for pattern, value in self.per_benchmark.items():
            if not _positive(value) or not math.isfinite(value):
                raise GymbenchError(f"per_benchmark {pattern!r} must be a positive number (0.05 = 5 %), got {value!r}")
        if not all(isinstance(name, str) for name in self.metrics):
            raise GymbenchError(f"metrics must be metric names (strings), got {list(self.metrics)!r}")

    @property
    def confidence(self) -> float:
        return 1 - self.alpha

    def min_effect_for(self, bench_id: str, options: Mapping[str, Any], unit: str = "s") -> float:
        """Config pattern, else the benchmark's marker option, else the default.

        Instruction counts have their own option and default (``instructions_min_effect``): a
        looser threshold chosen for a noisy timing says nothing about a count's noise.
        """
        if unit == INSTRUCTIONS_UNIT:
            return _positive(options.get("instructions_min_effect")) or self.instructions_min_effect
        for pattern, value in self.per_benchmark.items():
            if fnmatch.fnmatchcase(bench_id, pattern):
                return float(value)
        return _positive(options.get("min_effect")) or self.min_effect


def _positive(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def log_threshold(min_effect: float) -> float:
    return math.log1p(min_effect)


PYPROJECT_KEYS = ("min_effect", "instructions_min_effect", "alpha", "power", "metrics", "per_benchmark")
"""The settings ``[tool.gymbench.compare]`` may set."""


def settings_from_pyproject(path: Path) -> dict[str, Any]:
    """``[tool.gymbench.compare]`` of a pyproject.toml: minimum effects, ``alpha``, ``per_benchmark``.

    The per-benchmark table maps benchmark-id globs to minimum effects, for suites whose code
    cannot carry a marker (imported pytest-benchmark suites) or where CI wants a looser gate.
    """
    from gymbench.settings import pyproject_table

    table = pyproject_table(path, "compare")
    unknown = set(table) - set(PYPROJECT_KEYS)
    if unknown:
        raise GymbenchError(
            f"{path}: unknown keys in [tool.gymbench.compare]: {', '.join(sorted(unknown))}; "
            f"known: {', '.join(PYPROJECT_KEYS)}"
        )
    return table


def compare_settings(pyproject: Path, **given: Any) -> CompareSettings:
    """Defaults ← ``[tool.gymbench.compare]`` ← the command-line values given (``None``: not given),
    built and checked as every settings object is (:func:`gymbench.settings.build_settings`)."""
    from gymbench.settings import SettingsFile, build_settings

    table = SettingsFile(settings_from_pyproject(pyproject), str(pyproject))
    try:
        build_settings(CompareSettings, (), table, {})
    except GymbenchError as exc:  # a value of the file's own: name the file
        raise GymbenchError(str(exc) if str(pyproject) in str(exc) else f"{pyproject}: {exc}") from None
    return build_settings(CompareSettings, (), table, {k: v for k, v in given.items() if v is not None})


@dataclass
class Verdict(Checked):
    """What turns a comparison into an exit status: the noise it is judged against and what fails."""

    calibration: str | None = field(
        default=None, metadata=doc("a calibration file (default: this machine's latest)", path=True, metavar="FILE")
    )
    fail_on: str = field(
        default="inconclusive",
        metadata=doc("what fails the exit code: none, regression or inconclusive (default inconclusive)"),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        one_of("fail_on", self.fail_on, FAIL_ON)


@dataclass
class TwoRuns(Checked):
    """The runs a comparison reads (``compare``, ``report``)."""

    baseline: str | None = field(
        default=None,
        metadata=doc(
            "results file, pytest-benchmark JSON, run name, name glob, git ref, or latest",
            positional=True,
            metavar="BASELINE",
        ),
    )
    candidate: str | None = field(
        default=None, metadata=doc("the same kinds (default: latest; with --ab: the working tree)", positional=True)
    )
