"""The baseline and report commands' plugin: ``compare``, ``calibrate``, ``report``, ``baselines``,
``import`` and ``export``.

Registration only: each command's flags, ``+key=value`` and ``--config`` keys are generated from its
settings schema (:mod:`gymbench.gate.settings`, :mod:`gymbench.report.settings`), imported when its
parser is built; its work (and scipy with it) from :mod:`gymbench.report.store_commands` when it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gymbench.hookspecs import hookimpl
from gymbench.types import Command

if TYPE_CHECKING:
    from gymbench.plugins import Plugins


def _lazy_run(name: str) -> Callable[[argparse.Namespace, Plugins], int]:
    def run(args: argparse.Namespace, plugins: Plugins) -> int:
        from gymbench.report import store_commands

        result: int = getattr(store_commands, name)(args, plugins)
        return result

    return run


def _settings(schema_path: str) -> Callable[[argparse.ArgumentParser], None]:
    """A command's parser, generated from its settings schema (``module:Class``), imported only when
    that command is the one run."""

    def configure(parser: argparse.ArgumentParser) -> None:
        from importlib import import_module

        from gymbench.settings import add_settings_arguments

        module, name = schema_path.split(":")
        add_settings_arguments(parser, getattr(import_module(module), name), switches=True)

    return configure


def _configure_calibrate(parser: argparse.ArgumentParser) -> None:
    from gymbench.gate.command_settings import CalibrateCommand
    from gymbench.settings import add_settings_arguments

    add_settings_arguments(parser, CalibrateCommand, switches=True, skip=("repeats",))  # --runs: the pairs
    parser.add_argument(  # a flag with an optional value (REF), which a setting cannot spell
        "--ab", nargs="?", const="", metavar="REF",
        help="interleaved A/B: calibrate the A/B gate on REF, the same commit on both sides (A/A; default: "
        "the working tree)",
    )  # fmt: skip


def _run_timings(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.jsonio import check_writable_file
    from gymbench.report.settings import TimingsCommand
    from gymbench.report.timings import run_timings
    from gymbench.settings import settings_from_args

    settings = settings_from_args(TimingsCommand, args)
    output = Path(settings.output) if settings.output is not None else None
    if output is not None:
        check_writable_file(output, "timings export", "-o")
    count = run_timings(Path(str(settings.path)), output, settings.format)
    if output is not None:
        print(f"wrote the timings of {count} rollouts to {output} ({settings.format})")
    return 0


@hookimpl
def gymbench_register_commands() -> list[Command]:
    return [
        Command("compare", "compare two runs; exit 0 pass, 1 regression, 3 inconclusive, 2 error",
                _settings("gymbench.gate.command_settings:CompareCommand"), _lazy_run("_run_compare")),
        Command("gate", "count instructions of --base REF (its own worktree and code) and of this checkout, then gate",
                _settings("gymbench.gate.command_settings:GateCommand"), _lazy_run("_run_gate")),
        Command("calibrate", "rerun a suite unchanged (A/A) to learn each benchmark's noise on this machine",
                _configure_calibrate, _lazy_run("_run_calibrate")),
        Command("report", "write a self-contained HTML report with plots from stored results",
                _settings("gymbench.report.settings:ReportCommand"), _lazy_run("_run_report")),
        Command("baselines", "list the saved runs a comparison can use",
                _settings("gymbench.report.settings:BaselinesCommand"), _lazy_run("_run_baselines")),
        Command("import", "import a pytest-benchmark JSON file into the results store",
                _settings("gymbench.report.settings:ImportCommand"), _lazy_run("_run_import")),
        Command("export", "write a gymbench results file in pytest-benchmark's JSON format",
                _settings("gymbench.report.settings:ExportCommand"), _lazy_run("_run_export")),
        Command("timings", "per-rollout timings (TTFT, ITL, TPOT, e2e, stages) of a rollouts file as CSV or JSON",
                _settings("gymbench.report.settings:TimingsCommand"), _run_timings),
    ]  # fmt: skip
