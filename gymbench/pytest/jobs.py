"""What every job the ``gymbench`` fixture runs shares: the session's context, the settings layered
as the command line layers them, and a setting's error turned into the test's one-line failure.

The fixture's object (:mod:`gymbench.pytest.api`) and its jobs (``api_train``, ``api_tune``) import
this module; it imports none of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from gymbench.errors import GymbenchError
from gymbench.types import JSONObject

if TYPE_CHECKING:
    from gymbench.plugins import Plugins
    from gymbench.sim.launcher import SimServerHandle

ConfigSource = str | os.PathLike[str] | Mapping[str, Any] | None
T = TypeVar("T")


@dataclass
class BenchContext:
    """What the pytest session provides to every benchmark (built by the pytest plugin)."""

    plugins: Callable[[], Plugins]
    """The session's plugin registry, built on first use."""
    defaults: Callable[[str], Mapping[str, Any]]
    """Default settings for a job (``"collect"``): pyproject's table, then the pytest options."""
    sim: Callable[[], SimServerHandle]
    """The session's simulated server (a :class:`~gymbench.sim.SimServerHandle`), started on first use."""
    workdir: Callable[[], Path]
    """A fresh directory for a job's files."""
    fail: Callable[[str], object]
    """Fails the current test with a one-line message (no traceback)."""


def job_layers(context: BenchContext, job: str, config: ConfigSource, settings: Mapping[str, Any]) -> list[JSONObject]:
    """A job's settings as the command line layers them: ``[tool.gymbench.<job>]`` and the pytest
    options, then ``config`` (a mapping or a YAML/JSON file), then keyword arguments."""
    from gymbench.settings import load_settings_file

    given = load_settings_file(Path(config)) if isinstance(config, (str, os.PathLike)) else dict(config or {})
    return [dict(context.defaults(job)), given, dict(settings)]


def job_settings(
    context: BenchContext,
    schema: type[T],
    job: str,
    config: ConfigSource,
    settings: Mapping[str, Any],
    fixed: Mapping[str, Any],
    where: str | None = None,
) -> T:
    """The layers, then what running inside pytest fixes, checked by the command's own schema;
    a bad one is reported as coming from ``where`` (the method the test called)."""
    from gymbench.settings import build_settings

    layers = job_layers(context, job, config, settings)
    return build_settings(schema, (), *layers, fixed, where=where or f"gymbench.{job}")


def fail_test(context: BenchContext, problem: str) -> NoReturn:
    """The command line's one-line message as the test's failure."""
    context.fail(f"gymbench: error: {problem}")
    raise AssertionError(problem)  # not reached: fail() raises


def or_fail(context: BenchContext, work: Callable[[], T]) -> T:
    """``work()``, or its setting's error as the test's one-line failure.

    The failure is raised outside the ``except`` block, so pytest shows no chained traceback.
    """
    try:
        return work()
    except GymbenchError as exc:
        problem = str(exc)
    fail_test(context, problem)
