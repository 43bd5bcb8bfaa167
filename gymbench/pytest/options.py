"""The pytest plugin's command-line options (``pytest --help``, group "gymbench benchmarks"),
generated from settings: each option is a setting declared once, with its type and help, in the
schema that owns it (the comparison's, the measurement's, the results store's) or, for what only a
pytest session has, in :class:`SessionOptions` here. A setting added there becomes an option.

Kept apart from :mod:`gymbench.pytest.plugin` so the hooks stay readable; like the plugin, this
module loads in every pytest run, so it imports only light schemas (no command schemas: those cost
~15 ms to make).
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from gymbench.gate.ab.settings import ABSettings
from gymbench.gate.settings import CompareSettings, TwoRuns, Verdict
from gymbench.measure import MeasureSettings
from gymbench.settings import ResultsStore, SaveRecord, doc, scalar_kind

PREFIX = "--gymbench-"
UNSET = object()
"""An option's default when the setting it gives is taken from elsewhere unless given (the
comparison's pyproject table, quick mode, the rootdir's results folder)."""


@dataclass
class SessionOptions:
    """What only a pytest session of benchmarks has; each field is an option ``--gymbench-<name>``."""

    instructions: bool = field(
        default=False,
        metadata=doc(
            "also count each benchmark's instructions under valgrind's callgrind (metric 'instructions'; "
            "needs valgrind; slow, so few calls)"
        ),
    )
    instructions_timeout: float = field(
        default=3600.0,
        metadata=doc(
            "stop counting under callgrind after this long, keeping what was counted (default 3600)",
            metavar="SECONDS",
        ),
    )
    instructions_brackets: int = field(
        default=5,
        metadata=doc(
            "counted brackets per benchmark, each after its own heap layout (default 5; each costs one "
            "more round of calls under callgrind; below 3 a comparison needs a calibration of counts)",
            metavar="N",
        ),
    )
    ab_base: str | None = field(
        default=None,
        metadata=doc(
            "instead of running the benchmarks here, compare this working tree with git ref BASE_REF: "
            "interleaved rounds in two worker processes pinned to one CPU (gymbench compare --ab)",
            metavar="BASE_REF",
            flags=("--gymbench-ab",),
        ),
    )
    # the parent session's messages to the worker sessions it starts: not for people
    instructions_worker: str | None = field(default=None, metadata={"metavar": "DIR"})
    ab_worker: bool = False
    ab_list: str | None = field(default=None, metadata={"metavar": "FILE"})


SHARED: tuple[tuple[type[Any], str, str, Any], ...] = (
    (SaveRecord, "save", "save", None),
    (ResultsStore, "results_dir", "results-dir", UNSET),
    (MeasureSettings, "quick", "quick", False),
    (TwoRuns, "baseline", "compare", None),
    (Verdict, "fail_on", "fail-on", "none"),
    (CompareSettings, "min_effect", "min-effect", UNSET),
    (Verdict, "calibration", "calibration", None),
    (MeasureSettings, "min_rounds", "min-rounds", UNSET),
    (MeasureSettings, "max_time_s", "max-time", UNSET),
    (ABSettings, "repeats", "ab-repeats", UNSET),
)
"""Settings declared elsewhere that a session offers: (schema, setting, option after ``--gymbench-``,
default in a session: ``UNSET`` leaves it to the schema's owner, anything else is the session's)."""

HELP: Mapping[str, str] = {
    "results_dir": "where results records go (default: results/ under the rootdir)",
    "fail_on": "fail the session on a regression (exit 6) or also on an inconclusive result (exit 7); "
    "default none: report only",
    "min_effect": "smallest change that matters (0.05 = 5%; default: [tool.gymbench.compare], else 0.05)",
    "calibration": "calibration file (default: latest)",
    "baseline": "compare this run with a baseline: a results file, saved name, name glob, git ref or 'latest'",
    "repeats": "A/B worker pairs (default 3)",
}
"""What a shared setting means in a session, where that differs from its schema's own help."""


def add_options(parser: pytest.Parser) -> None:
    """Every ``--gymbench-*`` option, in one group of ``pytest --help``."""
    group = parser.getgroup("gymbench", "gymbench benchmarks")
    for schema, name, option, default in SHARED:
        setting = _field(schema, name)
        given = setting.default if default is UNSET else default
        _add(group, schema, setting, PREFIX + option, None if default is UNSET else given, HELP.get(name))
    for setting in dataclasses.fields(SessionOptions):
        hidden = "help" not in setting.metadata
        option = setting.metadata.get("flags", (PREFIX + setting.name.replace("_", "-"),))[0]
        _add(group, SessionOptions, setting, option, setting.default, hide=hidden)


_HINTS: dict[type[object], dict[str, object]] = {}


def _hints(schema: type[object]) -> dict[str, object]:
    """A schema's field types, evaluated once (each evaluation costs about a millisecond)."""
    if schema not in _HINTS:
        _HINTS[schema] = typing.get_type_hints(schema)
    return _HINTS[schema]


def check_options(config: pytest.Config) -> None:
    """The checks of the schemas the shared options come from, as a usage error naming the option
    (exit 4) before anything runs: ``--gymbench-fail-on sometimes``, ``--gymbench-ab-repeats 0``."""
    from gymbench.errors import GymbenchError

    for schema, name, option, _default in SHARED:
        value = config.getoption(PREFIX + option)
        if value is None or schema is MeasureSettings:  # the measurement's are checked together
            continue
        try:
            schema(**{name: value})
        except GymbenchError as exc:
            raise pytest.UsageError(f"{PREFIX}{option} {value}: {exc}") from None


def _field(schema: type[Any], name: str) -> dataclasses.Field[object]:
    return next(setting for setting in dataclasses.fields(schema) if setting.name == name)


def _add(
    group: pytest.OptionGroup,
    schema: type[Any],
    setting: dataclasses.Field[Any],
    option: str,
    default: Any,
    help_text: str | None = None,
    *,
    hide: bool = False,
) -> None:
    """One option: a switch for a boolean setting, else a value of the setting's type."""
    kind = scalar_kind(_hints(schema)[setting.name])
    text = argparse.SUPPRESS if hide else (help_text or str(setting.metadata.get("help", ""))).replace("%", "%%")
    if kind is bool:
        group.addoption(option, action="store_true", default=bool(default), help=text)
        return
    metavar = setting.metadata.get("metavar")
    group.addoption(option, type=kind, default=default, metavar=metavar, help=text)
